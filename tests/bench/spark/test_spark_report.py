"""The report: Spark SQL tables equal a pandas computation of the same rows; the HTML is complete."""

import base64
import html
import os
import re

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest

from bench.spark import charts
from bench.spark.report import build_tables, report
from bench.spark.synth import write_results

ABBR = [("recovery_data", "rd"), ("compression", "codec"), ("wal_mode", "wal"), ("throttling", "thr"),
        ("op_style", "style")]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("results"))
    write_results(out, rows=4000, configs=6, runs=3, nodes=2, seed=4)   # 3 runs: a median is not a mean
    return out


def _frame(results, name):
    part = ds.partitioning(flavor="hive")
    return ds.dataset(os.path.join(results, name), format="parquet", partitioning=part).to_table().to_pandas()


def _label(r):
    opts = [f"{a}={r[c]}" for c, a in ABBR if r[c]]
    return " ".join([r["store"], r["scenario"]] + opts + [f"t{r['threads']}"])


@pytest.fixture(scope="module")
def expected(results):
    s = _frame(results, "summary")
    s["config"] = s.apply(_label, axis=1)
    run_cfg = s.groupby("run_id")["config"].min()
    per_run = s.groupby(["config", "run_id"]).agg(nodes=("node", "size"), thr=("throughput", "sum"))
    g = s.groupby("config")
    conf = pd.DataFrame({
        "runs": g["run_id"].nunique(), "nodes": per_run.groupby("config")["nodes"].max(),
        "throughput_ops_s": per_run.groupby("config")["thr"].median(), "ops": g["ops"].sum(),
        "lat_mean_us": (s.lat_mean_us * s.ops).groupby(s.config).sum() / g["ops"].sum(),
        "lat_p99_us": g["lat_p99_us"].mean(), "wal_bytes_per_node": g["wal_bytes"].mean(),
        "wal_bytes_per_op": g["wal_bytes"].sum() / g["ops"].sum(),
        "recovery_bytes_per_node": g["recovery_bytes"].mean(), "parks_per_node": g["parks"].mean(),
        "park_seconds_max": g["park_seconds_max"].max(), "stalls": g["stalls"].sum()})
    c = _frame(results, "checkpoints")
    c["config"] = c["run_id"].map(run_cfg)
    gc = c.groupby("config")
    for col in ("pages", "recovery_bytes", "recovery_write_ms", "page_write_ms", "fsync_ms", "total_ms"):
        conf[f"cp_{col}"] = gc[col].mean()
    conf["checkpoints"] = gc.size()
    conf["checkpoints"] = conf["checkpoints"].fillna(0)
    t = _frame(results, "timeseries")
    t["config"] = t["run_id"].map(run_cfg)
    inside, outside = t[t.checkpoint_running], t[~t.checkpoint_running]
    during = pd.DataFrame({
        "seconds": t.groupby("config").size(),
        "throughput_during": inside.groupby("config")["throughput"].mean(),
        "throughput_outside": outside.groupby("config")["throughput"].mean(),
        "p99_during_us": inside.groupby("config")["lat_p99_us"].mean(),
        "p99_outside_us": outside.groupby("config")["lat_p99_us"].mean(),
        "parks": t.groupby("config")["parks"].sum()})
    return conf.sort_index(), during.sort_index()


@pytest.fixture(scope="module")
def tables(spark, results):
    return build_tables(spark, [results])


def _compare(got: pd.DataFrame, want: pd.DataFrame):
    got = got.set_index("config").sort_index()
    assert list(got.index) == list(want.index)
    for col in want.columns:
        np.testing.assert_allclose(got[col].astype(float), want[col].astype(float), rtol=1e-9,
                                   equal_nan=True, err_msg=col)


def test_configuration_tables_equal_pandas(tables, expected):
    cp = tables["checkpoints"].rename(columns=lambda c: c if c in ("config", "checkpoints") else f"cp_{c}")
    both = tables["configurations"].merge(cp, on="config")
    assert len(both) == 6 and len(tables["configurations"].columns) + len(cp.columns) == len(both.columns) + 1
    _compare(both, expected[0])


def test_checkpoint_effect_table_equals_pandas(tables, expected):
    _compare(tables["checkpoint_effect"], expected[1])


def test_default_baseline_is_legacy_wal_mode_and_ratios_divide_by_it(tables):
    base = tables["baseline"]
    assert " rd=wal " in base and base.startswith("pagestore")
    conf = tables["configurations"].set_index("config")
    ratio = tables["ratios"].set_index("config")
    np.testing.assert_allclose(ratio["throughput"], conf["throughput_ops_s"] / conf.loc[base, "throughput_ops_s"])
    np.testing.assert_allclose(ratio["wal_bytes_per_op"], conf["wal_bytes_per_op"] / conf.loc[base, "wal_bytes_per_op"])
    assert ratio.loc[base].dropna().eq(1.0).all()
    assert ratio["recovery_bytes"].isna().all()       # the legacy baseline writes no recovery files


def test_run_id_baseline(spark, results, expected):
    s = _frame(results, "summary")
    run = sorted(s["run_id"])[0]
    t = build_tables(spark, [results], baseline=run)
    run_thr = s[s.run_id == run]["throughput"].sum()
    conf = t["configurations"].set_index("config")
    got = t["ratios"].set_index("config")["throughput"]
    np.testing.assert_allclose(got, conf["throughput_ops_s"] / run_thr)
    with pytest.raises(ValueError, match="matches 0 configurations"):
        build_tables(spark, [results], baseline="no-such-configuration")


def test_html_names_every_configuration_and_embeds_every_chart(spark, results, tmp_path, expected):
    out = str(tmp_path / "report")
    path = report(spark, [results], out)
    text = open(path, encoding="utf-8").read()
    for config in expected[0].index:
        assert html.escape(config) in text
    uris = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", text)
    pngs = sorted(f for f in os.listdir(out) if f.endswith(".png"))
    # six charts per scenario and the throttling policies: drawn (saying "not measured") even
    # when the results hold no IEP-113 experiment, as these synthetic configurations do not
    assert len(uris) == len(pngs) == 3 * len(charts.SCENARIO_CHARTS) + 1
    assert all(base64.b64decode(u)[:8] == b"\x89PNG\r\n\x1a\n" for u in uris)
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", text)     # nothing fetched from a network
    for name in ("configurations", "checkpoints", "ratios", "checkpoint_effect", "runs"):
        csv = pd.read_csv(os.path.join(out, f"{name}.csv"))
        md = open(os.path.join(out, f"{name}.md")).read().splitlines()
        assert len(md) == len(csv) + 2 and f"<details id='{name}'>" in text
    assert text.index("id='claims'") < text.index("id='peers'") < text.index("id='raw'")


def test_results_without_checkpoint_rows_still_make_a_report(spark, results, tmp_path, expected):
    # A short run has no checkpoint rows, so no `checkpoints` dataset exists.
    import shutil
    only = tmp_path / "no-checkpoints"
    for name in ("summary", "timeseries"):
        shutil.copytree(os.path.join(results, name), only / name)
    t = build_tables(spark, [str(only)])
    assert sorted(t["configurations"]["config"]) == sorted(expected[0].index)
    assert t["checkpoints"].drop(columns="config").fillna(0).eq(0).all().all()
