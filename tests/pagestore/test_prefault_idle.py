"""The prefault thread rests once page memory is populated: a store whose data
outgrew page memory costs no CPU while nobody uses it."""

import resource
import threading
import time

import pagestore

MiB = 1 << 20


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)     # every thread of the process
    return r.ru_utime + r.ru_stime


def _idle_window(seconds: float = 1.0) -> tuple[float, float]:
    """(CPU seconds the store's threads used, CPU seconds a thread that never
    sleeps got) over `seconds` of idleness. On a loaded machine a spinning
    thread gets only its share of a core, so the store's use is weighed
    against what a spinning thread of our own got in the same window, not
    against the wall clock: a store thread that spins gets about as much."""
    spun, stop = [0.0], threading.Event()

    def spin():
        t0 = time.thread_time()
        while not stop.is_set():
            pass
        spun[0] = time.thread_time() - t0

    before, main0 = _cpu_seconds(), time.thread_time()
    spinner = threading.Thread(target=spin)
    spinner.start()
    time.sleep(seconds)
    stop.set()
    spinner.join()
    used = _cpu_seconds() - before - spun[0] - (time.thread_time() - main0)
    return used, spun[0]


def test_an_idle_store_whose_slots_were_all_used_burns_no_cpu(tmp_path):
    with pagestore.open(tmp_path, memory_size=32 * MiB, checkpoint_interval=3600) as db:
        for first in range(0, 200_000, 5_000):
            db.put_many((b"%016d" % (i * 7919 % 200_000), b"v" * 100) for i in range(first, first + 5_000))
        db.checkpoint()
        stats = db.stats()
        assert stats["slots_touched"] == stats["slots_total"] and stats["evictions"] > 0
        # The last checkpoint's threads wind down at the machine's pace:
        # measure windows until one is idle. A thread that spins burns CPU in
        # every window, so none would pass.
        windows = []
        for _ in range(30):
            used, spun = _idle_window()
            windows.append(f"{used:.2f}/{spun:.2f}")
            if used < 0.2 * spun:
                break
    assert used < 0.2 * spun, f"CPU s of the store / of a spinning thread, per idle window: {windows}"
