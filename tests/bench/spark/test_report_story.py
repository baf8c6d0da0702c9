"""The report's story: the per-round frame from Spark equals pandas over the same Parquet, and
the scenario tables, sentences, claims and peer ratios on the page follow from it."""

import os

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest

from bench import claims, scenario_table
from bench.experiment import SCENARIOS
from bench.spark.report import flat_scenario_table, per_round, register_views, report
from bench.spark.synth import write_iep_results


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("iep"))
    write_iep_results(out, rounds=3, seconds=12, nodes=2)
    return out


def _frame(results, name):
    return ds.dataset(os.path.join(results, name), format="parquet",
                      partitioning=ds.partitioning(flavor="hive")).to_table().to_pandas()


@pytest.fixture(scope="module")
def expected(results):
    return scenario_table.per_round(_frame(results, "summary"), _frame(results, "checkpoints"))


@pytest.fixture(scope="module")
def page(spark, results, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("page"))
    path = report(spark, [results], out)
    return out, open(path, encoding="utf-8").read()


def test_the_per_round_frame_from_spark_sql_equals_pandas(spark, results, expected):
    register_views(spark, [results])
    got = per_round(spark)
    keys = list(scenario_table.KEYS)
    assert len(expected) == 3 * 3 * 3 + 2 * 2 and len(got) == len(expected)
    got, want = got.set_index(keys).sort_index(), expected.set_index(keys).sort_index()
    assert list(got.index) == list(want.index)
    for col in want.columns:
        np.testing.assert_allclose(got[col].astype(float), want[col].astype(float), rtol=1e-9, equal_nan=True,
                                   err_msg=col)


def test_each_scenario_table_on_the_page_is_the_pandas_table(page, expected):
    out, text = page
    for scen in SCENARIOS:
        want = flat_scenario_table(scenario_table.table(expected, scen))
        got = pd.read_csv(os.path.join(out, f"iep_{scen}.csv"))
        assert list(got.columns) == ["parameter", "WAL mode", "recovery files", "recovery files + lz4",
                                     "files ÷ WAL", "lz4 ÷ WAL"]
        np.testing.assert_allclose(got["recovery files"].astype(float), want["recovery files"].astype(float),
                                   rtol=1e-9, equal_nan=True)
        assert got["files ÷ WAL"].fillna("").tolist() == want["files ÷ WAL"].tolist()
        assert scenario_table.sentence(scenario_table.table(expected, scen), scen) in text.replace("&#x27;", "'")


def test_the_claims_on_the_page_are_those_of_the_pandas_frame(page, expected):
    out, text = page
    got = pd.read_csv(os.path.join(out, "claims.csv"))
    want = claims.evaluate(expected)
    assert len(got) == len(want) == 7
    assert got["verdict"].tolist() == [r["verdict"] for r in want]
    assert got["measured"].tolist() == [r["measured"] for r in want]
    assert all(v in text for v in got["verdict"])


def test_the_peers_table_divides_pagestore_by_each_peer(page, results):
    out, _text = page
    s = _frame(results, "summary")
    s = s[s["experiment"] == "peers"]
    got = pd.read_csv(os.path.join(out, "peers.csv")).set_index("operation")
    row = got.loc["commit per put, 4 threads"]
    pick = lambda store: s[(s.store == store) & (s.wal_mode == "fsync") & (s.threads == 4)]["throughput"].median()  # noqa: E731
    assert row["durable"] == "yes (fsync)"
    np.testing.assert_allclose(row["pagestore ÷ lmdb"], pick("pagestore") / pick("lmdb"), rtol=1e-9)
    np.testing.assert_allclose(row["pagestore ÷ sqlite"], pick("pagestore") / pick("sqlite"), rtol=1e-9)


def test_the_first_screen_holds_the_three_scenario_tables_and_their_charts(page):
    from bench.spark import browser
    try:
        browser.find_chromium()
    except browser.BrowserMissing as e:
        pytest.skip(f"not run: {e}")
    out, _text = page
    lay = browser.layout(os.path.join(out, "report.html"), width=1400, height=1400)
    assert lay["width"] == 1400 and lay["images_loaded"]
    assert len(lay["tables"]) == 3 and len(lay["charts"]) == 3 and len(lay["sentences"]) == 3
    for box in lay["tables"] + lay["charts"] + lay["sentences"]:
        assert box["bottom"] <= 1400 and box["right"] <= 1400, box
    assert [c["alt"] for c in lay["charts"]] == [f"throughput {s}" for s in SCENARIOS]
    for head in lay["headers"]:
        assert "WAL mode" in head and "recovery files" in head and "recovery files + lz4" in head
