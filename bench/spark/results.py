"""The result datasets of docs/results-schema.md as Arrow schemas, and their writers.

A results directory holds `timeseries`, `checkpoints` and `summary`, each a
Hive-partitioned Parquet dataset (`<dir>/<dataset>/run_id=<id>/*.parquet`).
The harness writes them for a local run; the distributed run and the
synthetic generator write exactly the same layout through this module.
"""

from __future__ import annotations

import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

DATASETS = ("timeseries", "checkpoints", "summary")

_I32, _I64, _F64, _S, _B = pa.int32(), pa.int64(), pa.float64(), pa.string(), pa.bool_()

SCHEMAS = {
    "timeseries": pa.schema(
        [("run_id", _S), ("node", _I32), ("second", _I32), ("ops", _I64), ("throughput", _F64)]
        + [(c, _F64) for c in ("lat_mean_us", "lat_p50_us", "lat_p99_us", "lat_p999_us", "lat_max_us")]
        + [("dirty_pages", _I64), ("cow_used", _I64), ("cow_capacity", _I64), ("parks", _I64),
           ("park_seconds", _F64), ("checkpoint_running", _B)]),
    "checkpoints": pa.schema(
        [("run_id", _S), ("node", _I32), ("checkpoint_id", _I64), ("t_start", _F64), ("pages", _I64),
         ("recovery_bytes", _I64)]
        + [(c, _F64) for c in ("lock_ms", "recovery_write_ms", "page_write_ms", "fsync_ms", "total_ms")]
        + [("cow_peak", _I64)]),
    "summary": pa.schema(
        [("run_id", _S), ("node", _I32), ("store", _S), ("scenario", _S)]
        + [(c, _S) for c in ("recovery_data", "compression", "wal_mode", "throttling", "op_style")]
        + [("threads", _I32), ("duration_s", _F64), ("ops", _I64), ("throughput", _F64),
           ("lat_mean_us", _F64), ("lat_p99_us", _F64)]
        + [(c, _I64) for c in ("wal_bytes", "recovery_bytes", "page_bytes", "disk_write_bytes")]
        + [("bytes_per_op", _F64), ("wal_bytes_per_op", _F64)]
        + [(c, _I64) for c in ("parks", "stalls", "checkpoints")]
        + [("park_seconds", _F64), ("park_seconds_max", _F64), ("config_json", _S)]),
}


def spark_ddl(dataset: str) -> str:
    """The dataset's schema as a Spark DDL string (same names and types)."""
    names = {pa.int32(): "int", pa.int64(): "bigint", pa.float64(): "double",
             pa.string(): "string", pa.bool_(): "boolean"}
    return ", ".join(f"{f.name} {names[f.type]}" for f in SCHEMAS[dataset])


def to_table(dataset: str, rows: list) -> pa.Table:
    """Rows (dicts) -> an Arrow table of the dataset's schema; a missing column is an error."""
    schema = SCHEMAS[dataset]
    cols = {}
    for f in schema:
        try:
            cols[f.name] = [r[f.name] for r in rows]
        except KeyError as e:
            raise ValueError(f"{dataset} row lacks column {e.args[0]!r}") from None
    return pa.Table.from_pydict(cols, schema=schema)


def write_table(results_dir: str, dataset: str, table: pa.Table) -> None:
    """Append a table to `<results_dir>/<dataset>/run_id=<id>/` (pyarrow, no Spark)."""
    table = table.cast(SCHEMAS[dataset])
    pq.write_to_dataset(table, os.path.join(results_dir, dataset), partition_cols=["run_id"],
                        basename_template=f"part-{uuid.uuid4().hex}-{{i}}.parquet",
                        existing_data_behavior="overwrite_or_ignore")
