"""Rules of the torn-page comparison that need no server: parsing, accounting, ratios, the section."""

import json
import os

import pytest

from bench.results import write_dataset
from bench.servers import comparison, device, postgres, section

# The Total line of `pg_waldump --stats=record` as PostgreSQL 15 prints it.
WALDUMP = """\
WAL statistics between 0/1E000028 and 0/1F2C0A10:
Type                                           N      (%)          Record size      (%)             FPI size      (%)        Combined size      (%)
----                                           -      ---          -----------      ---             --------      ---        -------------      ---
Heap/HOT_UPDATE                            95561 ( 94.12)              7167075 ( 93.01)              3481688 ( 32.90)             10648763 ( 58.07)
Transaction/COMMIT                          5893 (  5.80)               200362 (  2.60)                    0 (  0.00)               200362 (  1.09)
                                        --------                      --------                      --------                      --------
Total                                     101532                       7705610 [42.02%]             10632304 [57.98%]             18337914 [100%]
"""


def test_fpi_bytes_are_the_fpi_column_of_the_total_line():
    assert postgres.waldump_fpi_bytes(WALDUMP) == 10632304


def test_waldump_output_without_a_total_line_is_an_error():
    with pytest.raises(ValueError, match="Total"):
        postgres.waldump_fpi_bytes(WALDUMP.split("Total")[0])


def test_window_counts_this_process_write_in_wchar_and_on_the_device(tmp_path):
    w = device.Window(str(tmp_path), lambda: [os.getpid()])
    w.open()
    with open(tmp_path / "f", "wb") as f:
        f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
    got = w.close()
    assert got["wchar_bytes"] >= 1 << 20
    assert got["device_bytes"] >= 1 << 20
    assert got["device"] == device.block_device(str(tmp_path))


def _row(store, setting, tps, log, prot, data=0.0, recovery_data=None, run_id="s1"):
    return {"run_id": run_id, "node": 0, "store": store, "scenario": comparison.SCENARIO, "setting": setting,
            "throughput": tps, "log_bytes_per_op": log, "protection_bytes_per_op": prot,
            "data_page_bytes_per_op": data, "device_bytes_per_op": 1000.0, "wchar_bytes_per_op": 900.0,
            "lat_p50_us": 100.0, "lat_p99_us": 900.0, "duration_s": 60.0, "recovery_data": recovery_data,
            "config_json": json.dumps({"rows": 1000, "clients": 4, "checkpoint_interval_s": 30})}


ROWS = [
    _row("postgresql", "full_page_writes=on", 8000, 1000, 600),
    _row("postgresql", "full_page_writes=off", 9000, 280, 0),
    _row("mariadb", "doublewrite=ON", 8500, 400, 620),
    _row("mariadb", "doublewrite=OFF", 8900, 400, 0),
    _row("pagestore", "recovery files, default codec (lz4)", 13600, 140, 260, recovery_data="checkpoint"),
    _row("pagestore", "page images in the WAL (legacy)", 12000, 590, None, recovery_data="wal"),
]


def test_findings_compare_pagestore_with_the_protected_servers_and_the_bare_wal():
    f = comparison.findings(ROWS)
    assert f["tps_vs_best_protected"] == pytest.approx(13600 / 8500)
    assert f["best_protected"] == "MariaDB InnoDB doublewrite=ON"
    assert f["protection_vs_pg_fpw_on"] == pytest.approx(260 / 600)
    assert f["protection_vs_innodb_dw_on"] == pytest.approx(260 / 620)
    assert f["log_vs_pg_fpw_off"] == pytest.approx(140 / 280)
    assert "1.60x the best protected server" in f["sentence"]


def test_legacy_protection_is_its_log_above_the_recovery_files_run():
    rows = [dict(r, ops=1000) for r in ROWS]
    comparison._fill_legacy_protection(rows)
    legacy = comparison.pick(rows, "pagestore", "legacy")
    assert legacy["protection_bytes_per_op"] == pytest.approx(590 - 140)


def test_page_images_inside_a_wal_are_not_counted_twice_in_the_chart():
    pg, idb = section.split(ROWS[0]), section.split(ROWS[2])
    assert pg == {"log": 400, "protection": 600, "data pages": 0.0}      # 1000 of WAL holds 600 of images
    assert idb == {"log": 400, "protection": 620, "data pages": 0.0}     # the doublewrite is beside the redo


def test_section_says_how_to_run_the_servers_when_they_were_not(tmp_path):
    html = section.section([str(tmp_path)])
    assert section.TITLE in html
    assert "make bench-servers" in html and "<table>" not in html


def test_section_shows_the_newest_run_with_table_chart_and_sentence(tmp_path):
    write_dataset(str(tmp_path), "summary", [dict(r, run_id="s0", throughput=1.0) for r in ROWS])
    write_dataset(str(tmp_path), "summary", ROWS)
    html = section.section([str(tmp_path)])
    assert html.count("<tr>") == 1 + len(ROWS) and "others&#x27; wchar B" in html
    assert "13,600" in html and ">1<" not in html        # the newer run only
    assert "data:image/png;base64," in html
    assert comparison.findings(ROWS)["sentence"].split(",")[0] in html
