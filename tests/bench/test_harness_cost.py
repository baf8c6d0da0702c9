"""The cheap paths of the harness measure exactly what the slow ones did: batched
histogram filing, the struct-based key builder, the float-exponent bucket index."""

import numpy as np
import pytest

from bench.histogram import LogHistogram
from bench.measure import NS, Control, ThreadRecorder
from bench.workload import make_keys, mix64


def _reference_keys(idx, key_size, ordered):
    """The key layout of the module docstring, byte by byte."""
    out = []
    for i, m in zip(idx.tolist(), mix64(idx).tolist()):
        a, b = (i, m) if ordered else (m, i)
        out.append((a.to_bytes(8, "big") + b.to_bytes(8, "big") + bytes(max(0, key_size - 16)))[:key_size])
    return out


@pytest.mark.parametrize("key_size", [8, 13, 16, 17, 24, 40])
@pytest.mark.parametrize("ordered", [False, True])
def test_keys_follow_the_documented_layout(key_size, ordered):
    idx = np.random.default_rng(3).integers(0, 1 << 62, 700).astype(np.uint64)
    assert make_keys(idx, key_size, ordered) == _reference_keys(idx, key_size, ordered)


def test_keys_of_more_rows_than_one_unpack_are_all_built():
    idx = np.arange(70_001, dtype=np.uint64)  # crosses the 65,536-row split
    keys = make_keys(idx, 16)
    assert len(keys) == 70_001 and len(set(keys)) == 70_001
    assert keys[-1] == _reference_keys(idx[-1:], 16, False)[0]


def test_bucket_index_matches_the_frexp_definition():
    h = LogHistogram()
    m = 1 << h.precision
    v = np.concatenate([np.arange(0, 5000), (np.random.default_rng(5).lognormal(12, 3, 50_000)).astype(np.int64),
                        np.array([2**40 - 1, 2**40, 2**47 + 12345, 2**52])])
    _, exp = np.frexp(v.astype(np.float64))
    e = exp.astype(np.int64) - 1
    big = v >= m
    shift = np.where(big, e - h.precision + 1, 0)
    want = np.where(big, m + (e - h.precision) * (m >> 1) + ((v >> shift) - (m >> 1)), v)
    want = np.minimum(want, len(h.counts) - 1)
    assert np.array_equal(h._index(v), want)


def _ctl():
    ctl = Control(0, 1.0, 3.0)  # window [1 s, 4 s) after t0 = 0
    return ctl


def test_batched_recorder_files_every_op_like_one_by_one():
    """Chunks that straddle the window edges and seconds, with the checkpoint flag flipping
    between chunks, give the same per-second and in/out histograms as filing op by op."""
    rng = np.random.default_rng(9)
    ends = np.cumsum(rng.integers(1_000, 400_000, 40_000)).astype(np.int64) + NS // 2
    lats = rng.integers(50, 2_000_000, ends.size).astype(np.int64)
    rec, ctl = None, _ctl()
    rec = ThreadRecorder(ctl)
    rec.FLUSH_OPS = 5_000  # several flushes, some mid-second
    want_sec, want_in, want_out = {}, [], []
    pos, flag = 0, False
    while pos < ends.size:
        c = int(rng.integers(1, 3000))
        e, lt = ends[pos:pos + c], lats[pos:pos + c]
        ctl.in_ckpt = flag
        rec.add(e, lt)
        for t, x in zip(e.tolist(), lt.tolist()):
            if ctl.measure_start_ns <= t < ctl.end_ns:
                want_sec.setdefault((t - ctl.measure_start_ns) // NS, []).append(x)
                (want_in if flag else want_out).append(x)
        pos += c
        flag = not flag if rng.random() < 0.3 else flag
    assert rec.ops == sum(len(v) for v in want_sec.values())
    assert sorted(rec.sec_hist) == sorted(want_sec)
    for s, xs in want_sec.items():
        ref = LogHistogram()
        ref.record_many(xs)
        h = rec.sec_hist[s]
        assert (h.count, h.total, h.min, h.max) == (ref.count, ref.total, ref.min, ref.max)
        assert np.array_equal(h.counts, ref.counts)
    for h, xs in ((rec.hist_ckpt, want_in), (rec.hist_out, want_out)):
        ref = LogHistogram()
        ref.record_many(xs)
        assert h.count == len(xs) and np.array_equal(h.counts, ref.counts)


def test_reading_the_recorder_sees_ops_still_buffered():
    ctl = _ctl()
    rec = ThreadRecorder(ctl)
    ends = np.arange(ctl.measure_start_ns, ctl.measure_start_ns + 10 * 1000, 1000, dtype=np.int64)
    rec.add(ends, np.full(10, 500, dtype=np.int64))
    assert rec.sec_hist[0].count == 10 and rec.hist_out.count == 10
    rec.add(ends + 1, np.full(10, 700, dtype=np.int64))   # added after a read: the views renew
    assert rec.sec_hist[0].count == 20 and rec.hist_out.max == 700
