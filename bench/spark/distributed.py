"""Distributed runs: N store instances ("nodes", as IEP-113 ran 6 servers) as Spark tasks.

`sc.parallelize(range(N), N).mapPartitions(...)` starts one task per node.
Node i gets its own temporary directory (the runner's `data_dir`) and
workload partition i, and calls the harness runner

    run(config, workload=ParquetWorkload(path, i), node=i)
      -> dict(timeseries=[rows], checkpoints=[rows], summary=row)

The rows come back to the driver (one per node and second: small) and are
appended with Spark to the same Hive-partitioned datasets a local run writes
(`<results>/<dataset>/run_id=<id>/`). Runner and workload class are named
as "module:attribute" and resolved inside the task, so an executor only
needs the code importable; a callable can be passed directly instead.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
import time
import uuid

import pyarrow as pa

from .generate import META_FILE
from bench.schema import DATASETS, SCHEMAS, spark_ddl, table as to_table

DEFAULT_RUNNER = "bench.runner:run"
DEFAULT_WORKLOAD = "bench.workload:ParquetWorkload"


def resolve(ref):
    """'package.module:attr' -> the object; a callable is returned as it is."""
    if callable(ref):
        return ref
    module, _, attr = str(ref).partition(":")
    if not attr:
        raise ValueError(f"{ref!r}: expected 'module:attribute'")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def workload_partitions(path: str) -> int | None:
    """Partition count of a generated workload (its metadata, else its directories), if local."""
    meta = os.path.join(path, META_FILE)
    if os.path.exists(meta):
        with open(meta) as f:
            return len(json.load(f)["partition_ops"])
    if os.path.isdir(path):
        return sum(1 for d in os.listdir(path) if d.startswith("partition="))
    return None


def new_run_id(config: dict) -> str:
    store = str(config.get("store", "run"))
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{store}-dist-{uuid.uuid4().hex[:6]}"


def _node_rows(result: dict, run_id: str, node: int):
    """(dataset, row) pairs of one node's result, with run_id and node forced to this task's."""
    if not isinstance(result, dict) or "summary" not in result:
        raise TypeError(f"node {node}: the runner must return dict(timeseries=, checkpoints=, summary=)")
    for name in DATASETS:
        rows = result.get(name) or []
        for row in ([rows] if name == "summary" else rows):
            yield name, dict(row, run_id=run_id, node=node)


def node_task(runner, workload_class, workload: str, config: dict, run_id: str,
              work_dir: str | None, keep: bool):
    """The function each Spark task runs over its node indexes."""

    def task(indexes):
        run, make_workload = resolve(runner), resolve(workload_class)
        for node in indexes:
            path = tempfile.mkdtemp(prefix=f"pagestore-{run_id}-node{node}-", dir=work_dir)
            try:
                cfg = dict(config, run_id=run_id, data_dir=path, node=node)
                result = run(cfg, workload=make_workload(workload, node), node=node)
            finally:
                if not keep:
                    shutil.rmtree(path, ignore_errors=True)
            yield from _node_rows(result, run_id, node)

    return task


def run_distributed(spark, workload: str, results: str, nodes: int, config: dict | None = None,
                    runner=DEFAULT_RUNNER, workload_class=DEFAULT_WORKLOAD, run_id: str | None = None,
                    work_dir: str | None = None, keep: bool = False) -> dict:
    """Run `nodes` nodes over the workload's partitions 0..nodes-1; append their rows to `results`."""
    if nodes < 1:
        raise ValueError("need at least one node")
    have = workload_partitions(workload)
    if have is not None and have < nodes:
        raise ValueError(f"workload {workload} has {have} partitions; {nodes} nodes need one each")
    config = dict(config or {})
    run_id = run_id or config.get("run_id") or new_run_id(config)
    task = node_task(runner, workload_class, workload, config, run_id, work_dir, keep)
    pairs = spark.sparkContext.parallelize(range(nodes), nodes).mapPartitions(task).collect()
    counts = {}
    for name in DATASETS:
        rows = [r for ds, r in pairs if ds == name]
        counts[name] = len(rows)
        if rows:
            write_rows(spark, results, name, rows)
    seen = sorted({r["node"] for ds, r in pairs if ds == "summary"})
    return {"run_id": run_id, "nodes": seen, "rows": counts, "results": results}


def write_rows(spark, results: str, dataset: str, rows: list) -> None:
    """Append rows (dicts) to `<results>/<dataset>` partitioned by run_id, through Spark."""
    table: pa.Table = to_table(dataset, rows)
    df = spark.createDataFrame(table.to_pandas(), schema=spark_ddl(dataset))
    names = [f.name for f in SCHEMAS[dataset]]
    df.select(*names).coalesce(1).write.mode("append").partitionBy("run_id") \
        .parquet(os.path.join(results, dataset))
