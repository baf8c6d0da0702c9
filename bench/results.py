"""Result files: the three datasets of ``bench.schema`` written and read as Parquet.

Layout: ``<dir>/<dataset>/run_id=<id>/part-<node>-<uuid>.parquet``, the Hive
partitioning Spark's reader discovers. ``run_id`` is the partition key and is
therefore not stored inside the files; every run id starts with a letter so
partition discovery keeps it a string. Several nodes (or the harness and a
Spark job) may write into the same run directory: file names never collide.
"""

from __future__ import annotations

import os
import secrets
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from bench.schema import table

_RUN_ID = pa.schema([("run_id", pa.string())])


def new_run_id(prefix: str = "r") -> str:
    """A sortable, unique id that starts with a letter: ``r20261121T223000-1a2b3c``."""
    return f"{prefix}{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"


def write_dataset(results_dir: str, dataset: str, rows: list) -> list:
    """Append rows to ``<results_dir>/<dataset>``, one file per (run_id, node)."""
    if not rows:
        return []
    written = []
    groups = {}
    for r in rows:
        groups.setdefault((r["run_id"], r.get("node", 0)), []).append(r)
    for (run_id, node), part in groups.items():
        t = table(dataset, part).drop_columns(["run_id"])
        d = os.path.join(results_dir, dataset, f"run_id={run_id}")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"part-{node}-{uuid.uuid4().hex[:12]}.parquet")
        pq.write_table(t, path)
        written.append(path)
    return written


def write_empty(results_dir: str, dataset: str, run_id: str, node: int = 0) -> str:
    """A zero-row file with the dataset's schema, so every dataset exists for every run."""
    d = os.path.join(results_dir, dataset, f"run_id={run_id}")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"part-{node}-{uuid.uuid4().hex[:12]}.parquet")
    pq.write_table(table(dataset, []).drop_columns(["run_id"]), path)
    return path


def write_result(results_dir: str, result: dict) -> list:
    """Write one ``bench.runner.run`` result (timeseries, checkpoints, summary)."""
    out = []
    s = result["summary"]
    for name in ("timeseries", "checkpoints"):
        rows = result.get(name) or []
        out += write_dataset(results_dir, name, rows) if rows else [
            write_empty(results_dir, name, s["run_id"], s.get("node", 0))]
    out += write_dataset(results_dir, "summary", [s])
    return out


def read_dataset(results_dir: str, dataset: str):
    """Read a dataset back (pyarrow, Hive partitioning) as a pyarrow Table."""
    import pyarrow.dataset as ds
    part = ds.partitioning(_RUN_ID, flavor="hive")
    return ds.dataset(os.path.join(results_dir, dataset), format="parquet",
                      partitioning=part).to_table()


def write_table(results_dir: str, dataset: str, tbl: pa.Table) -> None:
    """Append an Arrow table (with ``run_id``) to ``<results_dir>/<dataset>/run_id=<id>/``."""
    from bench.schema import SCHEMAS
    tbl = tbl.cast(SCHEMAS[dataset])
    pq.write_to_dataset(tbl, os.path.join(results_dir, dataset), partition_cols=["run_id"],
                        basename_template=f"part-{uuid.uuid4().hex}-{{i}}.parquet",
                        existing_data_behavior="overwrite_or_ignore")
