"""Workload generation: determinism, layout and measured distributions."""

import numpy as np
import pyarrow.compute as pc
import pytest

from bench.spark.generate import (OP_COMMIT, OP_DELETE, OP_GET, OP_PUT, OP_SCAN, ZIPF_TABLE,
                                  PartitionReader, WorkloadSpec, generate, parse_mix, parse_size,
                                  partition_files)

MIX = parse_mix("put=0.5,get=0.4,delete=0.05,scan=0.05")


def _gen(spark, tmp_path_factory, name, **kw):
    out = str(tmp_path_factory.mktemp(name))
    spec = WorkloadSpec(mix=MIX, **kw)
    generate(spark, out, spec)
    return out, spec


def _read(path, spec):
    return [PartitionReader(path, p).read() for p in range(spec.partitions)]


def _ids(table):
    """Key ids of the hashed key layout (the last 8 key bytes, big-endian)."""
    keys = table.column("key").drop_null().combine_chunks()
    raw = np.frombuffer(keys.buffers()[2], dtype=np.uint8)[keys.offset * 16:(keys.offset + len(keys)) * 16]
    return raw.reshape(-1, 16)[:, 8:].copy().view(">u8").ravel()


@pytest.fixture(scope="module")
def uniform(spark, tmp_path_factory):
    return _gen(spark, tmp_path_factory, "uniform", ops=30_000, partitions=3, seed=7,
                value_size=parse_size("uniform:50-500"), chunk=4096)


@pytest.fixture(scope="module")
def zipf(spark, tmp_path_factory):
    return _gen(spark, tmp_path_factory, "zipf", ops=200_000, partitions=2, seed=3, dist="zipf",
                key_range=1000, theta=0.99)


def test_same_seed_and_partitions_give_identical_data(spark, tmp_path_factory, uniform):
    path, spec = uniform
    again, _ = _gen(spark, tmp_path_factory, "uniform_again", ops=30_000, partitions=3, seed=7,
                    value_size=parse_size("uniform:50-500"), chunk=4096)
    for a, b in zip(_read(path, spec), _read(again, spec)):
        assert a.num_rows == 10_000
        assert a.equals(b)


def test_different_seed_gives_different_data(spark, tmp_path_factory, uniform):
    path, spec = uniform
    other, _ = _gen(spark, tmp_path_factory, "uniform_seed8", ops=30_000, partitions=3, seed=8,
                    value_size=parse_size("uniform:50-500"), chunk=4096)
    a, b = _read(path, spec)[0], _read(other, spec)[0]
    assert a.num_rows == b.num_rows
    same_keys = pc.sum(pc.equal(a.column("key"), b.column("key"))).as_py()
    assert same_keys < a.num_rows * 0.01


def test_schema_and_value_sizes(uniform):
    path, spec = uniform
    t = PartitionReader(path, 1).read()
    assert [str(f.type) for f in t.schema] == ["int8", "binary", "int32", "int32"]
    assert set(pc.binary_length(t.column("key")).to_pylist()) == {16}
    ops = t.column("op").to_numpy()
    vlen, slen = t.column("value_len").to_numpy(), t.column("scan_len").to_numpy()
    puts = vlen[ops == OP_PUT]
    assert puts.min() >= 50 and puts.max() <= 500 and puts.std() > 100
    assert (vlen[ops != OP_PUT] == 0).all()
    scans = slen[ops == OP_SCAN]
    assert scans.min() >= 1 and scans.max() <= 100 and (slen[ops != OP_SCAN] == 0).all()
    assert len(partition_files(path, 1)) == 3          # 10,000 ops in chunks of 4,096


def test_op_mix_within_tolerance(zipf):
    path, spec = zipf
    ops = np.concatenate([t.column("op").to_numpy() for t in _read(path, spec)])
    assert len(ops) == 200_000
    for code, share in MIX:
        assert abs((ops == code).mean() - share) < 0.006, code


