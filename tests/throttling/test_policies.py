import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagestore.throttling import (POLICIES, AdaptivePolicy, FakeClock, Signals, fill_rate_park,
                        make_policy)
from pagestore.throttling.policies import ExponentialBackoffPolicy, SpeedBasedPolicy


def cp(**kw):
    base = dict(cow_capacity=100, total_pages=1000, checkpoint_running=True,
                checkpoint_pages=300, in_checkpoint_page=True, writer=0)
    base.update(kw)
    return Signals(**base)


# -- factory ---------------------------------------------------------------

def test_policies_lists_every_name_with_the_default_first():
    assert POLICIES[0] == "adaptive"
    assert set(POLICIES) == {"adaptive", "disabled", "exponential_backoff",
                             "fill_rate", "speed_based"}


@pytest.mark.parametrize("name", POLICIES)
def test_make_policy_builds_each_name_on_the_given_clock(name):
    clock = FakeClock()
    p = make_policy(name, clock)
    assert p.name == name and p.clock is clock


def test_make_policy_without_a_name_is_the_default_and_unknown_names_fail():
    assert make_policy().name == "adaptive"
    with pytest.raises(ValueError):
        make_policy("no_such_policy")


@pytest.mark.parametrize("name", POLICIES)
def test_no_policy_parks_outside_a_checkpoint(name):
    p = make_policy(name, FakeClock())
    for i in range(50):
        s = Signals(cow_used=0, cow_capacity=100, dirty_pages=700, total_pages=1000,
                    pages_dirtied=i * 10, writer=0)
        assert p.park_seconds(s, i * 0.001) == 0.0


@pytest.mark.parametrize("name", POLICIES)
def test_no_policy_parks_for_an_empty_checkpoint(name):
    p = make_policy(name, FakeClock())
    for i in range(20):
        assert p.park_seconds(cp(checkpoint_pages=0, cow_used=100), i * 0.001) == 0.0


# -- disabled ----------------------------------------------------------------

def test_disabled_never_parks_even_with_a_full_buffer():
    p = make_policy("disabled")
    assert p.park_seconds(cp(cow_used=100), 0.0) == 0.0


# -- exponential backoff -----------------------------------------------------

def test_backoff_does_not_park_at_or_below_two_thirds():
    p = ExponentialBackoffPolicy()
    assert p.park_seconds(cp(cow_used=66), 0.0) == 0.0
    assert p.park_seconds(cp(cow_used=200, cow_capacity=300), 0.0) == 0.0


def test_backoff_grows_by_5_percent_per_throttled_call_from_4_microseconds():
    p = ExponentialBackoffPolicy()
    parks = [p.park_seconds(cp(cow_used=70), 0.0) for _ in range(100)]
    assert parks[0] == pytest.approx(4e-6)
    for a, b in zip(parks, parks[1:]):
        assert b == pytest.approx(a * 1.05)
    assert parks[-1] == pytest.approx(4e-6 * 1.05 ** 99)


def test_backoff_resets_when_the_fill_drops_below_the_threshold():
    p = ExponentialBackoffPolicy()
    for _ in range(30):
        p.park_seconds(cp(cow_used=90), 0.0)
    assert p.park_seconds(cp(cow_used=50), 0.0) == 0.0
    assert p.park_seconds(cp(cow_used=90), 0.0) == pytest.approx(4e-6)


def test_backoff_skips_writes_known_to_miss_the_checkpoint():
    p = ExponentialBackoffPolicy()
    assert p.park_seconds(cp(cow_used=90, in_checkpoint_page=False), 0.0) == 0.0
    assert p.exponent == 0
    assert p.park_seconds(cp(cow_used=90, in_checkpoint_page=None), 0.0) == pytest.approx(4e-6)


def test_backoff_reaches_seconds_after_a_few_hundred_calls():
    p = ExponentialBackoffPolicy()
    last = 0.0
    for _ in range(300):
        last = p.park_seconds(cp(cow_used=100), 0.0)
    assert last > 5.0


# -- fill rate ----------------------------------------------------------------

def test_fill_rate_is_10_microseconds_just_ahead_and_1_second_when_full():
    assert fill_rate_park(0.5 + 1e-12, 0.5) == pytest.approx(1e-5)
    assert fill_rate_park(1.0, 0.0) == pytest.approx(1.0)
    assert fill_rate_park(1.0, 0.9) == pytest.approx(1.0)


