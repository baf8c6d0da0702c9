"""The results report: Spark SQL over the result datasets, then tables, charts and HTML.

The page tells IEP-113's story first: per scenario the comparison table
(``bench.scenario_table``, from the per-round frame computed here in Spark SQL),
its sentence and charts of the compared modes only, then IEP-113's claims with
a verdict each (``bench.claims``), the peer stores, data outgrowing page memory
(``bench.spark.report_outgrowth``), the torn-page comparison
against PostgreSQL and InnoDB when ``bench.servers`` is present, and last the
raw per-configuration tables, folded. Every aggregate is computed in Spark;
only small frames (one row per configuration, round or second) reach the
driver. Formulas: docs/spark.md.
"""

from __future__ import annotations

import os

import pandas as pd
from pyspark.sql import functions as F

from bench import claims, scenario_table
from bench.experiment import IEP, MODES, SCENARIOS, THROTTLING
from bench.schema import spark_ddl

from . import charts, htmlpage, report_outgrowth

ABBREV = (("recovery_data", "rd"), ("compression", "codec"), ("wal_mode", "wal"),
          ("throttling", "thr"), ("op_style", "style"))

_LABEL = ("concat_ws(' ', store, scenario, "
          + ", ".join(f"CASE WHEN {c} <> '' THEN concat('{a}=', {c}) END" for c, a in ABBREV)
          # the setting tells apart rows of one scenario that differ only in it (the torn-page
          # systems' settings, the data-to-memory ratios of data outgrowing page memory)
          + ", CASE WHEN setting <> '' THEN setting END, concat('t', CAST(threads AS STRING)))")

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


_MODE = ("CASE WHEN recovery_data = 'wal' THEN 'wal' WHEN compression = 'disabled' THEN 'files' "
         "ELSE 'compressed' END")
_KEYS = "experiment, scenario, mode, round, throttling"

# The per-round frame of bench.scenario_table.per_round, in Spark SQL (a test holds them equal).
_ROUNDS_SQL = f"""
WITH a AS (
  SELECT {_KEYS}, sum(throughput) AS throughput, avg(lat_p50_us) AS lat_p50_us,
         avg(lat_p99_us) AS lat_p99_us, avg(lat_p99_ckpt_us) AS lat_p99_ckpt_us,
         sum(throughput_ckpt) AS throughput_ckpt,
         sum(wal_bytes) / sum(ops) AS wal_bytes_per_op, sum(disk_write_bytes) / sum(ops) AS disk_bytes_per_op,
         sum(recovery_bytes) / sum(ops) AS recovery_bytes_per_op, sum(page_bytes) / sum(ops) AS page_bytes_per_op,
         avg(checkpoints) AS checkpoints, avg(parks) AS parks, max(park_seconds_max) AS park_seconds_max,
         sum(stalls) AS stalls
  FROM experiment_runs GROUP BY {_KEYS}),
c AS (
  SELECT s.experiment, s.scenario, s.mode, s.round, s.throttling, avg(c.pages) AS pages,
         sum(c.recovery_bytes) / sum(c.pages) AS recovery_bytes_per_page,
         avg(c.recovery_write_ms) AS recovery_write_ms, avg(c.page_write_ms) AS page_write_ms,
         avg(c.fsync_ms) AS fsync_ms, avg(c.total_ms) AS total_ms
  FROM checkpoints_c c JOIN experiment_runs s ON c.run_id = s.run_id AND c.node = s.node
  GROUP BY s.experiment, s.scenario, s.mode, s.round, s.throttling)
SELECT a.*, c.pages, c.recovery_bytes_per_page, c.recovery_write_ms, c.page_write_ms, c.fsync_ms, c.total_ms
FROM a LEFT JOIN c USING ({_KEYS})
ORDER BY {_KEYS}
"""

# One round's runs per second (nodes summed), for the time charts.
_SECONDS_SQL = """
SELECT s.scenario, s.mode, s.throttling, t.second, sum(t.throughput) AS throughput,
       avg(t.lat_p99_us) AS lat_p99_us, sum(t.cow_used) / nullif(sum(t.cow_capacity), 0) AS cow_fill,
       sum(t.parks) AS parks
FROM timeseries_c t JOIN experiment_runs s ON t.run_id = s.run_id AND t.node = s.node
WHERE s.experiment = '{experiment}' AND s.round = {round}
GROUP BY s.scenario, s.mode, s.throttling, t.second ORDER BY 1, 2, 3, 4
"""

