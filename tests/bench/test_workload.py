"""Generated key streams and the streaming Parquet workload reader."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.runner import run
from bench.workload import GeneratedWorkload, ParquetWorkload, make_keys

SCHEMA = pa.schema([("op", pa.int8()), ("key", pa.binary()), ("value_len", pa.int32()),
                    ("scan_len", pa.int32())])


def _write_workload(root, partitions=2, rows=10_000, tx_size=1):
    """The bench/spark layout: <root>/partition=<p>/part-*.parquet (+ _workload.json)."""
    for p in range(partitions):
        d = root / f"partition={p}"
        d.mkdir(parents=True)
        keys = make_keys(np.arange(rows, dtype=np.uint64) + np.uint64(p << 40), 16)
        ops = np.where(np.arange(rows) % 10 == 9, 2, 1).astype(np.int8)
        if tx_size > 1:
            ops[tx_size - 1::tx_size] = 5
            keys = [None if o == 5 else k for o, k in zip(ops.tolist(), keys)]
        for half in (0, 1):
            s = slice(half * rows // 2, (half + 1) * rows // 2)
            t = pa.table({"op": ops[s], "key": pa.array(keys[s], pa.binary()),
                          "value_len": np.full(rows // 2, 100, np.int32),
                          "scan_len": np.zeros(rows // 2, np.int32)}, schema=SCHEMA)
            pq.write_table(t, d / f"part-{half:05d}.parquet", row_group_size=1000)
    (root / "_workload.json").write_text(json.dumps({"spec": {"tx_size": tx_size}}))
    return str(root)


def test_parquet_workload_streams_in_batches(tmp_path):
    path = _write_workload(tmp_path)
    wl = ParquetWorkload(path, 1, batch_size=1000)
    sizes = [rb.num_rows for rb in wl.iter_record_batches()]
    assert len(sizes) == 10 and max(sizes) <= 1000 and sum(sizes) == 10_000
    batches = list(wl.batches(0, 1))
    keys = [k for b in batches for k in b.keys]
    assert len(keys) == 10_000 and keys[0] == make_keys(np.array([1 << 40], np.uint64))[0]
    assert all(len(v) == 100 for b in batches for v in b.values)
    assert sum(op == 2 for b in batches for op in b.ops) == 1_000
    assert not wl.transactional


def test_parquet_workload_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="partition 7"):
        ParquetWorkload(_write_workload(tmp_path), 7)


def test_replay_runs_every_row_through_the_runner(tmp_path):
    path = _write_workload(tmp_path / "wl", tx_size=4)
    wl = ParquetWorkload(path, 0, batch_size=512)
    assert wl.transactional
    r = run(dict(store="lmdb", warmup=0, duration=60, data_dir=str(tmp_path)), workload=wl, node=3)
    s = r["summary"]
    assert s["ops"] == 10_000 and s["node"] == 3 and s["op_style"] == "tx"
    assert s["duration_s"] < 30  # ended with the workload, not the duration


def test_distributions():
    def keys(dist, n=4096, **kw):
        wl = GeneratedWorkload(dict(distribution=dist, key_range=1000, batch=n, **kw))
        return next(wl.batches(0, 1)).keys
    assert len(set(keys("unique"))) == 4096
    seq = keys("sequential", n=500)
    assert seq == sorted(seq)
    zipf = keys("zipf")
    uniform = keys("uniform")
    assert len(set(zipf)) < len(set(uniform))
    top = max(zipf.count(k) for k in set(zipf))
    assert top > 4096 * 0.05  # rank 1 of zipf(0.99) over 1000 keys gets about 13 %
    hot = keys("hot-set", hot_fraction=0.1, hot_ops=0.9)
    hot_keys = set(make_keys(np.arange(100, dtype=np.uint64)))
    assert 0.85 < sum(k in hot_keys for k in hot) / len(hot) < 0.95


def test_two_threads_never_share_unique_keys():
    wl = GeneratedWorkload(dict(distribution="unique", key_range=10, batch=1000))
    a, b = next(wl.batches(0, 2)).keys, next(wl.batches(1, 2)).keys
    assert not set(a) & set(b)


def _packed(values, codec):
    import cramjam
    blob = b"".join(values)
    return len(bytes(getattr(cramjam, codec).compress_raw(blob) if codec == "snappy"
                         else getattr(cramjam, codec).compress_block(blob))) / len(blob)


@pytest.mark.parametrize("c", [0.25, 0.5, 0.8])
def test_values_compress_by_the_configured_fraction(c):
    from bench.workload import ValuePool
    vals = ValuePool(100, count=2000, compressibility=c).values
    assert all(len(v) == 100 for v in vals)
    for codec in ("snappy", "lz4"):  # like db_bench: a fast LZ codec keeps about 1 - c
        assert (1 - c) - 0.02 < _packed(vals, codec) < (1 - c) + 0.12, codec


def test_zero_compressibility_is_the_random_byte_stream():
    from bench.workload import ValuePool
    vals = ValuePool(100, count=2000, seed=4, compressibility=0).values
    assert _packed(vals, "snappy") > 0.99
    assert vals == ValuePool(100, count=2000, seed=4, compressibility=0.0).values  # deterministic


def test_generated_and_replayed_values_follow_the_option(tmp_path):
    from bench.workload import ValuePool
    wl = GeneratedWorkload(dict(value_compressibility=0.75, batch=3000))
    assert _packed(next(wl.batches(0, 1)).values, "snappy") < 0.35
    assert _packed(ValuePool(1, count=1, compressibility=0.75).by_length([100] * 3000), "snappy") < 0.4
    with pytest.raises(ValueError, match="value_compressibility"):
        GeneratedWorkload(dict(value_compressibility=1.0))


def test_replayed_workload_takes_compressibility_from_its_spec(tmp_path):
    path = _write_workload(tmp_path / "wl")
    assert ParquetWorkload(path, 0).compressibility == 0.5            # no field: db_bench's default
    meta = tmp_path / "wl" / "_workload.json"
    meta.write_text(json.dumps({"spec": {"tx_size": 1, "value_compressibility": 0.0}}))
    wl = ParquetWorkload(path, 0)
    assert wl.compressibility == 0.0
    assert _packed(next(wl.batches(0, 1)).values, "snappy") > 0.99
    assert ParquetWorkload(path, 0, compressibility=0.8).compressibility == 0.8
