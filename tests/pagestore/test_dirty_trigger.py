"""The store's dirty-page trigger (pagestore/throttle.py with throttling/trigger.py):
asked after every write, before the policy's check interval, and earlier when
writers dirty pages faster than a checkpoint's lead leaves room for."""

from types import SimpleNamespace

import pagestore.throttle as th
from pagestore.throttle import Throttle


class _Ckpt:
    def __init__(self, lead=0.0):
        self.asked, self.lead, self.failed = [], lead, None

    def pending(self):
        return bool(self.asked)

    def release_lead(self):
        return self.lead

    def request(self, reason):
        self.asked.append(reason)

    def hurry(self, why):
        pass


def _throttle(ckpt, check_interval=1.0, fraction=0.6):
    thresholds = []
    db = SimpleNamespace(checkpointer=ckpt,
                         signals=SimpleNamespace(cow_used=0, cow_capacity=100, dirty_pages=0, slots_total=1000,
                                                 pages_dirtied=0),
                         core=SimpleNamespace(set_throttle_thresholds=lambda cow, dirty: thresholds.append(dirty)),
                         config=SimpleNamespace(checkpoint_dirty_fraction=fraction))
    policy = SimpleNamespace(name="never", check_interval=check_interval, park_seconds=lambda s, now: 0.0)
    t = Throttle(db, policy)
    t.signals = lambda ckpt=None: None
    return t, db.signals, thresholds


def test_dirty_pages_past_the_fraction_ask_for_a_checkpoint_inside_the_policys_interval():
    # one put_many can dirty thousands of pages: waiting out the interval let memory fill
    ckpt = _Ckpt()
    t, s, _ = _throttle(ckpt)
    t.check()                                    # starts the policy's 1 s interval
    s.dirty_pages = 700
    t.check()
    assert ckpt.asked == ["dirty pages"]


def test_fast_writers_ask_for_the_checkpoint_before_the_fraction(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(th, "_monotonic", lambda: now[0])
    ckpt = _Ckpt(lead=0.2)
    t, s, thresholds = _throttle(ckpt, check_interval=0.0)
    assert thresholds == [0.25]                  # the hint is up from the trigger's floor
    for _ in range(200):                         # 2,000 pages/s for 2 s
        now[0] += 0.01
        s.pages_dirtied += 20
        s.dirty_pages = 350
        t.check()
    # due at 1000 - 1.5 * 2000/s * 0.2 s = 400 dirty pages, not the fraction's 600
    assert ckpt.asked == []
    now[0] += 0.01
    s.pages_dirtied += 20
    s.dirty_pages = 450
    t.check()
    assert ckpt.asked == ["dirty pages"]
