"""Full rounds: a SimFile.fsync that holds a writer's sync until every other
writer is asleep in the commit gate, so a group-commit test's group sizes
follow from the gate's rules, not from how fast the machine schedules threads."""

import threading
import time

from pagestore.diskio.simfile import SimFile

WRITER = "writer-"      # name prefix of the threads whose syncs are held
_CAP = 30.0             # seconds all holds together may take; past it syncs go on unheld


def waiting(gate) -> int:
    """Committers asleep in `gate` (the C gate counts them itself)."""
    st = gate.stats()
    return st["waiting"] if "waiting" in st else len(gate._waiting)


def hold_full_rounds(monkeypatch, wal, delay=0.0):
    """Make each writer's fsync wait until every live writer is either asleep in the
    gate or syncing too; then sleep `delay` (a device flush) and sync. Returns a dict
    whose "gave_up" is True if the cap ran out (a gate that never lets writers sleep)."""
    real = SimFile.fsync
    lock = threading.Lock()
    state = {"syncing": 0, "gave_up": False, "deadline": time.monotonic() + _CAP}

    def live():
        return sum(1 for t in threading.enumerate() if t.name.startswith(WRITER))

    def fsync(self):
        if not threading.current_thread().name.startswith(WRITER):
            return real(self)
        with lock:
            state["syncing"] += 1
        try:
            while not state["gave_up"] and waiting(wal._gate) + state["syncing"] < live():
                if time.monotonic() > state["deadline"]:
                    state["gave_up"] = True
                time.sleep(0.0002)
            if delay:
                time.sleep(delay)
            real(self)
        finally:
            with lock:
                state["syncing"] -= 1

    monkeypatch.setattr(SimFile, "fsync", fsync)
    return state
