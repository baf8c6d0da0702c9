"""The results report: Spark SQL over the result datasets, then tables, charts and HTML.

Every aggregate is computed in Spark; only per-configuration rows and
downsampled time series (at most `MAX_POINTS` buckets per configuration)
reach the driver. A configuration is the label built from a run's summary
(store, scenario and the non-empty options); runs and nodes of the same
configuration are aggregated together. Formulas: docs/spark.md.
"""

from __future__ import annotations

import os

import pandas as pd
from pyspark.sql import functions as F

from . import charts, htmlpage
from .results import spark_ddl

MAX_POINTS = 500
ABBREV = (("recovery_data", "rd"), ("compression", "codec"), ("wal_mode", "wal"),
          ("throttling", "thr"), ("op_style", "style"))

_LABEL = ("concat_ws(' ', store, scenario, "
          + ", ".join(f"CASE WHEN {c} <> '' THEN concat('{a}=', {c}) END" for c, a in ABBREV)
          + ", concat('t', CAST(threads AS STRING)))")

# Per configuration (or per run, for a run baseline), from `summary`.
_SUMMARY_SQL = """
WITH per_run AS (
  SELECT {key} AS k, run_id, count(*) AS nodes, sum(throughput) AS throughput
  FROM summary_c {where} GROUP BY {key}, run_id)
SELECT s.k AS config, r.runs, r.nodes, r.throughput AS throughput_ops_s,
       s.ops, s.lat_mean_us, s.lat_p99_us, s.wal_bytes_per_node, s.wal_bytes_per_op,
       s.recovery_bytes_per_node, s.page_bytes_per_node, s.parks_per_node, s.park_seconds,
       s.park_seconds_max, s.stalls
FROM (SELECT {key} AS k, sum(ops) AS ops,
             sum(lat_mean_us * ops) / nullif(sum(ops), 0) AS lat_mean_us,
             avg(lat_p99_us) AS lat_p99_us, avg(wal_bytes) AS wal_bytes_per_node,
             sum(wal_bytes) / nullif(sum(ops), 0) AS wal_bytes_per_op,
             avg(recovery_bytes) AS recovery_bytes_per_node, avg(page_bytes) AS page_bytes_per_node,
             avg(parks) AS parks_per_node, sum(park_seconds) AS park_seconds,
             max(park_seconds_max) AS park_seconds_max, sum(stalls) AS stalls
      FROM summary_c {where} GROUP BY {key}) s
JOIN (SELECT k, count(*) AS runs, max(nodes) AS nodes, percentile(throughput, 0.5) AS throughput
      FROM per_run GROUP BY k) r ON s.k = r.k
"""

# Per configuration, from `checkpoints` (averages are per checkpoint, across nodes and runs).
_CHECKPOINT_SQL = """
SELECT {key} AS config, count(*) AS checkpoints, avg(pages) AS pages,
       avg(recovery_bytes) AS recovery_bytes, avg(lock_ms) AS lock_ms,
       avg(recovery_write_ms) AS recovery_write_ms, avg(page_write_ms) AS page_write_ms,
       avg(fsync_ms) AS fsync_ms, avg(total_ms) AS total_ms, max(total_ms) AS total_ms_max,
       max(cow_peak) AS cow_peak_max
FROM checkpoints_c {where} GROUP BY {key}
"""

# One pass over the time series: per run, second and checkpoint flag, sums and counts of each
# figure (count() skips nulls, as pandas' mean does); the two queries below read this small view.
_FILL = "cow_used / nullif(cow_capacity, 0)"
_TS_AGG_SQL = f"""
SELECT config, run_id, second, checkpoint_running AS running, count(*) AS n,
       sum(throughput) AS thr_s, count(throughput) AS thr_c, sum(lat_p99_us) AS p99_s,
       count(lat_p99_us) AS p99_c, sum(lat_mean_us) AS mean_s, count(lat_mean_us) AS mean_c,
       sum({_FILL}) AS fill_s, count({_FILL}) AS fill_c, max({_FILL}) AS fill_max, sum(parks) AS parks
FROM timeseries_c GROUP BY config, run_id, second, checkpoint_running
"""


def _mean(col: str, cond: str) -> str:
    return (f"sum(CASE WHEN {cond} THEN {col}_s END) / "
            f"nullif(sum(CASE WHEN {cond} THEN {col}_c END), 0)")


# Per configuration: per-second rows with a checkpoint running against the others.
_DURING_SQL = f"""
SELECT config, sum(n) AS seconds,
       {_mean("thr", "running")} AS throughput_during,
       {_mean("thr", "NOT running")} AS throughput_outside,
       {_mean("p99", "running")} AS p99_during_us,
       {_mean("p99", "NOT running")} AS p99_outside_us,
       ({_mean("p99", "running")}) / nullif({_mean("p99", "NOT running")}, 0) AS p99_ratio,
       max(fill_max) AS cow_fill_max, sum(parks) AS parks
FROM ts_agg GROUP BY config
"""