def test_fill_rate_is_zero_at_or_behind_progress_and_at_progress_one():
    assert fill_rate_park(0.4, 0.5) == 0.0
    assert fill_rate_park(0.5, 0.5) == 0.0
    assert fill_rate_park(1.0, 1.0) == 0.0


def test_fill_rate_policy_uses_the_weighted_progress():
    p = make_policy("fill_rate")
    # progress = (2*150 + 0)/(3*300) = 1/3; fill = 2/3 -> x = 0.5 -> 10us * 1e5**0.5
    park = p.park_seconds(cp(cow_used=200, cow_capacity=300, recovery_pages_written=150), 0.0)
    assert park == pytest.approx(1e-5 * 1e5 ** 0.5)


def test_fill_rate_policy_parks_the_full_second_with_a_full_buffer_at_start():
    p = make_policy("fill_rate")
    assert p.park_seconds(cp(cow_used=100), 0.0) == pytest.approx(1.0)
    assert p.park_seconds(cp(cow_used=100, in_checkpoint_page=False), 0.0) == 0.0


@given(st.floats(0, 0.999), st.floats(0, 1), st.floats(0, 1))
def test_fill_rate_is_bounded_and_monotone_in_fill(progress, f1, f2):
    lo, hi = sorted((f1, f2))
    a, b = fill_rate_park(lo, progress), fill_rate_park(hi, progress)
    assert 0.0 <= a <= b <= 1.0 + 1e-9


# -- speed based ---------------------------------------------------------------

def drive_speed_based(dirty_pages, total=1000, cow_used=0, steps=10):
    clock = FakeClock()
    p = SpeedBasedPolicy(clock)
    park = 0.0
    for i in range(steps + 1):
        t = i * 0.1
        s = cp(cow_used=cow_used, total_pages=total, checkpoint_pages=3000,
               recovery_pages_written=150 * i, pages_dirtied=1000 * i,
               dirty_pages=0 if i == 0 else dirty_pages, in_checkpoint_page=False)
        park = p.park_seconds(s, t)
    return park


def test_speed_based_parks_threads_over_target_speed():
    # done = 1000 of 3000 at 1000 pages/s -> 2 s left; targetSpeed = 0.25*1000/2
    assert drive_speed_based(500) == pytest.approx(1 / 125, rel=1e-6)


def test_speed_based_does_not_park_under_the_target_ratio():
    assert drive_speed_based(100) == 0.0


def test_speed_based_leaves_writers_to_the_hard_limit_at_75_percent():
    assert drive_speed_based(750) == 0.0


def test_speed_based_triples_the_park_when_clean_space_is_low():
    # dirty 0.71: targetSpeed = 0.04*1000/2 = 20; factor 3 -> 3/20
    assert drive_speed_based(710) == pytest.approx(3 / 20, rel=1e-6)


def test_speed_based_needs_a_measured_speed_before_parking():
    p = SpeedBasedPolicy(FakeClock())
    assert p.park_seconds(cp(dirty_pages=600, in_checkpoint_page=False), 0.0) == 0.0
    # the checkpointer made no progress: a speed of zero never divides
    assert p.park_seconds(cp(dirty_pages=600, pages_dirtied=50, in_checkpoint_page=False), 0.5) == 0.0


def test_speed_based_protects_the_buffer_with_the_fill_rate_law():
    p = SpeedBasedPolicy(FakeClock())
    assert p.park_seconds(cp(cow_used=100), 0.0) == pytest.approx(1.0)


# -- adaptive ----------------------------------------------------------------

def drive_adaptive(policy, seconds, cow_per_step, start=0.0, dt=0.001,
                   rec_speed=1000.0, cp_pages=2000, capacity=100, dirty_per_step=1, **extra):
    """Feed a recovery-file phase at ``rec_speed`` with copies taken every step."""
    parks = []
    used = dirtied = 0
    for i in range(int(seconds / dt)):
        t = start + i * dt
        used = min(capacity, used + cow_per_step)
        dirtied += dirty_per_step
        s = Signals(cow_used=int(used), cow_capacity=capacity, dirty_pages=dirtied,
                    total_pages=100000, checkpoint_running=True, checkpoint_pages=cp_pages,
                    recovery_pages_written=min(cp_pages, int((t - start) * rec_speed)),
                    pages_dirtied=dirtied, in_checkpoint_page=cow_per_step > 0, writer=0,
                    phase="recovery_files", phase_elapsed=t - start, checkpoint_elapsed=t - start,
                    **extra)
        parks.append(policy.park_seconds(s, t))
    return parks


