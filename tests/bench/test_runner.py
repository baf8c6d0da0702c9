"""The measuring loop: overhead against a real store, repeatability, modes."""

import resource

import pytest

from bench.runner import run


def test_noop_store_measures_10x_a_peer():
    # rocksdict (raw mode, no fsync) is a real store with in-memory puts: if the harness cost
    # anywhere near its per-op time the ratio would collapse. Compared in CPU per op, which
    # the rest of a shared machine's load does not move as it moves wall-clock throughput.
    peer = _cpu_per_op("rocksdict")
    noop = _cpu_per_op("noop", ops=300_000)
    assert noop * 10 <= peer, (noop, peer)


def _cpu_per_op(store, ops=100_000):
    """Process CPU seconds per op of a run of a fixed number of ops: unlike wall-clock
    throughput it does not move with what else the shared machine runs meanwhile."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    s = run(dict(store=store, ops=ops, warmup=0, key_range=100_000))["summary"]
    after = resource.getrusage(resource.RUSAGE_SELF)
    assert s["ops"] == ops
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / ops


def test_two_runs_of_one_config_cost_the_same():
    a = _cpu_per_op("lmdb_writemap")
    b = _cpu_per_op("lmdb_writemap")
    assert 0.5 < a / b < 2.0, (a, b)  # loose: caches and the sampler's wake-ups still vary a little


def test_fixed_rate_holds_the_rate_and_threads_add_up():
    r = run(dict(store="noop", scenario="fixed-rate", rate=4000, threads=2, duration=3, warmup=0.2))
    s = r["summary"]
    assert s["threads"] == 2
    # The limiter catches up after a stall, so one starved second is followed by a
    # fast one: the run as a whole and the typical (median) second keep the rate,
    # while a limiter that bursts or idles moves the median far off it.
    assert s["throughput"] == pytest.approx(4000, rel=0.1)
    per_second = sorted(t["throughput"] for t in r["timeseries"])
    assert per_second[len(per_second) // 2] == pytest.approx(4000, rel=0.1), per_second


def test_op_budget_and_mixed_ops():
    r = run(dict(store="sqlite", ops=3000, warmup=0, preload=True, key_range=2000,
                 mix="put=2,get=2,scan=1,delete=1", scan_len=5))
    assert r["summary"]["ops"] == 3000


def test_bad_config_is_a_value_error():
    with pytest.raises(ValueError, match="wal_mode"):
        run(dict(store="noop", wal_mode="sometimes"))
    with pytest.raises(ValueError, match="unknown option"):
        run(dict(store="noop", turbo=True))
