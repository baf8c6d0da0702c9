"""The result schema: the one declaration of the three Parquet datasets.

The harness (``bench.results`` writes, ``bench.runner`` builds the rows), the
Spark jobs (``bench.spark``: distributed runs, synthetic results, the report)
and the server comparison all import these names; ``docs/results-schema.md``
describes every column. A row is a dict; a column it lacks is written as null
(peers have no checkpoint figures, older runs lack newer columns).
"""

from __future__ import annotations

import pyarrow as pa

_I32, _I64, _F64, _STR, _BOOL = pa.int32(), pa.int64(), pa.float64(), pa.string(), pa.bool_()

DATASETS = ("timeseries", "checkpoints", "summary")

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
    ("lat_mean_us", _F64), ("lat_p50_us", _F64), ("lat_p99_us", _F64),
    ("lat_p50_ckpt_us", _F64), ("lat_p99_ckpt_us", _F64),
    ("lat_p50_no_ckpt_us", _F64), ("lat_p99_no_ckpt_us", _F64),
    ("throughput_ckpt", _F64), ("throughput_no_ckpt", _F64),
    ("wal_bytes", _I64), ("recovery_bytes", _I64), ("page_bytes", _I64), ("disk_write_bytes", _I64),
    ("bytes_per_op", _F64), ("wal_bytes_per_op", _F64),
    ("parks", _I64), ("stalls", _I64), ("checkpoints", _I64),
    ("park_seconds", _F64), ("park_seconds_max", _F64),
    # which comparison a run belongs to ("iep-113", "throttling", "peers", ...; empty for a
    # single run), its repetition (a report pairs the runs of one round) and the session
    # (one `quick` invocation) it ran in: a results directory may hold several sessions
    ("experiment", _STR), ("round", _I32), ("session", _STR),
    # torn-page comparison (PostgreSQL, InnoDB and pagestore under one update workload):
    # bytes per update by kind, from each system's own counters and the block device
    ("setting", _STR), ("log_bytes_per_op", _F64), ("protection_bytes_per_op", _F64),
    ("data_page_bytes_per_op", _F64), ("device_bytes_per_op", _F64), ("wchar_bytes_per_op", _F64),
    ("config_json", _STR),
])

SCHEMAS = {"timeseries": TIMESERIES, "checkpoints": CHECKPOINTS, "summary": SUMMARY}

_SPARK_TYPES = {_I32: "int", _I64: "bigint", _F64: "double", _STR: "string", _BOOL: "boolean"}


def columns(dataset: str) -> list:
    """The dataset's column names, in order."""
    return [f.name for f in SCHEMAS[dataset]]


def spark_ddl(dataset: str) -> str:
    """The dataset's schema as a Spark DDL string (same names and types)."""
    return ", ".join(f"`{f.name}` {_SPARK_TYPES[f.type]}" for f in SCHEMAS[dataset])


def table(dataset: str, rows: list) -> pa.Table:
    """Rows (dicts) as an Arrow table of the dataset's schema; a missing value becomes null.

    A key that is not a column is an error: it would be silently dropped otherwise."""
    schema = SCHEMAS[dataset]
    known = set(schema.names)
    for r in rows:
        extra = set(r) - known
        if extra:
            raise ValueError(f"{dataset} row has column(s) not in the schema: {', '.join(sorted(extra))}")
    cols = {f.name: [r.get(f.name) for r in rows] for f in schema}
    return pa.Table.from_pydict(cols, schema=schema)