_RUNS_SQL = """
SELECT config, run_id, count(*) AS nodes, sum(throughput) AS throughput_ops_s,
       sum(ops) AS ops, sum(lat_mean_us * ops) / nullif(sum(ops), 0) AS lat_mean_us,
       max(lat_p99_us) AS lat_p99_max_us, sum(wal_bytes) AS wal_bytes, sum(checkpoints) AS checkpoints
FROM summary_c GROUP BY config, run_id
"""

RATIO_COLUMNS = (("throughput_ops_s", "throughput"), ("lat_mean_us", "lat_mean"),
                 ("lat_p99_us", "lat_p99"), ("wal_bytes_per_op", "wal_bytes_per_op"),
                 ("recovery_bytes_per_node", "recovery_bytes"), ("cp_page_write_ms", "page_write_ms"),
                 ("cp_total_ms", "checkpoint_total_ms"), ("parks_per_node", "parks"))


def _read(spark, dirs: list, dataset: str):
    """One dataset of every results directory, read with the contract's schema (no footer scan)."""
    frames = []
    for d in dirs:
        path = os.path.join(d, dataset)
        if os.path.isdir(path):
            df = spark.read.schema(spark_ddl(dataset)).option("basePath", path).parquet(path)
            # NaN (a second without operations) counts as missing, as in pandas
            frames.append(df.select(*[F.nanvl(F.col(c), F.lit(None)).alias(c) if t == "double"
                                      else F.col(c) for c, t in df.dtypes]))
    if not frames:
        if dataset == "summary":
            raise FileNotFoundError(f"no {dataset!r} dataset under {', '.join(dirs)}")
        # A run may have no rows of a kind (no checkpoint in a short run):
        # an empty dataset of the contract's schema, not an error.
        return spark.createDataFrame([], spark_ddl(dataset))
    df = frames[0]
    for f in frames[1:]:
        df = df.unionByName(f, allowMissingColumns=True)
    return df


def register_views(spark, dirs: list) -> None:
    """summary_c / checkpoints_c / timeseries_c: the datasets with a `config` column."""
    _read(spark, dirs, "summary").createOrReplaceTempView("summary_raw")
    spark.sql(f"SELECT *, {_LABEL} AS config FROM summary_raw").cache().createOrReplaceTempView("summary_c")
    spark.sql("SELECT run_id, min(config) AS config FROM summary_c GROUP BY run_id") \
        .cache().createOrReplaceTempView("run_config")
    for name in ("checkpoints", "timeseries"):
        _read(spark, dirs, name).createOrReplaceTempView(f"{name}_raw")
        joined = spark.sql(f"SELECT d.*, r.config FROM {name}_raw d JOIN run_config r USING (run_id)")
        # checkpoints are small and queried often; the time series is read once, into ts_agg
        (joined.cache() if name == "checkpoints" else joined).createOrReplaceTempView(f"{name}_c")
    spark.sql(_TS_AGG_SQL).cache().createOrReplaceTempView("ts_agg")


def metrics(spark, key: str = "config", where: str = "") -> pd.DataFrame:
    """The IEP-113 table: summary figures joined with checkpoint averages, per `key`."""
    s = spark.sql(_SUMMARY_SQL.format(key=key, where=where)).toPandas()
    c = spark.sql(_CHECKPOINT_SQL.format(key=key, where=where)).toPandas()
    c = c.rename(columns={x: f"cp_{x}" for x in c.columns if x not in ("config", "checkpoints")})
    out = s.merge(c, on="config", how="left")
    out["checkpoints"] = out["checkpoints"].fillna(0).astype("int64")
    return out.sort_values("config").reset_index(drop=True)


def resolve_baseline(spark, table: pd.DataFrame, baseline: str | None) -> tuple:
    """(label, one-row metrics) of the baseline: a configuration label, a run_id or a unique substring."""
    labels = list(table["config"])
    if baseline is None:
        legacy = spark.sql("SELECT DISTINCT config FROM summary_c WHERE store = 'pagestore' "
                           "AND recovery_data = 'wal' ORDER BY config").toPandas()["config"].tolist()
        baseline = legacy[0] if legacy else labels[0]
    if baseline in labels:
        return baseline, table[table["config"] == baseline]
    runs = spark.sql("SELECT DISTINCT run_id FROM summary_c").toPandas()["run_id"].tolist()
    if baseline in runs:
        safe = baseline.replace("'", "''")
        row = metrics(spark, key="run_id", where=f"WHERE run_id = '{safe}'")
        return f"run {baseline}", row
    hits = [x for x in labels if baseline in x]
    if len(hits) == 1:
        return hits[0], table[table["config"] == hits[0]]
    raise ValueError(f"baseline {baseline!r} matches {len(hits)} configurations and no run_id; "
                     f"configurations: {'; '.join(labels)}")


