"""How often a writer asks the throttling policy (pagestore/throttle.py).

A policy that declares `check_interval` is asked at most that often per
writer, unless the checkpoint buffer has moved by CHECK_COW_STEP of its
capacity since its last answer; a policy without one is asked on every write.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

from pagestore.throttle import Throttle


class CountingPolicy:
    name = "counting"

    def __init__(self, check_interval=0.0):
        self.check_interval = check_interval   # throttling.Policy: 0.0 asks on every write
        self.asked = 0

    def park_seconds(self, signals, now):
        self.asked += 1
        return 0.0


def _db(cow_used=300, capacity=1000):
    signals = SimpleNamespace(cow_used=cow_used, cow_capacity=capacity, dirty_pages=0, slots_total=10_000,
                              pages_dirtied=0, ckpt_pages=0)
    progress = dict(running=True, checkpoint_pages=500, recovery_pages_written=0, pages_written=0,
                    phase="recovery_files", phase_elapsed=0.01, checkpoint_elapsed=0.02,
                    last_phase_seconds={})
    ckpt = SimpleNamespace(pending=lambda: True, request=lambda reason: None,
                           phase_progress=lambda: progress)
    core = SimpleNamespace(set_throttle_thresholds=lambda cow, dirty: None)
    return SimpleNamespace(signals=signals, checkpointer=ckpt, core=core,
                           config=SimpleNamespace(checkpoint_dirty_fraction=0.75))


def test_a_policy_with_an_interval_is_asked_once_per_interval():
    policy = CountingPolicy(check_interval=60.0)
    t = Throttle(_db(), policy)
    for _ in range(1000):
        t.check()
    assert policy.asked == 1


def test_a_policy_with_an_interval_is_asked_again_when_the_buffer_moves():
    db = _db(cow_used=300, capacity=1000)
    policy = CountingPolicy(check_interval=60.0)
    t = Throttle(db, policy)
    t.check()
    db.signals.cow_used = 300 + int(Throttle.CHECK_COW_STEP * 1000) - 1   # less than one step
    t.check()
    assert policy.asked == 1
    db.signals.cow_used = 300 + int(Throttle.CHECK_COW_STEP * 1000)       # one step
    t.check()
    assert policy.asked == 2


def test_a_policy_with_an_interval_is_asked_once_it_has_passed():
    policy = CountingPolicy(check_interval=0.001)
    t = Throttle(_db(), policy)
    t.check()
    threading.Event().wait(0.005)
    t.check()
    assert policy.asked == 2


def test_each_writer_thread_is_asked_on_its_own_schedule():
    policy = CountingPolicy(check_interval=60.0)
    t = Throttle(_db(), policy)
    t.check()
    other = threading.Thread(target=t.check)
    other.start()
    other.join()
    assert policy.asked == 2


def test_a_policy_with_a_zero_interval_is_asked_on_every_write():
    policy = CountingPolicy()
    t = Throttle(_db(), policy)
    for _ in range(50):
        t.check()
    assert policy.asked == 50


def test_the_default_policy_declares_an_interval_below_its_smallest_park():
    from pagestore import throttling
    policy = throttling.make_policy(None)
    assert 0 < policy.check_interval < policy.min_quantum


class RecordingPolicy(CountingPolicy):
    def park_seconds(self, signals, now):
        self.signals = signals
        return 0.0


def test_a_checkpoint_the_core_began_counts_as_running_before_the_checkpointer_says_so():
    # between the core's begin (copies start) and the checkpointer's progress update
    db = _db()
    db.config.recovery_data = "checkpoint"
    progress = db.checkpointer.phase_progress()
    progress.update(running=False, checkpoint_pages=900, recovery_pages_written=900, pages_written=900,
                    phase="begin")
    db.signals.ckpt_pages = 0
    policy = RecordingPolicy()
    t = Throttle(db, policy)
    t.check()
    assert not policy.signals.checkpoint_running          # nothing begun: idle
    db.signals.ckpt_pages = 420                           # the core flagged 420 pages
    t.check()
    s = policy.signals
    assert s.checkpoint_running and s.checkpoint_pages == 420
    assert s.recovery_pages_written == 0 and s.pages_written == 0   # not the last checkpoint's


def test_a_dirty_fraction_below_the_hint_starts_checkpoints_at_that_fraction(tmp_path):
    # The trigger is checked only while the core's hint is up: the hint must
    # follow a low checkpoint_dirty_fraction down.
    import pagestore
    with pagestore.open(tmp_path / "s", memory_size=16 << 20, checkpoint_dirty_fraction=0.1,
                        checkpoint_interval=1000.0, wal_segment_size=4 << 20) as db:
        for j in range(30_000):
            db.put(b"%016x" % (j * 0x9E3779B97F4A7C15 % (1 << 64)), b"v" * 200)
        db.checkpoint()
        slots = db.stats()["slots_total"]
        begun = [h["pages"] for h in db.stats()["checkpoint_history"] if h["reason"] == "dirty pages"]
    assert begun, "no checkpoint was started by the dirty-page trigger"
    assert begun[0] < 0.25 * slots, (begun, slots)      # it began at 0.5 before