_SPANS_SQL = """
SELECT s.scenario, s.mode, c.t_start, c.total_ms, c.pages
FROM checkpoints_c c JOIN experiment_runs s ON c.run_id = s.run_id AND c.node = s.node
WHERE s.experiment = '{experiment}' AND s.round = {round} AND c.node = 0 ORDER BY 1, 2, 3
"""

PEER_COLUMNS = ("lmdb", "rocksdict", "plyvel", "sqlite")
_PEER_NAMES = {"lmdb_writemap": "lmdb"}
_PHASES = {"bulk-load": "bulk load (one batch)", "point-get": "random point get", "ordered-scan": "ordered scan"}


def per_round(spark) -> pd.DataFrame:
    """The per-round frame (``bench.scenario_table``) of the IEP-113 experiment and the throttling
    comparison; empty when the results hold neither."""
    where = f"experiment IN ('{IEP}', '{THROTTLING}')"
    # the newest session only (rounds are numbered within a session)
    spark.sql(f"SELECT *, {_MODE} AS mode FROM summary_c WHERE {where} AND coalesce(session, '') = "
              f"(SELECT max(coalesce(session, '')) FROM summary_c WHERE {where})") \
        .createOrReplaceTempView("experiment_runs")
    df = spark.sql(_ROUNDS_SQL).toPandas()
    if not df.empty:
        df["round"] = df["round"].astype("int64")
    return df


