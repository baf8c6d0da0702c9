"""The scenario table: medians over rounds per mode, ratios paired within a round, spread shown."""

import math

import pandas as pd
from rich.console import Console

from bench import report_table, scenario_table
from bench.schema import columns


def _run(run_id, scen, rd, comp, rnd, tput, wal, ckpt_ms, pages=100, rec=0):
    s = {c: None for c in columns("summary")}
    s.update(run_id=run_id, node=0, store="pagestore", scenario=scen, recovery_data=rd, compression=comp,
             throttling="default", experiment="iep-113", round=rnd, throughput=tput, ops=1000,
             wal_bytes=wal * 1000, disk_write_bytes=3 * wal * 1000, recovery_bytes=rec * pages,
             page_bytes=4096 * pages, lat_p50_us=2.0, lat_p99_us=9.0, lat_p99_ckpt_us=12.0,
             throughput_ckpt=tput * 0.9, checkpoints=3, parks=0, park_seconds_max=0.0, stalls=0)
    c = {c: None for c in columns("checkpoints")}
    c.update(run_id=run_id, node=0, checkpoint_id=1, t_start=1.0, pages=pages, recovery_bytes=rec * pages,
             recovery_write_ms=1.0, page_write_ms=2.0, fsync_ms=3.0, total_ms=ckpt_ms)
    return s, c


def _frame():
    rows = []
    # three rounds; in round 2 the machine was slow for everyone: pairing within rounds cancels it
    for rnd, slow in ((0, 1.0), (1, 1.0), (2, 0.5)):
        rows.append(_run(f"w{rnd}", "extreme", "wal", "disabled", rnd, 100_000 * slow, 4000, 30.0))
        rows.append(_run(f"f{rnd}", "extreme", "checkpoint", "disabled", rnd, 120_000 * slow + rnd * 1000, 150,
                         60.0, rec=4096))
        rows.append(_run(f"c{rnd}", "extreme", "checkpoint", "lz4", rnd, 110_000 * slow, 150, 70.0, rec=1700))
    s = pd.DataFrame([r[0] for r in rows], columns=columns("summary"))
    c = pd.DataFrame([r[1] for r in rows], columns=columns("checkpoints"))
    peer = {k: None for k in columns("summary")}
    peer.update(run_id="p", node=0, store="lmdb", scenario="full-speed", experiment="peers", throughput=1.0, ops=1)
    s = pd.concat([s, pd.DataFrame([peer], columns=columns("summary"))], ignore_index=True)
    return scenario_table.per_round(s, c)


def test_per_round_has_one_row_per_mode_and_round_and_leaves_the_peers_out():
    f = _frame()
    assert len(f) == 9 and set(f["mode"]) == {"wal", "files", "compressed"}
    row = f[(f["mode"] == "files") & (f["round"] == 1)].iloc[0]
    assert row["throughput"] == 121_000 and row["wal_bytes_per_op"] == 150 and row["recovery_bytes_per_page"] == 4096


def test_ratios_are_paired_within_rounds_and_the_spread_is_their_range():
    tbl = scenario_table.table(_frame(), "extreme").set_index("key")
    thr = tbl.loc["throughput"]
    assert thr["wal"] == 100_000 and thr["files"] == 120_000           # medians over rounds
    r = thr["files_ratio"]
    assert r["n"] == 3 and math.isclose(r["lo"], 1.20) and math.isclose(r["hi"], 1.24)
    assert math.isclose(r["median"], 1.21)
    assert math.isclose(tbl.loc["wal_bytes_per_op", "files_ratio"]["median"], 150 / 4000)
    assert scenario_table.ratio_text(r) == "1.21× (1.20–1.24)"
    assert scenario_table.table(_frame(), "full-speed")["files_ratio"].map(lambda x: x["n"]).eq(0).all()


def test_the_sentence_states_the_measured_ratios_and_whether_1_is_inside_the_spread():
    tbl = scenario_table.table(_frame(), "extreme")
    text = scenario_table.sentence(tbl, "extreme")
    assert text.startswith("extreme: recovery files: 1.21× the throughput, 1/26.7 of the WAL bytes, "
                           "checkpoints 2.0× as long, lz4 cuts recovery data 2.4×")
    assert "median of 3 rounds" in text and "1.00 is outside the run-to-run spread" in text


def test_the_terminal_table_has_the_modes_as_columns_and_parameters_as_rows():
    con = Console(width=200, record=True)
    con.print(report_table.scenario_table(scenario_table.table(_frame(), "extreme"), "extreme"))
    text = con.export_text()
    assert "WAL mode" in text and "recovery files + lz4" in text and "files ÷ WAL" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("│ throughput"))
    assert "100,000" in line and "120,000" in line and "1.21× (1.20–1.24)" in line


def test_only_the_newest_session_of_a_results_directory_is_paired():
    old, new = [], []
    for rnd in range(2):
        old.append(_run(f"o{rnd}", "extreme", "wal", "disabled", rnd, 1.0, 4000, 30.0))
        new.append(_run(f"n{rnd}", "extreme", "wal", "disabled", rnd, 100_000.0, 4000, 30.0))
    for s, _c in old:
        s["session"] = "q20261127T010000-aaaaaa"
    for s, _c in new:
        s["session"] = "q20261127T020000-bbbbbb"
    rows = old + new
    f = scenario_table.per_round(pd.DataFrame([r[0] for r in rows], columns=columns("summary")),
                                 pd.DataFrame([r[1] for r in rows], columns=columns("checkpoints")))
    assert len(f) == 2 and f["throughput"].tolist() == [100_000.0, 100_000.0]   # not 100,001 (summed)
