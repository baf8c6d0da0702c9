"""One result schema: a run written by the harness reads back through the Spark report, every column."""

import math

import pytest

from bench import results as res
from bench.runner import run
from bench.schema import columns
from bench.spark.report import register_views
from bench.stores import pagestore_available


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    ok, why = pagestore_available()
    if not ok:
        pytest.skip(f"not run: pagestore cannot be opened here ({why})")
    out = str(tmp_path_factory.mktemp("roundtrip"))
    r = run(dict(store="pagestore", scenario="full-speed", duration=2.0, warmup=0.3, checkpoint_interval=0.5,
                 key_range=20_000, experiment="iep-113", round=2, data_dir=out))
    res.write_result(out, r)
    return out, r


def _same(a, b) -> bool:
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    if isinstance(a, float):
        return b is not None and math.isclose(a, b, rel_tol=1e-12)
    return a == b


def test_every_column_the_harness_writes_reads_back_through_the_spark_report(spark, written):
    out, r = written
    register_views(spark, [out])
    assert r["checkpoints"], "the run should have had checkpoints"
    for dataset, rows in (("summary", [r["summary"]]), ("checkpoints", r["checkpoints"]),
                          ("timeseries", r["timeseries"])):
        view = spark.table(f"{dataset}_c")
        assert sorted(c for c in view.columns if c != "config") == sorted(columns(dataset))
        got = sorted((row.asDict() for row in view.collect()),
                     key=lambda d: (d.get("second") or 0, d.get("checkpoint_id") or 0))
        want = sorted(rows, key=lambda d: (d.get("second") or 0, d.get("checkpoint_id") or 0))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            for col in columns(dataset):
                assert _same(w.get(col), g[col]), (dataset, col, w.get(col), g[col])
    s = spark.sql("SELECT experiment, round, lat_p99_ckpt_us FROM summary_c").collect()[0]
    assert s["experiment"] == "iep-113" and s["round"] == 2 and s["lat_p99_ckpt_us"] > 0


def test_the_harness_fills_every_summary_column_but_the_server_comparisons(written):
    _out, r = written
    torn_page = {"setting", "log_bytes_per_op", "protection_bytes_per_op", "data_page_bytes_per_op",
                 "device_bytes_per_op", "wchar_bytes_per_op"}
    assert set(columns("summary")) - set(r["summary"]) == torn_page
    assert set(r["summary"]) <= set(columns("summary"))
