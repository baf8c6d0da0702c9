"""Distributed runs: N nodes as Spark tasks, each on its own workload partition."""

import json
import os

import pyarrow.dataset as ds
import pytest

from bench.spark.distributed import run_distributed
from bench.spark.generate import WorkloadSpec, generate


@pytest.fixture(scope="module")
def workload(spark, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("workload"))
    spec = WorkloadSpec(ops=3001, partitions=2, seed=9, dist="zipf", key_range=500)
    generate(spark, out, spec)
    return out, spec


def _read(results, name):
    part = ds.partitioning(flavor="hive")
    return ds.dataset(os.path.join(results, name), format="parquet", partitioning=part).to_table().to_pandas()


def test_two_nodes_return_rows_from_both(spark, workload, tmp_path):
    path, spec = workload
    results = str(tmp_path / "results")
    out = run_distributed(spark, path, results, nodes=2, config={"duration_s": 6, "store": "pagestore"},
                          runner="bench.spark.synth:runner",
                          workload_class="bench.spark.generate:PartitionReader", run_id="dist-test")
    assert out["nodes"] == [0, 1]
    assert out["rows"] == {"timeseries": 12, "checkpoints": 2, "summary": 2}
    summary = _read(results, "summary")
    assert sorted(summary["node"]) == [0, 1] and set(summary["run_id"]) == {"dist-test"}
    for _, row in summary.iterrows():       # each node replayed its own partition
        assert json.loads(row["config_json"])["workload_ops"] == spec.partition_ops(row["node"])
    ts = _read(results, "timeseries")
    assert ts.groupby("node").size().to_dict() == {0: 6, 1: 6}
    assert os.path.isdir(os.path.join(results, "timeseries", "run_id=dist-test"))


def test_more_nodes_than_partitions_is_refused(spark, workload, tmp_path):
    with pytest.raises(ValueError, match="2 partitions; 3 nodes"):
        run_distributed(spark, workload[0], str(tmp_path), nodes=3, runner="bench.spark.synth:runner")


def test_with_the_harness_runner(spark, workload, tmp_path):
    results = str(tmp_path / "results")
    out = run_distributed(spark, workload[0], results, nodes=2,
                          config={"store": "sqlite", "duration": 1.0, "warmup": 0.0})
    assert out["nodes"] == [0, 1]
    summary = _read(results, "summary")
    assert sorted(summary["node"]) == [0, 1] and (summary["ops"] > 0).all()
