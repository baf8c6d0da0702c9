"""The IEP-113 table shows, for a configuration run several times, its median run."""

from rich.console import Console

from bench.report_table import iep_table


def _r(rd, tput):
    s = dict(store="pagestore", scenario="extreme", op_style="atomic", wal_mode="log_only",
             compression="default", throttling="default", recovery_data=rd, throughput=tput,
             wal_bytes_per_op=150.0, bytes_per_op=4000.0)
    return dict(summary=s, checkpoints=[])


def _text(table) -> str:
    con = Console(width=400, record=True)
    con.print(table)
    return con.export_text()


def test_a_repeated_pair_shows_each_sides_median_run_and_the_count():
    rows = [_r("wal", 50_000), _r("checkpoint", 91_000), _r("wal", 82_000), _r("checkpoint", 70_000),
            _r("wal", 55_000), _r("checkpoint", 75_000)]
    text = _text(iep_table(rows))
    line = next(ln for ln in text.splitlines() if "extreme" in ln)
    assert "55,000" in line and "75,000" in line and "1.36×" in line
    assert "82,000" not in line and "91,000" not in line
    assert " 3 " in line