def phase_signals(phase, **kw):
    base = dict(cow_capacity=100, total_pages=1000, checkpoint_running=True, checkpoint_pages=1000,
                in_checkpoint_page=None, writer=0, phase=phase)
    base.update(kw)
    return Signals(**base)


def test_adaptive_parks_no_more_than_max_park_with_a_full_buffer():
    p = AdaptivePolicy(FakeClock())
    parks = drive_adaptive(p, 0.2, cow_per_step=100)
    assert max(parks) == pytest.approx(p.max_park)
    assert all(0.0 <= x <= p.max_park for x in parks)


def test_adaptive_without_a_phase_falls_back_to_a_capped_fill_rate():
    p = AdaptivePolicy(FakeClock())
    for i in range(10):
        park = p.park_seconds(cp(cow_used=100, pages_dirtied=i), i * 0.01)
        assert park == pytest.approx(p.max_park)
    assert p.park_seconds(cp(cow_used=10, pages_dirtied=11), 0.2) == pytest.approx(
        fill_rate_park(0.1, 0.0))
    assert p.park_seconds(cp(cow_used=10, in_checkpoint_page=False), 0.3) == 0.0


def test_adaptive_does_not_park_when_the_budget_outlasts_the_phase():
    p = AdaptivePolicy(FakeClock())
    # 100 slots for 2 s of recovery; writers take one slot every 100 ms
    parks = drive_adaptive(p, 1.0, cow_per_step=0.01)
    assert max(parks) == 0.0


def test_adaptive_paces_writers_that_would_overrun_the_buffer():
    p = AdaptivePolicy(FakeClock())
    # 1 slot per ms would fill the 100-slot buffer in 0.1 s of a 2 s phase
    parks = drive_adaptive(p, 0.3, cow_per_step=1)
    assert sum(parks) > 0.05
    assert max(parks) <= p.max_park


def test_adaptive_park_grows_with_the_fill_ahead_of_the_schedule():
    # 0.1 s into the window, 500 of 1000 recovery pages written (0.1 s left at
    # the measured speed) and last time's fsync of 0.05 s: a 0.25 s window, in
    # which the schedule allows 40 % of the 95-slot budget now.
    last = (0.0, 0.0, 0.1, 0.05, 0.0, 0.0)

    def park(used, **kw):
        kw.setdefault("head_start", 0.0)
        p = AdaptivePolicy(FakeClock(), quantum=0.0, **kw)
        return p, p.park_seconds(phase_signals(
            "recovery_files", cow_used=used, recovery_pages_written=500, phase_elapsed=0.1,
            checkpoint_elapsed=0.1, last_phase_seconds=last), 0.0)

    p, first = park(30, max_park=1.0)
    assert first == 0.0
    assert p.window == pytest.approx(0.25)
    parks = [park(u, max_park=1.0)[1] for u in (50, 60, 70, 94)]
    assert all(a < b for a, b in zip(parks, parks[1:]))
    assert parks[0] == pytest.approx(0.25 * 50 / 95 - 0.1)
    assert park(94)[1] == pytest.approx(AdaptivePolicy().max_park)
    # the head start lets the first 30 % of the budget go at once (the copies
    # of the hot upper tree pages every checkpoint needs first), then the rest
    # of the budget follows the same schedule
    assert park(28, head_start=0.3, max_park=1.0)[1] == 0.0
    assert park(50, head_start=0.3, max_park=1.0)[1] == 0.0     # behind the schedule
    assert park(80, head_start=0.3, max_park=1.0)[1] == pytest.approx(
        0.25 * (80 / 95 - 0.3) / 0.7 - 0.1)


