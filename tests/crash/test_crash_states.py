"""Crash states: a workload of puts, deletes and transactions across several
checkpoints on the crash simulator, crashed at every named crash point and at
every k-th I/O operation, each crash state damaged several ways (power loss:
unsynced writes kept, dropped, cut, torn or garbled) and recovered.

Rules checked in every state:
  * the store opens, every page checksum holds and the B+tree is valid
    (`db.verify()`);
  * fsync mode: nothing acknowledged is lost and no value is wrong — the
    recovered contents equal the state after the last acknowledged
    operation, or after the one in flight;
  * log_only / background under power loss: the contents equal the state
    after some prefix of the operations (a logical WAL replayed to its first
    damaged record), never a mix;
  * a process kill (unsynced writes all kept) in log_only mode loses nothing
    acknowledged.

`make test` runs at least 1,000 states per recovery-data mode; `make torture`
(PAGESTORE_TORTURE=1) runs at least 100,000 and prints the count.
"""

import os
import random

import pytest

from pagestore import diskio
import pagestore
from pagestore.diskio import SimFS, SimulatedCrash

TORTURE = os.environ.get("PAGESTORE_TORTURE") == "1"
OPTS = dict(memory_size=2 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600,
            checkpoint_threads=2, page_size=4096, checkpoint_buffer_size=64 * 4096)
KEYS = [b"key-%03d" % i for i in range(60)]


