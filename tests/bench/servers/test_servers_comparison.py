"""The whole comparison at a tiny scale: every system and setting measured, recorded, reported.

Runs when PostgreSQL and MariaDB are installed (``make bench-servers`` installs
them); otherwise it is reported as not run, with the reason."""

import os

import pytest

from bench.results import read_dataset, write_dataset
from bench.servers import comparison, mariadb, pagestore_side, postgres, processes, section


def test_tiny_comparison_measures_every_setting_of_every_system(server_parent, tmp_path):
    missing = comparison.missing()
    if missing:
        pytest.skip("not run: " + "; ".join(missing.values()) + " (make bench-servers installs them)")
    before = set(processes.started_pids())
    res = comparison.run(rows=10_000, seconds=2, warmup=1, clients=4, checkpoint_s=30,
                         parent=server_parent, progress=lambda s: None)
    rows = res["rows"]
    want = [("postgresql", s) for s, _ in postgres.SETTINGS] + [("mariadb", s) for s, _ in mariadb.SETTINGS] + \
           [("pagestore", s) for s, _ in pagestore_side.SETTINGS]
    got = [(r["store"], r["setting"]) for r in rows]
    assert [g[0] for g in got] == [w[0] for w in want]
    assert all(g[1].startswith(w[1].split(", default")[0]) for g, w in zip(got, want))
    for r in rows:
        assert r["ops"] > 0 and r["throughput"] > 0, r
        assert 0 < r["lat_p50_us"] <= r["lat_p99_us"], r
        assert r["log_bytes_per_op"] > 0 and r["device_bytes_per_op"] > 0, r
        assert r["wchar_bytes_per_op"] > 0, r          # every system wrote its log through write()
        assert r["protection_bytes_per_op"] is not None, r
    fpw_off = comparison.pick(rows, "postgresql", "full_page_writes=off")
    dw_off = comparison.pick(rows, "mariadb", "doublewrite=OFF")
    assert fpw_off["protection_bytes_per_op"] == 0 and dw_off["protection_bytes_per_op"] == 0
    # every system built in its own directory, all gone, no server left running
    assert os.listdir(server_parent) == []
    assert [p for p in set(processes.started_pids()) - before if processes.alive(p)] == []
    # recorded in the one schema and reported
    write_dataset(str(tmp_path), "summary", rows)
    back = read_dataset(str(tmp_path), "summary").to_pylist()
    assert len(back) == len(rows) and {r["scenario"] for r in back} == {"torn-page"}
    html = section.section([str(tmp_path)])
    assert html.count("<tr>") == 1 + len(rows) and "data:image/png" in html