def test_adaptive_counts_the_recovery_fsync_before_the_buffer_drains():
    # The recovery files are all written, the fsync is under way: nothing
    # drains until it ends, so a full budget parks for the fsync left.
    last = (0.0, 0.0, 0.1, 0.04, 0.0, 0.0)
    p = AdaptivePolicy(FakeClock())
    park = p.park_seconds(phase_signals("recovery_fsync", cow_used=96, recovery_pages_written=1000,
                                        phase_elapsed=0.01, checkpoint_elapsed=0.11,
                                        last_phase_seconds=last), 0.0)
    assert park == pytest.approx(0.03)
    # past its expected length the fsync is assumed to end within a quarter of it
    park = p.park_seconds(phase_signals("recovery_fsync", cow_used=96, recovery_pages_written=1000,
                                        phase_elapsed=0.2, checkpoint_elapsed=0.3,
                                        last_phase_seconds=last), 0.0)
    assert park == pytest.approx(0.01)


def test_adaptive_in_the_page_phase_parks_only_over_the_budget():
    p = AdaptivePolicy(FakeClock())
    assert p.park_seconds(phase_signals("pages", cow_used=90, pages_written=100,
                                        phase_elapsed=0.01), 0.0) == 0.0
    park = p.park_seconds(phase_signals("pages", cow_used=100, pages_written=100,
                                        phase_elapsed=0.01), 0.0)
    # 5 slots over the budget, freed at 10 000 pages/s: below a quantum, so a quantum
    assert park == pytest.approx(p.min_quantum)


def test_adaptive_never_parks_in_the_page_fsync_without_a_dirty_limit():
    p = AdaptivePolicy(FakeClock())
    assert p.park_seconds(phase_signals("page_fsync", cow_used=0, dirty_pages=1000,
                                        pages_written=1000), 0.0) == 0.0


def test_adaptive_paces_dirty_pages_against_a_blocking_limit():
    p = AdaptivePolicy(FakeClock(), quantum=0.0)
    last = (0.0, 0.0, 0.1, 0.02, 0.05, 0.02)
    kw = dict(cow_used=0, recovery_pages_written=1000, pages_written=500, phase_elapsed=0.025,
              checkpoint_elapsed=0.145, last_phase_seconds=last)
    assert p.park_seconds(phase_signals("pages", dirty_pages=900, **kw), 0.0) == 0.0
    park = p.park_seconds(phase_signals("pages", dirty_pages=900, dirty_limit=1000, **kw), 0.0)
    assert 0.0 < park <= p.max_park
    assert p.park_seconds(phase_signals("pages", dirty_pages=100, dirty_limit=1000, **kw), 0.0) == 0.0


def test_adaptive_forgets_the_checkpoint_when_it_ends():
    p = AdaptivePolicy(FakeClock())
    drive_adaptive(p, 0.2, cow_per_step=100)
    assert p.park_seconds(Signals(total_pages=1000, writer=0), 0.3) == 0.0
    assert p.park_seconds(cp(cow_used=0, recovery_pages_written=300, pages_written=300,
                             pages_dirtied=5, phase="page_fsync"), 0.31) == 0.0


signal_st = st.builds(
    Signals,
    cow_used=st.integers(0, 200), cow_capacity=st.integers(0, 200),
    dirty_pages=st.integers(0, 2000), total_pages=st.integers(0, 2000),
    checkpoint_running=st.booleans(), checkpoint_pages=st.integers(0, 2000),
    recovery_pages_written=st.integers(0, 2000), pages_written=st.integers(0, 2000),
    pages_dirtied=st.integers(0, 10 ** 6), in_checkpoint_page=st.sampled_from([True, False, None]),
    writer=st.integers(0, 3))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(signal_st, st.floats(0, 0.05)), min_size=1, max_size=40))
def test_every_policy_parks_a_finite_non_negative_time(seq):
    for name in POLICIES:
        p = make_policy(name, FakeClock())
        now = 0.0
        for s, dt in seq:
            now += dt
            park = p.park_seconds(s, now)
            assert park >= 0.0 and not math.isnan(park)
            if name == "adaptive":
                assert park <= p.max_park
            if name == "fill_rate":
                assert park <= 1.0 + 1e-9


def test_every_policy_declares_what_the_policy_protocol_asks():
    # The store reads name and check_interval directly (no probing), so a
    # policy that forgot one would fail at open, not fall back silently.
    from pagestore.throttling import POLICIES, Policy, make_policy
    for name in POLICIES:
        policy = make_policy(name)
        declared = {n for n in Policy.__annotations__} | {"park_seconds"}
        assert all(hasattr(type(policy), n) for n in declared), name
        assert policy.name == name and isinstance(policy.check_interval, float)
