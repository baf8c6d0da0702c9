"""The prefault thread rests once page memory is populated: a store whose data
outgrew page memory costs no CPU while nobody uses it."""

import resource
import time

import pagestore

MiB = 1 << 20


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)     # every thread of the process
    return r.ru_utime + r.ru_stime


def test_an_idle_store_whose_slots_were_all_used_burns_no_cpu(tmp_path):
    with pagestore.open(tmp_path, memory_size=32 * MiB, checkpoint_interval=3600) as db:
        for first in range(0, 200_000, 5_000):
            db.put_many((b"%016d" % (i * 7919 % 200_000), b"v" * 100) for i in range(first, first + 5_000))
        db.checkpoint()
        stats = db.stats()
        assert stats["slots_touched"] == stats["slots_total"] and stats["evictions"] > 0
        time.sleep(0.2)                 # the last checkpoint's threads wind down
        before, t0 = _cpu_seconds(), time.monotonic()
        time.sleep(1.0)
        used, wall = _cpu_seconds() - before, time.monotonic() - t0
    assert used < 0.2 * wall, f"{used:.2f} s of CPU in {wall:.2f} s idle"
