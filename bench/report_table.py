"""Terminal tables (rich): IEP-113-shaped matrix table, runs, peer comparisons.

Every function takes result structures from ``bench.runner``/``bench.peers``/
``bench.ckptbench`` and returns a ``rich.table.Table``; ``show`` prints one.
"""

from __future__ import annotations

import math
import sys

from rich.console import Console
from rich.table import Table

# piped output (make bench | tee) keeps full-width tables instead of rich's 80 columns
console = Console(width=None if sys.stdout.isatty() else 220)


def show(*items) -> None:
    for it in items:
        console.print(it)


def _n(x, digits=0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:,.{digits}f}"


def _ratio(a, b) -> str:
    if not a or not b or any(isinstance(v, float) and math.isnan(v) for v in (a, b)):
        return "–"
    return f"{a / b:.2f}×"


def _mb(x) -> str:
    return "–" if x is None else f"{x / 1e6:,.1f} MB"


def runs_table(results, title="Runs") -> Table:
    t = Table(title=title)
    for c in ("store", "scenario", "recovery", "compr.", "wal_mode", "throttling", "op_style", "thr",
              "ops/s (median)", "p50 µs", "p99 µs", "p99 in/out ckpt µs", "WAL B/op", "disk B/op",
              "ckpts", "parks", "max park s", "stalls"):
        t.add_column(c, justify="right" if c[0].isupper() or " " in c or c in ("thr", "ckpts", "parks", "stalls") else "left")
    for r in results:
        s = r["summary"]
        t.add_row(s["store"], s["scenario"], s["recovery_data"], s["compression"], s["wal_mode"],
                  s["throttling"], s["op_style"], str(s["threads"]), _n(s["throughput"]),
                  _n(s["lat_p50_us"], 1), _n(s["lat_p99_us"], 1),
                  f"{_n(s['lat_p99_ckpt_us'], 1)} / {_n(s['lat_p99_no_ckpt_us'], 1)}",
                  _n(s["wal_bytes_per_op"], 1), _n(s["bytes_per_op"], 1), str(s["checkpoints"]),
                  str(s["parks"]), _n(s["park_seconds_max"], 3), str(s["stalls"]))
    return t


def _label(s) -> str:
    style = {"atomic": "Atomic puts", "implicit-tx": "Implicit tx", "tx": "Transactions"}[s["op_style"]]
    return style + ("" if s["wal_mode"] == "log_only" else f", {s['wal_mode'].upper()}")


def scenario_table(tbl, scenario: str) -> Table:
    """One scenario of IEP-113's experiment (``bench.scenario_table.table``): parameters as rows,
    WAL mode / recovery files / recovery files + lz4 as columns, ratios with their spread."""
    from bench.experiment import MODES
    from bench.scenario_table import ratio_text
    t = Table(title=f"IEP-113, {scenario}: medians over rounds; ratios against WAL mode (spread over rounds)")
    t.add_column("parameter")
    for _k, title, _o in MODES:
        t.add_column(title, justify="right")
    t.add_column("files ÷ WAL", justify="right")
    t.add_column("lz4 ÷ WAL", justify="right")
    for r in tbl.to_dict("records"):
        d = 0 if abs(r.get("wal") or 0) >= 100 or r["key"] in ("throughput", "parks") else 1
        t.add_row(r["parameter"], *[_n(r[k], d) for k, _t, _o in MODES],
                  ratio_text(r["files_ratio"]), ratio_text(r["compressed_ratio"]))
    return t


def base_table(base) -> Table:
    t = Table(title=f"Bulk load, random gets, ordered scan — N = {base['rows'][0]['n']:,}" if base["rows"] else "Base")
    for c in ("store", "bulk load ops/s", "get ops/s", "scan rows/s", "checks", "size MB",
              "ps/peer load", "ps/peer get", "ps/peer scan"):
        t.add_column(c, justify="left" if c == "store" else "right")
    for r in base["rows"]:
        q = base["ratios"].get(r["store"], {})
        ok = "ok" if r["scan_ok"] and not r["get_mismatches"] else f"scan_ok={r['scan_ok']} bad_gets={r['get_mismatches']}"
        t.add_row(r["store"], _n(r["load_ops"]), _n(r["get_ops"]), _n(r["scan_rows"]), ok,
                  _n(r["size_bytes"] / 1e6, 1), *(f"{q[m]:.2f}×" if m in q else "–"
                                                  for m in ("load_ops", "get_ops", "scan_rows")))
    if base.get("memory"):
        m = base["memory"]
        growth = (m.get("VmRSS") or 0) - (m.get("rss_before") or 0)
        t.caption = (f"pagestore memory: VmRSS {_mb(m.get('VmRSS'))}, VmHWM {_mb(m.get('VmHWM'))}, "
                     f"before open {_mb(m.get('rss_before'))}, growth {_mb(growth)}, "
                     f"memory_size {_mb(m.get('memory_size'))} (mapped WAL segments count in RSS)")
    return t


