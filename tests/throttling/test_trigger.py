"""The dirty-page trigger moves earlier as writers outpace the checkpoint's lead."""

import pytest

from pagestore.throttling.trigger import DirtyTrigger

SLOTS = 10_000


def _feed(trigger, rate, seconds=2.0, step=0.01):
    t, dirtied = 0.0, 0
    while t < seconds:
        t += step
        dirtied += int(rate * step)
        trigger.due(0, SLOTS, dirtied, t, 0.0)
    return t, dirtied


def test_without_writes_the_trigger_is_the_configured_fraction():
    tr = DirtyTrigger(0.6)
    assert tr.threshold(SLOTS, lead=0.5) == pytest.approx(6_000)
    assert not tr.due(5_999, SLOTS, 0, 1.0, 0.5)
    assert tr.due(6_000, SLOTS, 0, 1.1, 0.5)


def test_fast_writers_bring_the_trigger_forward_by_what_they_dirty_during_the_lead():
    tr = DirtyTrigger(0.9, margin=1.0)
    _feed(tr, rate=20_000)                       # 20 k pages/s for 2 s
    assert tr.dirty_rate == pytest.approx(20_000, rel=0.05)
    # 0.2 s of lead at 20 k/s: 4,000 pages must still be clean when it is asked for
    assert tr.threshold(SLOTS, lead=0.2) == pytest.approx(6_000, rel=0.05)
    assert tr.due(6_100, SLOTS, 42_000, 2.1, 0.2)   # still 20 k/s
    assert not DirtyTrigger(0.9).due(6_100, SLOTS, 0, 0.0, 0.2)     # the fixed fraction: not yet


def test_the_trigger_never_falls_below_its_floor_nor_rises_above_the_fraction():
    tr = DirtyTrigger(0.6, floor=0.25)
    _feed(tr, rate=1_000_000)
    assert tr.threshold(SLOTS, lead=1.0) == pytest.approx(2_500)
    assert tr.threshold(SLOTS, lead=0.0) == pytest.approx(6_000)
    assert DirtyTrigger(0.1, floor=0.25).threshold(SLOTS, lead=1.0) == pytest.approx(1_000)


def test_the_rate_forgets_writers_that_stopped():
    tr = DirtyTrigger(0.9, tau=0.2)
    t, dirtied = _feed(tr, rate=50_000)
    for i in range(100):                          # 1 s without a page dirtied
        tr.due(0, SLOTS, dirtied, t + 0.01 * (i + 1), 0.2)
    assert tr.dirty_rate < 500
    assert tr.threshold(SLOTS, lead=0.2) > 8_800


def test_bad_fractions_are_refused():
    with pytest.raises(ValueError):
        DirtyTrigger(0.0)
    with pytest.raises(ValueError):
        DirtyTrigger(0.5, margin=-1)