def test_zipf_hottest_key_share_matches_analytic(zipf):
    path, spec = zipf
    ids = np.concatenate([_ids(t) for t in _read(path, spec)])
    analytic = 1.0 / np.sum(np.arange(1, 1001, dtype=np.float64) ** -0.99)
    counts = np.bincount(ids.astype(np.int64), minlength=1000)
    assert counts.argmax() == 0
    assert abs(counts[0] / len(ids) - analytic) < 0.005
    assert ids.max() < 1000


def test_zipf_beyond_the_exact_table(spark, tmp_path_factory):
    k = 4 * ZIPF_TABLE
    path, spec = _gen(spark, tmp_path_factory, "zipf_big", ops=200_000, partitions=1, seed=5,
                      dist="zipf", key_range=k, theta=0.99)
    ids = _ids(PartitionReader(path, 0).read())
    w = np.arange(1, k + 1, dtype=np.float64) ** -0.99
    tail = w[ZIPF_TABLE:].sum() / w.sum()
    assert abs((ids >= ZIPF_TABLE).mean() - tail) < 0.005
    assert abs((ids == 0).mean() - w[0] / w.sum()) < 0.004
    assert ids.max() < k


def test_unique_keys_never_repeat(spark, tmp_path_factory):
    path, spec = _gen(spark, tmp_path_factory, "unique", ops=40_000, partitions=2, seed=1,
                      dist="unique", chunk=8192)
    keys = [k for t in _read(path, spec) for k in t.column("key").to_pylist()]
    assert len(keys) == 40_000 and len(set(keys)) == 40_000
    assert keys[:100] != sorted(keys[:100])          # unique is not sequential


def test_sequential_is_ordered_with_tx_markers(spark, tmp_path_factory):
    path, spec = _gen(spark, tmp_path_factory, "sequential", ops=20_001, partitions=2, seed=1,
                      dist="sequential", tx_size=4, chunk=3000)
    for p, t in enumerate(_read(path, spec)):
        assert len(partition_files(path, p)) == 4     # 10,000 ops in chunks of 3,000
        ops = t.column("op").to_numpy()
        n = spec.partition_ops(p)
        assert (ops != OP_COMMIT).sum() == n and (ops == OP_COMMIT).sum() == -(-n // 4)
        assert set(np.flatnonzero(ops == OP_COMMIT)[:-1] % 5) == {4} and ops[-1] == OP_COMMIT
        assert t.column("key").null_count == (ops == OP_COMMIT).sum()
        keys = [k for k in t.column("key").to_pylist() if k is not None]
        assert keys == sorted(keys) and len(set(keys)) == len(keys)
        assert int.from_bytes(keys[0][:8], "big") == p << 40


def test_hotset_share(spark, tmp_path_factory):
    path, spec = _gen(spark, tmp_path_factory, "hotset", ops=50_000, partitions=1, seed=2,
                      dist="hotset", key_range=10_000, hot_fraction=0.01, hot_share=0.9)
    ids = _ids(PartitionReader(path, 0).read())
    assert abs((ids < 100).mean() - 0.9) < 0.01


def test_bad_specs_are_refused():
    with pytest.raises(ValueError):
        parse_mix("put=1,update=1")
    with pytest.raises(ValueError):
        parse_size("normal:5")
    with pytest.raises(ValueError):
        WorkloadSpec(ops=10, partitions=1, dist="pareto")
    assert {op for op, _ in MIX} == {OP_PUT, OP_GET, OP_DELETE, OP_SCAN}


def test_spec_carries_value_compressibility_to_the_replaying_harness(tmp_path):
    import json

    from bench.workload import ParquetWorkload
    spec = WorkloadSpec(ops=10, partitions=1, value_compressibility=0.25)
    assert spec.to_json()["value_compressibility"] == 0.25
    with pytest.raises(ValueError, match="value_compressibility"):
        WorkloadSpec(ops=10, partitions=1, value_compressibility=1.0)
    (tmp_path / "partition=0").mkdir()
    (tmp_path / "partition=0" / "x.parquet").write_bytes(b"")  # only the meta is read here
    (tmp_path / "_workload.json").write_text(json.dumps({"spec": spec.to_json()}))
    assert ParquetWorkload(str(tmp_path), 0).compressibility == 0.25
