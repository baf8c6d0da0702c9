"""`checkpoint_spread`: a store's timed checkpoints pace their page writes;
the checkpoints a caller asks for do not (checkpoint/pacing.py)."""

import time
from types import SimpleNamespace

import pagestore
from pagestore import _native
from pagestore.checkpoint.checkpointer import DEFAULT_CHUNK_PAGES

SMALL = dict(memory_size=16 << 20, wal_segment_size=4 << 20)


def test_a_timed_checkpoint_of_a_store_is_spread_and_loses_nothing(tmp_path):
    # A buffer as big as page memory: every page of the checkpoint may be paced
    # (with 1,024 slots the ~620 pages sit at the 60 % line and may not be).
    with pagestore.open(tmp_path / "s", checkpoint_interval=0.5, checkpoint_spread=1.0,
                        checkpoint_buffer_size=16 << 20, **SMALL) as db:
        db.put_many((b"%08d" % i, b"v" * 100) for i in range(20_000))
        end = time.monotonic() + 120
        while True:
            last = db.stats()["last_checkpoint"]
            if last and last["reason"] == "interval" and last["pages"] > 0:
                break
            assert time.monotonic() < end, "no timed checkpoint"
            time.sleep(0.05)
        assert abs(last["paced_until"] - 0.5) < 1e-6 and last["hurried"] is None
        # The schedule runs from the page phase's start to 0.5 s after the
        # checkpoint began, and the last chunk is due no earlier than
        # (pages - chunk) / pages of the way: the checkpoint cannot end sooner,
        # however long its earlier phases took on a loaded machine (which is
        # what shortens the page phase itself).
        last_due = 0.5 * max(0, last["pages"] - DEFAULT_CHUNK_PAGES) / last["pages"]
        assert last["total_seconds"] >= last_due > 0.2, last
        explicit = db.checkpoint()
        assert explicit["paced_until"] is None
    with pagestore.open(tmp_path / "s", **SMALL) as db:
        assert len(db) == 20_000 and db[b"%08d" % 19_999] == b"v" * 100



class _Ckpt:
    """The checkpointer as Throttle.make_room sees it, recording what it is asked."""

    def __init__(self, running):
        self.running, self.asked, self.failed = running, [], None

    def progress(self):
        return dict(running=self.running, checkpoint_pages=10, recovery_pages_written=10, pages_written=0)

    def pending(self):
        return False

    def release_lead(self):
        return 0.0

    def request(self, reason):
        self.asked.append(("request", reason))

    def hurry(self, why):
        self.asked.append(("hurry", why))


def _throttle(running):
    from pagestore.throttle import Throttle
    ckpt = _Ckpt(running)
    signals = SimpleNamespace(cow_used=0, slots_total=100, dirty_pages=60, ckpt_pages=40,
                              rollback_pages=1, rollback_ops=1, rollback_ops_done=0)
    db = SimpleNamespace(checkpointer=ckpt, signals=signals,
                         core=SimpleNamespace(set_throttle_thresholds=lambda cow, dirty: None),
                         config=SimpleNamespace(checkpoint_dirty_fraction=0.6))
    t = Throttle(db, policy=SimpleNamespace(name="none", check_interval=0.0))
    t.NOMEM_WAIT = 0.01
    return t, ckpt


def test_a_writer_short_of_clean_slots_hurries_the_running_checkpoint():
    # Its page writes are what clean slots: a paced schedule must not hold the writer.
    t, ckpt = _throttle(running=True)
    t.make_room(SimpleNamespace(code=_native.PS_E_NOMEM))
    assert ckpt.asked == [("hurry", "memory")]


def test_a_writer_short_of_clean_slots_without_a_checkpoint_asks_for_one():
    t, ckpt = _throttle(running=False)
    t.make_room(SimpleNamespace(code=_native.PS_E_NOMEM))
    assert ckpt.asked == [("request", "page memory full")]


def test_a_writer_stalled_on_a_full_checkpoint_buffer_hurries_the_checkpoint():
    t, ckpt = _throttle(running=True)
    t.make_room(SimpleNamespace(code=_native.PS_E_CKPT_FULL))
    assert ckpt.asked == [("hurry", "stall")] and t.stalls == 1


def test_a_writer_the_policy_parks_during_a_checkpoint_hurries_it():
    # speed_based parks on dirty pages against the checkpoint's write speed,
    # which pacing lowers: no park may come from the spread schedule.
    t, ckpt = _throttle(running=True)
    t.policy = SimpleNamespace(name="parks", park_seconds=lambda signals, now: 0.001)
    t.signals = lambda ckpt=None: None
    t._store.signals = SimpleNamespace(cow_used=0, cow_capacity=100, dirty_pages=0, slots_total=100,
                                       pages_dirtied=0)
    t.check()
    assert ckpt.asked == [("hurry", "park")] and t.parks == 1