def _chart_round(frame: pd.DataFrame, experiment: str):
    """The round whose runs the time charts show: the middle one (None without any)."""
    rounds = sorted(set(frame[frame["experiment"] == experiment]["round"]))
    return rounds[len(rounds) // 2] if rounds else None


def peers_table(spark) -> pd.DataFrame:
    """pagestore against each peer per operation: ops/s and pagestore ÷ peer (median over runs)."""
    s = spark.sql("SELECT store, scenario, wal_mode, threads, throughput FROM summary_c WHERE experiment = 'peers' "
                  "AND coalesce(session, '') = (SELECT max(coalesce(session, '')) FROM summary_c "
                  "WHERE experiment = 'peers')").toPandas()
    if s.empty:
        return pd.DataFrame(columns=["operation", "durable", "pagestore"])
    s["store"] = s["store"].replace(_PEER_NAMES)

    def op(r):
        if r["scenario"] in _PHASES:
            return _PHASES[r["scenario"]], "–"
        if r["wal_mode"] == "fsync":
            return f"commit per put, {r['threads']} thread{'s' if r['threads'] > 1 else ''}", "yes (fsync)"
        return f"commit per put, {r['threads']} thread", "no (survives a process kill)"

    s[["operation", "durable"]] = s.apply(lambda r: pd.Series(op(r)), axis=1)
    # page order: the bulk phases, then commit per put not durable, then durable by thread count
    s["_o"] = [list(_PHASES).index(sc) if sc in _PHASES else (10 if w != "fsync" else 20) + int(t)
               for sc, w, t in zip(s["scenario"], s["wal_mode"], s["threads"])]
    med = s.groupby(["_o", "operation", "durable", "store"])["throughput"].median().unstack("store")
    rows = []
    for (_o, operation, durable), r in med.iterrows():
        row = dict(operation=operation, durable=durable, pagestore=r.get("pagestore"))
        for peer in PEER_COLUMNS:
            v = r.get(peer)
            row[peer] = v
            row[f"pagestore ÷ {peer}"] = (r.get("pagestore") / v) if v and v == v and r.get("pagestore") else None
        rows.append(row)
    return pd.DataFrame(rows)


def servers_section(dirs: list) -> str:
    """The torn-page comparison's HTML (``bench.servers.section``), when that package is present."""
    try:
        from bench.servers import section as servers
    except ImportError:
        return ""
    try:
        return servers.section(dirs)
    except Exception as e:   # the rest of the report stands without this section
        return f"<h2>Torn-page protection against PostgreSQL and InnoDB</h2><p class='note'>not shown: {e!r}</p>"


def story(spark, dirs: list) -> dict:
    """Everything above the raw tables: scenario tables, sentences, charts, claims, peers."""
    frame = per_round(spark)
    out = dict(frame=frame, scenarios=[], claims=claims.evaluate(frame) if not frame.empty else [])
    r = _chart_round(frame, IEP)
    ts = spark.sql(_SECONDS_SQL.format(experiment=IEP, round=r)).toPandas() if r is not None else pd.DataFrame()
    spans = spark.sql(_SPANS_SQL.format(experiment=IEP, round=r)).toPandas() if r is not None else pd.DataFrame()
    n_rounds = len(set(frame[frame["experiment"] == IEP]["round"])) if not frame.empty else 0
    label = f" (round {r + 1} of {n_rounds})" if r is not None else ""
    empty_ts = pd.DataFrame(columns=["mode", "second", "throughput", "lat_p99_us", "cow_fill", "parks"])
    empty_spans = pd.DataFrame(columns=["mode", "t_start", "total_ms", "pages"])
    for scen in SCENARIOS:
        tbl = scenario_table.table(frame, scen) if not frame.empty else pd.DataFrame()
        sts = ts[ts["scenario"] == scen] if not ts.empty else empty_ts
        ssp = spans[spans["scenario"] == scen] if not spans.empty else empty_spans
        rounds = scenario_table.scenario_rounds(frame, scen) if not frame.empty else frame
        out["scenarios"].append(dict(
            scenario=scen, table=tbl, round_label=label,
            sentence=scenario_table.sentence(tbl, scen) if not tbl.empty else f"{scen}: not run.",
            charts=charts.scenario_charts(scen, sts, ssp, rounds, label)))
    pr = _chart_round(frame, THROTTLING) if not frame.empty else None
    pts = spark.sql(_SECONDS_SQL.format(experiment=THROTTLING, round=pr)).toPandas() if pr is not None \
        else pd.DataFrame()
    out["policy_chart"] = charts.policy_chart(pts, "Throughput under the two throttling policies — extreme, "
                                                   "recovery files + lz4" + (f" (round {pr + 1})" if pr is not None else ""))
    out["peers"] = peers_table(spark)
    out["servers_html"] = servers_section(dirs)
    out["outgrowth"] = report_outgrowth.section(spark)
    return out


def flat_scenario_table(tbl: pd.DataFrame) -> pd.DataFrame:
    """A scenario table with its ratio columns as text (for CSV and Markdown)."""
    if tbl.empty:
        return tbl
    out = tbl[["parameter"] + [k for k, _t, _o in MODES]].copy()
    out.columns = ["parameter"] + [t for _k, t, _o in MODES]
    out["files ÷ WAL"] = [scenario_table.ratio_text(r) for r in tbl["files_ratio"]]
    out["lz4 ÷ WAL"] = [scenario_table.ratio_text(r) for r in tbl["compressed_ratio"]]
    return out


def write_outputs(tables: dict, told: dict, out: str, inputs: list) -> str:
    """CSV + Markdown per table, PNG per chart, and the one self-contained HTML; returns its path."""
    os.makedirs(out, exist_ok=True)
    frames = {k: v for k, v in tables.items() if isinstance(v, pd.DataFrame)}
    for sc in told["scenarios"]:
        frames[f"iep_{sc['scenario']}"] = flat_scenario_table(sc["table"])
    frames["claims"] = pd.DataFrame(told["claims"], columns=["claim", "iep", "measured", "verdict", "why"])
    frames["peers"] = told["peers"]
    frames["per_round"] = told["frame"]
    if "outgrowth" in told:
        frames["outgrowth"] = told["outgrowth"]["table"]
    if (told.get("outgrowth") or {}).get("chart"):
        with open(os.path.join(out, "outgrowth.png"), "wb") as f:
            f.write(told["outgrowth"]["chart"])
    for name, df in frames.items():
        df.to_csv(os.path.join(out, f"{name}.csv"), index=False)
        with open(os.path.join(out, f"{name}.md"), "w") as f:
            f.write(htmlpage.markdown_table(df))
    for sc in told["scenarios"]:
        for name, png in sc["charts"].items():
            with open(os.path.join(out, f"{sc['scenario']}-{name}.png"), "wb") as f:
                f.write(png)
    with open(os.path.join(out, "throttling-policies.png"), "wb") as f:
        f.write(told["policy_chart"])
    path = os.path.join(out, "report.html")
    raw = {k: v for k, v in tables.items() if isinstance(v, pd.DataFrame)}
    with open(path, "w") as f:
        f.write(htmlpage.render(told, raw, baseline=tables["baseline"], inputs=inputs))
    return path


def report(spark, dirs: list, out: str, baseline: str | None = None) -> str:
    """Run the whole report; returns the HTML path."""
    tables = build_tables(spark, dirs, baseline)
    return write_outputs(tables, story(spark, dirs), out, dirs)