def ratios(table: pd.DataFrame, base: pd.DataFrame) -> pd.DataFrame:
    """Each configuration's figures divided by the baseline's (empty where the baseline is 0)."""
    out = pd.DataFrame({"config": table["config"]})
    b = base.iloc[0]
    for col, name in RATIO_COLUMNS:
        denom = b[col] if pd.notna(b[col]) and b[col] != 0 else float("nan")
        out[name] = table[col].astype("float64") / denom
    return out


def series(spark) -> pd.DataFrame:
    """Per configuration and time bucket: cluster throughput, p99, checkpoint-buffer fill."""
    # the bucket width from the (cached) summaries' durations: no extra scan of the time series
    top = spark.sql("SELECT max(duration_s) AS m FROM summary_c").collect()[0]["m"] or 0
    width = max(1, -(-(int(top) + 2) // MAX_POINTS))
    return spark.sql(f"""
        WITH per_second AS (
          SELECT config, run_id, second, sum(thr_s) AS throughput,
                 sum(p99_s) / nullif(sum(p99_c), 0) AS p99, sum(mean_s) / nullif(sum(mean_c), 0) AS mean_us,
                 sum(fill_s) / nullif(sum(fill_c), 0) AS cow_fill
          FROM ts_agg GROUP BY config, run_id, second)
        SELECT config, CAST(floor(second / {width}) * {width} AS INT) AS second,
               avg(throughput) AS throughput, avg(p99) AS lat_p99_us, avg(mean_us) AS lat_mean_us,
               avg(cow_fill) AS cow_fill
        FROM per_second GROUP BY 1, 2 ORDER BY 1, 2""").toPandas()


def wal_by_mode(spark) -> pd.DataFrame:
    return spark.sql("""
        SELECT wal_mode, recovery_data, sum(wal_bytes) / nullif(sum(ops), 0) AS wal_bytes_per_op,
               avg(wal_bytes) AS wal_bytes_per_node
        FROM summary_c WHERE store = 'pagestore' GROUP BY 1, 2 ORDER BY 1, 2""").toPandas()


def recovery_by_codec(spark) -> pd.DataFrame:
    return spark.sql("""
        SELECT s.compression AS codec, sum(c.recovery_bytes) / nullif(sum(c.pages), 0) AS bytes_per_page,
               avg(c.recovery_bytes) AS bytes_per_checkpoint,
               avg(coalesce(CAST(get_json_object(s.config_json, '$.page_size') AS DOUBLE), 4096))
                 AS page_size
        FROM checkpoints_c c JOIN summary_c s ON c.run_id = s.run_id AND c.node = s.node
        WHERE s.store = 'pagestore' AND s.recovery_data = 'checkpoint' GROUP BY 1 ORDER BY 1
        """).toPandas()


def build_tables(spark, dirs: list, baseline: str | None = None) -> dict:
    """All report tables as pandas frames (small: one row per configuration or run)."""
    register_views(spark, dirs)
    table = metrics(spark)
    label, base = resolve_baseline(spark, table, baseline)
    during = spark.sql(_DURING_SQL).toPandas().sort_values("config").reset_index(drop=True)
    runs = spark.sql(_RUNS_SQL).toPandas().sort_values(["config", "run_id"]).reset_index(drop=True)
    cp_cols = ["config", "checkpoints"] + [c for c in table.columns if c.startswith("cp_")]
    main_cols = [c for c in table.columns if c not in cp_cols[1:]]
    return {"baseline": label, "configurations": table[main_cols],
            "checkpoints": table[cp_cols].rename(columns=lambda c: c.removeprefix("cp_")),
            "ratios": ratios(table, base), "checkpoint_effect": during, "runs": runs}


def write_outputs(tables: dict, figures: dict, out: str, inputs: list) -> str:
    """CSV + Markdown per table, PNG per chart, and the one self-contained HTML; returns its path."""
    os.makedirs(out, exist_ok=True)
    frames = {k: v for k, v in tables.items() if isinstance(v, pd.DataFrame)}
    for name, df in frames.items():
        df.to_csv(os.path.join(out, f"{name}.csv"), index=False)
        with open(os.path.join(out, f"{name}.md"), "w") as f:
            f.write(htmlpage.markdown_table(df))
    for name, png in figures.items():
        with open(os.path.join(out, f"{name}.png"), "wb") as f:
            f.write(png)
    path = os.path.join(out, "report.html")
    with open(path, "w") as f:
        f.write(htmlpage.render(frames, figures, baseline=tables["baseline"], inputs=inputs))
    return path


def report(spark, dirs: list, out: str, baseline: str | None = None) -> str:
    """Run the whole report; returns the HTML path."""
    tables = build_tables(spark, dirs, baseline)
    figures = charts.render_all(series(spark), wal_by_mode(spark), recovery_by_codec(spark))
    return write_outputs(tables, figures, out, dirs)
