"""The log-bucket histogram against numpy on known data."""

import numpy as np
import pytest

from bench.histogram import LogHistogram

QS = [0, 1, 10, 50, 90, 99, 99.9, 100]


def _data():
    rng = np.random.default_rng(11)
    return {
        "lognormal": rng.lognormal(10, 1.5, 100_000).astype(np.int64),
        "small ints": rng.integers(0, 300, 10_000),
        "ramp": np.arange(1, 100_001),
        "heavy tail": (rng.pareto(1.1, 50_000) * 1_000).astype(np.int64) + 200,
    }


@pytest.mark.parametrize("name", list(_data()))
def test_percentiles_match_numpy_within_bucket_precision(name):
    data = _data()[name]
    h = LogHistogram()
    for part in np.array_split(data, 7):  # recorded in pieces, as the loop does
        h.record_many(part.tolist())
    assert h.count == data.size
    assert h.min == data.min() and h.max == data.max()
    assert h.mean() == pytest.approx(data.mean())
    for q in QS:
        want = np.percentile(data, q, method="inverted_cdf")
        assert h.percentile(q) == pytest.approx(want, rel=0.005, abs=1.0), q


def test_merge_equals_recording_everything_in_one():
    data = _data()["lognormal"]
    a, b, whole = LogHistogram(), LogHistogram(), LogHistogram()
    a.record_many(data[:30_000])
    b.record_many(data[30_000:])
    whole.record_many(data)
    merged = LogHistogram.merged([a, b])
    assert np.array_equal(merged.counts, whole.counts)
    assert merged.percentile(99) == whole.percentile(99)


def test_buckets_tile_the_value_line():
    h = LogHistogram(precision=6)
    idx = np.arange(len(h.counts) - 1)
    lo, width = h._bounds(idx)
    assert np.array_equal(lo[1:], lo[:-1] + width[:-1])  # contiguous, no gaps or overlaps
    assert np.array_equal(h._index(lo), idx)            # each lower bound maps to its own bucket
    assert np.all(width[64:] / lo[64:] <= 1 / 32)


def test_empty_and_bad_input():
    h = LogHistogram()
    assert np.isnan(h.percentile(50))
    h.record(5)
    assert h.percentile(50) == 5
    with pytest.raises(ValueError):
        h.percentile(101)
    with pytest.raises(ValueError):
        h.merge(LogHistogram(precision=5))
