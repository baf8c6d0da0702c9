"""The report's "data outgrows page memory" section: the per-round frame from Spark SQL equals
pandas over the same Parquet, and the table, sentence and chart on the page follow from it."""

import os
import re

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest

from bench import outgrowth
from bench import outgrowth_table as ot
from bench.results import write_dataset
from bench.spark import report_outgrowth
from bench.spark.report import register_views, report
from bench.spark.synth import write_iep_results

MiB = 1 << 20
# (store, load keys/s, gets/s) at 1x; every store slows as the data grows, pagestore the most
BASE = (("pagestore", 60_000.0, 600_000.0), ("lmdb", 600_000.0, 1_600_000.0),
        ("rocksdict", 800_000.0, 550_000.0), ("plyvel", 1_200_000.0, 900_000.0))


def _rows(session_rounds: int, scale: float = 1.0) -> list:
    rng = np.random.default_rng(7)
    out = []
    for rnd in range(session_rounds):
        for ratio in (1, 4, 10):
            for store, load, get in BASE:
                fall = ratio ** (0.5 if store == "pagestore" else 0.1)
                ld, gt = load / fall * rng.uniform(0.8, 1.2) * scale, get / fall * rng.uniform(0.8, 1.2)
                keys = int(ratio * 3 * MiB // outgrowth.ENTRY)
                out.append(dict(store=store, case=f"data {ratio}x page memory, memory_size 3 MiB", keys=keys,
                                load_s=keys / ld, get_s=5_000 / gt, load_per_s=ld, get_per_s=gt,
                                memory_size=3 * MiB, page_memory=3 * MiB, data_ratio=float(ratio), round=rnd))
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("outgrowth"))
    write_iep_results(out, rounds=2, seconds=8, nodes=1)
    # an older session first: the section shows the newest one only
    write_dataset(out, "summary", outgrowth.summary_rows(_rows(1, scale=100.0), "og-old", "q20261126T000000-aaaaaa"))
    write_dataset(out, "summary", outgrowth.summary_rows(_rows(3), "og-new", "q20261127T000000-bbbbbb"))
    return out


@pytest.fixture(scope="module")
def expected(results):
    s = ds.dataset(os.path.join(results, "summary"), format="parquet",
                   partitioning=ds.partitioning(flavor="hive")).to_table().to_pandas()
    return ot.per_round(s)


@pytest.fixture(scope="module")
def page(spark, results, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("page"))
    path = report(spark, [results], out)
    return out, open(path, encoding="utf-8").read()


def test_the_per_round_frame_from_spark_sql_equals_pandas(spark, results, expected):
    register_views(spark, [results])
    got = report_outgrowth.per_round(spark)
    assert len(expected) == 3 * 3 * len(BASE) and len(got) == len(expected)
    assert list(got.columns) == list(ot.FRAME_COLUMNS)
    for col in ("data_ratio", "store", "round", "keys", "page_memory"):
        assert got[col].tolist() == expected[col].tolist(), col
    for col in ("load_per_s", "get_per_s"):
        np.testing.assert_allclose(got[col].astype(float), expected[col].astype(float), rtol=1e-12, err_msg=col)
    # the newest session only: the old one's 100x load rates are not in it
    assert got["load_per_s"].max() < 2_000_000


def test_the_table_on_the_page_is_the_pandas_table(page, expected):
    out, _text = page
    want = ot.flat(ot.table(expected))
    got = pd.read_csv(os.path.join(out, "outgrowth.csv"))
    assert list(got.columns) == list(want.columns)
    assert got["store"].tolist() == ["pagestore", "LMDB", "RocksDB", "LevelDB"] * 3
    np.testing.assert_allclose(got["load keys/s"], want["load keys/s"].astype(float), rtol=1e-9)
    assert got["load ÷ LMDB"].fillna("").tolist() == want["load ÷ LMDB"].tolist()
    assert got["gets ÷ RocksDB"].fillna("").tolist() == want["gets ÷ RocksDB"].tolist()
    # three rounds: every ratio to another store carries its min-max spread
    assert all(re.fullmatch(r"\d+\.\d\d× \(\d+\.\d\d–\d+\.\d\d\)", v) for v in want["load ÷ RocksDB"] if v != "–")


def test_the_section_states_what_it_measures_its_finding_and_its_chart(page, expected):
    out, text = page
    sentence = ot.sentence(ot.table(expected))
    assert sentence.startswith("With 3 MiB of page memory and data growing from 1× to 10× of it, pagestore loaded")
    head = text.index("<h2 id='outgrowth'>")
    assert text.index("<h2 id='peers'>") < head < text.index("<h2 id='raw'>")
    section = text[head:text.index("<h2 id='raw'>")]
    assert sentence in section.replace("&#x27;", "'")
    assert "1×, 4×, 10× pagestore&#x27;s page memory (3 MiB here)" in section
    assert "alt='data outgrows page memory' src='data:image/png;base64," in section
    assert "href='#outgrowth'" in text
    with open(os.path.join(out, "outgrowth.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_the_raw_tables_keep_the_data_ratios_apart(page):
    out, _text = page
    conf = pd.read_csv(os.path.join(out, "configurations.csv"))
    og = conf[conf["config"].str.contains("outgrows-memory")]
    # per store and operation one configuration per ratio; raw tables hold every session:
    # the old one's round and the newest one's three
    assert len(og) == 2 * 3 * len(BASE)
    assert set(og["runs"]) == {4}
    assert og["config"].str.contains("data 10x page memory").sum() == 2 * len(BASE)


def test_without_the_scenario_the_section_says_how_to_run_it(spark, tmp_path):
    write_iep_results(str(tmp_path), rounds=1, seconds=4, nodes=1)
    register_views(spark, [str(tmp_path)])
    sec = report_outgrowth.section(spark)
    assert sec["frame"].empty and "not run in these results" in sec["html"]


def test_the_first_screen_still_holds_the_scenario_tables_with_the_section_below(page):
    from bench.spark import browser
    try:
        browser.find_chromium()
    except browser.BrowserMissing as e:
        pytest.skip(f"not run: {e}")
    out, _text = page
    lay = browser.layout(os.path.join(out, "report.html"), width=1400, height=1400)
    assert lay["images_loaded"]
    assert len(lay["tables"]) == 3 and len(lay["charts"]) == 3 and len(lay["sentences"]) == 3
    for box in lay["tables"] + lay["charts"] + lay["sentences"]:
        assert box["bottom"] <= 1400 and box["right"] <= 1400, box
