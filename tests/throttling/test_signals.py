import dataclasses
import time

import pytest

from pagestore.throttling import FakeClock, MonotonicClock, Signals
from pagestore.throttling.signals import Clock


def test_signals_are_frozen():
    s = Signals(cow_used=1, cow_capacity=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.cow_used = 2


def test_fill_is_used_over_capacity_and_zero_without_a_buffer():
    assert Signals(cow_used=5, cow_capacity=10).fill == 0.5
    assert Signals(cow_used=5, cow_capacity=0).fill == 0.0
    assert Signals(cow_used=15, cow_capacity=10).fill == 1.0


def test_progress_weights_recovery_pages_twice():
    s = Signals(checkpoint_running=True, checkpoint_pages=30, recovery_pages_written=30)
    assert s.progress == pytest.approx(2 / 3)
    s = Signals(checkpoint_running=True, checkpoint_pages=30,
                recovery_pages_written=30, pages_written=15)
    assert s.progress == pytest.approx(5 / 6)


def test_empty_checkpoint_counts_as_finished():
    assert Signals(checkpoint_running=True, checkpoint_pages=0).progress == 1.0


def test_dirty_ratio_is_zero_without_page_memory():
    assert Signals(dirty_pages=3, total_pages=0).dirty_ratio == 0.0
    assert Signals(dirty_pages=3, total_pages=12).dirty_ratio == 0.25


def test_fake_clock_moves_only_when_told_and_sleep_advances():
    c = FakeClock(5.0)
    assert c.now() == 5.0
    c.advance(0.5)
    c.sleep(0.25)
    c.sleep(-1)
    assert c.now() == pytest.approx(5.75)
    c.set(7.0)
    assert c.now() == 7.0


def test_fake_clock_refuses_to_go_backwards():
    c = FakeClock(1.0)
    with pytest.raises(ValueError):
        c.advance(-0.1)
    with pytest.raises(ValueError):
        c.set(0.5)


def test_clocks_satisfy_the_protocol():
    assert isinstance(FakeClock(), Clock)
    assert isinstance(MonotonicClock(), Clock)


def test_monotonic_clock_is_monotonic_and_sleeps():
    c = MonotonicClock()
    a = c.now()
    c.sleep(0.001)
    c.sleep(0)
    assert c.now() >= a + 0.0009
    assert abs(c.now() - time.monotonic()) < 1.0


def test_snapshot_builds_the_same_frozen_signals_as_keywords():
    from pagestore.throttling.signals import snapshot
    kw = dict(cow_used=3, cow_capacity=8, dirty_pages=5, total_pages=9, checkpoint_running=True,
              checkpoint_pages=7, recovery_pages_written=2, pages_written=1, pages_dirtied=11,
              in_checkpoint_page=False, writer=4, phase="pages", phase_elapsed=0.5,
              checkpoint_elapsed=1.5, last_phase_seconds=(0.1, 0.2), dirty_limit=6)
    s = snapshot(*kw.values())
    assert s == Signals(**kw)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.cow_used = 0
    with pytest.raises(TypeError):
        snapshot(1, 2, 3)