class Run:
    """One execution of the workload; records every acknowledged state."""

    def __init__(self, seed, ops, checkpoints):
        self.seed, self.ops, self.checkpoints = seed, ops, checkpoints
        self.states = [{}]          # states[i]: contents after i acknowledged operations
        self.pending = None         # contents if the operation in flight lands

    def execute(self, db):
        rng = random.Random(self.seed)
        model = {}
        every = max(1, self.ops // self.checkpoints)
        for i in range(self.ops):
            nxt = dict(model)
            r = rng.random()
            if r < 0.55:
                k = rng.choice(KEYS)
                v = rng.randbytes(rng.choice([8, 100, 700, 5000]))
                nxt[k] = v
                self.pending = nxt
                db.put(k, v)
            elif r < 0.75:
                k = rng.choice(KEYS)
                nxt.pop(k, None)
                self.pending = nxt
                db.delete(k)
            else:
                writes = [(rng.choice(KEYS), rng.randbytes(rng.choice([10, 300])))
                          for _ in range(rng.randint(2, 5))]
                drop = rng.choice(KEYS)
                for k, v in writes:
                    nxt[k] = v
                nxt.pop(drop, None)
                self.pending = nxt
                with db.transaction() as tx:
                    for k, v in writes:
                        tx.put(k, v)
                    tx.delete(drop)
            model = nxt
            self.states.append(model)
            self.pending = None
            if (i + 1) % every == 0:
                db.checkpoint()


def open_store(sim, mode, recovery_data):
    return pagestore.open("/store", fs=sim, wal_mode=mode, recovery_data=recovery_data, **OPTS)


def run_until_crash(sim, run, mode, recovery_data):
    db = None
    try:
        db = open_store(sim, mode, recovery_data)
        run.execute(db)
        db.close()
        return False
    except SimulatedCrash:
        if db is not None:
            db._abandon()
        return True


def check_state(sim, run, mode, recovery_data, power_loss):
    with open_store(sim, mode, recovery_data) as db:
        db.verify()
        got = dict(db.scan())
        acked = run.states[-1]
        if mode == "fsync" or not power_loss:
            ok = got == acked or (run.pending is not None and got == run.pending)
            assert ok, (f"{mode}: recovered state is not the acknowledged one "
                        f"({len(got)} keys vs {len(acked)})")
        else:
            ok = any(got == s for s in run.states) or got == run.pending
            assert ok, f"{mode}: recovered state is not a prefix of the history"


def crash_states(mode, recovery_data, *, ops, checkpoints, step, seeds, seed=1):
    """Crash at every `step`-th I/O op and at every named point; returns states checked."""
    probe_sim = SimFS()
    probe = Run(seed, ops, checkpoints)
    assert not run_until_crash(probe_sim, probe, mode, recovery_data)
    total_io = probe_sim.io_count
    plans = [("io", n) for n in range(1, total_io + 1, step)]
    plans += [("point", name) for name in diskio.CRASH_POINTS]
    checked = 0
    for kind, arg in plans:
        sim = SimFS()
        if kind == "io":
            sim.arm_io(arg)
        else:
            sim.arm(arg, hit=1 + (checked % 3))
        run = Run(seed, ops, checkpoints)
        if not run_until_crash(sim, run, mode, recovery_data):
            continue            # that point was not reached by this workload
        for s in range(seeds):
            damaged = sim.clone()
            power_loss = s > 0
            damaged.crash(random.Random(s * 7919 + checked),
                          "random" if power_loss else "keep")
            check_state(damaged, run, mode, recovery_data, power_loss)
            checked += 1
    return checked


@pytest.mark.parametrize("recovery_data", ["checkpoint", "wal"])
def test_crash_states_lose_nothing_acknowledged(recovery_data):
    n = crash_states("fsync", recovery_data, ops=60, checkpoints=3, step=1, seeds=4)
    n += crash_states("log_only", recovery_data, ops=40, checkpoints=3, step=2, seeds=3, seed=2)
    print(f"\ncrash states checked ({recovery_data}): {n}")
    assert n >= 1000


@pytest.mark.parametrize("recovery_data", ["checkpoint", "wal"])
def test_encrypted_crash_states_lose_nothing_acknowledged(recovery_data, monkeypatch):
    """The same bars with pages, recovery files and WAL blocks sealed (AES-GCM)."""
    monkeypatch.setitem(OPTS, "encryption_key", bytes(range(32)))
    n = crash_states("fsync", recovery_data, ops=40, checkpoints=3, step=2, seeds=3, seed=4)
    n += crash_states("log_only", recovery_data, ops=30, checkpoints=3, step=3, seeds=2, seed=5)
    print(f"\nencrypted crash states checked ({recovery_data}): {n}")
    assert n >= 300


@pytest.mark.slow
@pytest.mark.parametrize("recovery_data", ["checkpoint", "wal"])
def test_crash_states_torture(recovery_data):
    n = 0
    for seed in range(10):
        n += crash_states("fsync", recovery_data, ops=120, checkpoints=4, step=1, seeds=10,
                          seed=100 + seed)
        n += crash_states("log_only", recovery_data, ops=80, checkpoints=3, step=1, seeds=10,
                          seed=200 + seed)
    print(f"\ncrash states checked ({recovery_data}, torture): {n}")
    assert n >= 50_000


def test_crash_during_recovery_recovers_again():
    """A second power loss at every I/O of recovery (restore, replay, the
    closing checkpoint) still recovers everything acknowledged (fsync mode)."""
    checked = 0
    for point in ("checkpoint.page_written", "checkpoint.after_start_marker",
                  "checkpoint.before_page_fsync"):
        sim = SimFS()
        sim.arm(point, hit=3)
        run = Run(5, 60, 3)
        assert run_until_crash(sim, run, "fsync", "checkpoint"), point
        sim.crash(random.Random(1), "random")
        base = sim.clone()
        probe = base.clone()
        before = probe.io_count
        with open_store(probe, "fsync", "checkpoint"):
            pass
        recovery_io = probe.io_count - before
        for n in range(1, recovery_io + 1):
            twice = base.clone()
            twice.arm_io(n)
            try:
                db = open_store(twice, "fsync", "checkpoint")
                db._abandon()
            except SimulatedCrash:
                pass
            twice.disarm()
            twice.crash(random.Random(n), "random")
            check_state(twice, run, "fsync", "checkpoint", power_loss=True)
            checked += 1
    print(f"\nsecond crashes during recovery checked: {checked}")
    assert checked >= 30


def crash_twice_states(mode, recovery_data, *, ops, checkpoints, step, reopen_step, seed=3):
    """A crash in the workload, power loss, then a crash while the store
    recovers (its restore or its recovery checkpoint), power loss again, and a
    clean open: the second recovery must find the first one's outcome. In
    "wal" mode this is the case where the range of the recovery checkpoint
    holds page records of the crashed process too (operations it never
    committed), which the rebuild must not write back."""
    probe_sim = SimFS()
    assert not run_until_crash(probe_sim, Run(seed, ops, checkpoints), mode, recovery_data)
    checked = 0
    for n in range(1, probe_sim.io_count + 1, step):
        sim = SimFS()
        sim.arm_io(n)
        run = Run(seed, ops, checkpoints)
        if not run_until_crash(sim, run, mode, recovery_data):
            continue
        first = sim.clone()
        first.crash(random.Random(n), "random")
        probe = first.clone()
        io0 = probe.io_count
        with open_store(probe, mode, recovery_data):
            pass
        reopen_io = probe.io_count - io0
        for m in range(1, reopen_io + 1, reopen_step):
            second = first.clone()
            second.arm_io(m)
            try:
                with open_store(second, mode, recovery_data):
                    pass
                continue                # the crash point lies past the recovery
            except SimulatedCrash:
                pass
            second.crash(random.Random(n * 31 + m), "random")
            check_state(second, run, mode, recovery_data, power_loss=True)
            checked += 1
    return checked


@pytest.mark.parametrize("recovery_data", ["checkpoint", "wal"])
def test_crash_during_recovery_then_recover_again(recovery_data):
    n = crash_twice_states("fsync", recovery_data, ops=40, checkpoints=3, step=9, reopen_step=5)
    print(f"\ncrash-during-recovery states checked ({recovery_data}): {n}")
    assert n >= 100
