"""Parquet writer for the three result datasets of ``docs/results-schema.md``.

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

_I32, _I64, _F64, _STR, _BOOL = pa.int32(), pa.int64(), pa.float64(), pa.string(), pa.bool_()

TIMESERIES = pa.schema([
    ("run_id", _STR), ("node", _I32), ("second", _I32), ("ops", _I64), ("throughput", _F64),
    ("lat_mean_us", _F64), ("lat_p50_us", _F64), ("lat_p99_us", _F64), ("lat_p999_us", _F64),
    ("lat_max_us", _F64), ("dirty_pages", _I64), ("cow_used", _I64), ("cow_capacity", _I64),
    ("parks", _I64), ("park_seconds", _F64), ("checkpoint_running", _BOOL),
])

CHECKPOINTS = pa.schema([
    ("run_id", _STR), ("node", _I32), ("checkpoint_id", _I64), ("t_start", _F64), ("pages", _I64),
    ("recovery_bytes", _I64), ("lock_ms", _F64), ("recovery_write_ms", _F64), ("page_write_ms", _F64),
    ("fsync_ms", _F64), ("total_ms", _F64), ("cow_peak", _I64),
])

SUMMARY = pa.schema([
    ("run_id", _STR), ("node", _I32), ("store", _STR), ("scenario", _STR),
    ("recovery_data", _STR), ("compression", _STR), ("wal_mode", _STR), ("throttling", _STR),
    ("op_style", _STR), ("threads", _I32), ("duration_s", _F64), ("ops", _I64), ("throughput", _F64),
    ("lat_mean_us", _F64), ("lat_p99_us", _F64), ("wal_bytes", _I64), ("recovery_bytes", _I64),
    ("page_bytes", _I64), ("disk_write_bytes", _I64), ("bytes_per_op", _F64),
    ("wal_bytes_per_op", _F64), ("parks", _I64), ("stalls", _I64), ("checkpoints", _I64),
    ("park_seconds", _F64), ("park_seconds_max", _F64), ("config_json", _STR),
    # additions (docs/results-schema.md, "Added columns")
    ("lat_p50_us", _F64), ("lat_p50_ckpt_us", _F64), ("lat_p99_ckpt_us", _F64),
    ("lat_p50_no_ckpt_us", _F64), ("lat_p99_no_ckpt_us", _F64),
    ("throughput_ckpt", _F64), ("throughput_no_ckpt", _F64),
])

SCHEMAS = {"timeseries": TIMESERIES, "checkpoints": CHECKPOINTS, "summary": SUMMARY}


def new_run_id(prefix: str = "r") -> str:
    """A sortable, unique id that starts with a letter: ``r20261121T223000-1a2b3c``."""
    return f"{prefix}{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"


def table(dataset: str, rows: list) -> pa.Table:
    """Rows (dicts) as a table of the dataset's schema; missing values become null."""
    schema = SCHEMAS[dataset]
    cols = {f.name: [r.get(f.name) for r in rows] for f in schema}
    return pa.Table.from_pydict(cols, schema=schema)


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
    part = ds.partitioning(pa.schema([("run_id", _STR)]), flavor="hive")
    return ds.dataset(os.path.join(results_dir, dataset), format="parquet",
                      partitioning=part).to_table()