def commit_table(cmp) -> Table:
    t = Table(title="Commit per put: no-fsync (1 thread) and durable (T threads)")
    for c in ("store", "wal_mode", "threads", "ops/s", "p50 µs", "p99 µs", "WAL B/op", "disk B/op", "ps/store"):
        t.add_column(c, justify="left" if c in ("store", "wal_mode") else "right")
    ps = {(r["summary"]["wal_mode"], r["summary"]["threads"]): r["summary"]["throughput"]
          for r in cmp["results"] if r["summary"]["store"] == "pagestore"}
    for r in cmp["results"]:
        s = r["summary"]
        t.add_row(s["store"], s["wal_mode"], str(s["threads"]), _n(s["throughput"]), _n(s["lat_p50_us"], 1),
                  _n(s["lat_p99_us"], 1), _n(s["wal_bytes_per_op"], 1), _n(s["bytes_per_op"], 1),
                  _ratio(ps.get((s["wal_mode"], s["threads"])), s["throughput"]))
    b = cmp.get("bare")
    if b:
        name = "bare pwrite+fdatasync" + (" (mean of before/after)" if "before" in b else "")
        t.add_row(name, "fsync", "1", _n(b["ops_per_s"]), _n(b["p50_us"], 1),
                  _n(b["p99_us"], 1), "–", "4,096", _ratio(ps.get(("fsync", 1)), b["ops_per_s"]))
    return t


def codecs_table(out) -> Table:
    t = Table(title=f"Recovery-data codecs on the same pages (median of {out['rounds']} interleaved checkpoints)")
    for c in ("codec", "pages", "ckpt ms/1k pages", "recovery-file ms/1k pages", "bytes/page",
              "time vs disabled", "bytes cut"):
        t.add_column(c, justify="left" if c == "codec" else "right")
    dis = out["codecs"].get("disabled")
    for name, r in out["codecs"].items():
        t.add_row(name, _n(r["pages"]), _n(r["ckpt_ms_per_kpage"], 2), _n(r["recovery_ms_per_kpage"], 2),
                  _n(r["recovery_bytes_per_page"]),
                  _ratio(r["ckpt_ms_per_kpage"], dis and dis["ckpt_ms_per_kpage"]),
                  _ratio(dis and dis["recovery_bytes_per_page"], r["recovery_bytes_per_page"]))
    return t


def checkpoint_table(lat, rate, seq, crash) -> Table:
    t = Table(title="Checkpoints: latency inside/outside, recovery-file rate, recovery after kill -9")
    t.add_column("figure")
    t.add_column("value", justify="right")
    if lat:
        s = lat["summary"]
        t.add_row("puts, ops/s (median of seconds)", _n(s["throughput"]))
        t.add_row("ops/s in / outside checkpoints", f"{_n(s['throughput_ckpt'])} / {_n(s['throughput_no_ckpt'])}")
        t.add_row("p50 µs in / outside", f"{_n(s['lat_p50_ckpt_us'], 1)} / {_n(s['lat_p50_no_ckpt_us'], 1)}")
        t.add_row("p99 µs in / outside", f"{_n(s['lat_p99_ckpt_us'], 1)} / {_n(s['lat_p99_no_ckpt_us'], 1)}")
        t.add_row("checkpoints; max lock ms", f"{s['checkpoints']}; "
                  f"{_n(max((c['lock_ms'] for c in lat['checkpoints']), default=float('nan')), 2)}")
    if rate and seq:
        t.add_row(f"recovery files MB/s vs plain sequential MB/s ({rate.get('source', '')})",
                  f"{_n(rate['rate'] / 1e6, 1)} / {_n(seq['rate'] / 1e6, 1)} ({_ratio(rate['rate'], seq['rate'])})")
        if rate.get("rates") or seq.get("rates"):
            t.add_row("  fastest of, MB/s: recovery files; plain writes (interleaved)",
                      f"{', '.join(_n(r / 1e6) for r in rate.get('rates') or [])}; "
                      f"{', '.join(_n(r / 1e6) for r in seq.get('rates') or [])}")
    if crash:
        if crash.get("error"):
            t.add_row("recovery after kill -9", crash["error"])
        else:
            t.add_row("recovery after kill -9 at " + crash["crash_point"], f"{_n(crash['recovery_s'], 3)} s")
            t.add_row("reading the recovery files sequentially: O_DIRECT / cached",
                      f"{_n(crash.get('read_recovery_files_direct_s'), 3)} / "
                      f"{_n(crash.get('read_recovery_files_cached_s'), 3)} s ({_mb(crash['recovery_file_bytes'])})")
            t.add_row("  of which restore / replay / final checkpoint",
                      f"{_n(crash.get('restore_s'), 3)} / {_n(crash.get('replay_s'), 3)} / "
                      f"{_n(crash.get('final_checkpoint_s'), 3)} s")
            t.add_row("pages restored; records replayed (rate)",
                      f"{_n(crash.get('pages_restored'))}; {_n(crash.get('records_replayed'))} "
                      f"({_n(crash.get('replay_rate'))}/s)")
            t.add_row("keys missing or wrong (of 5,000 checked)", str(crash["missing_or_wrong"]))
        lock = crash.get("lock")
        if lock:
            t.add_row("write lock with N dirty pages (crash child, phase A)",
                      f"{_n(lock['lock_ms'], 2)} ms, {_n(lock['pages'])} pages")
    return t
