"""The torn-page comparison: every system, every setting, one workload, one result set.

For each system (PostgreSQL, MariaDB/InnoDB, pagestore) the comparison builds it
in its own temporary directory, loads the same table, and for each of its
settings runs the same update workload (``bench.servers.workload``) with a
device window (``bench.servers.device``) around the measured seconds. Each
setting becomes one ``summary`` row (``scenario="torn-page"``) of the one result
schema; ``findings`` turns the rows into the ratios and the sentence the report
and the terminal print. A system that is not installed is left out and named in
``skipped``; a system that fails is stopped and deleted, and the error re-raised
after every started server is gone.
"""

from __future__ import annotations

import contextlib
import json
import math
import time

from bench.servers import device, mariadb, pagestore_side, postgres, processes
from bench.servers.workload import run_updates

SYSTEMS = {"postgresql": postgres, "mariadb": mariadb, "pagestore": pagestore_side}
CLASSES = {"postgresql": postgres.Postgres, "mariadb": mariadb.Mariadb, "pagestore": pagestore_side.Pagestore}
LABELS = {"postgresql": "PostgreSQL", "mariadb": "MariaDB InnoDB", "pagestore": "pagestore"}
SCENARIO = "torn-page"
SOURCES = {
    "postgresql": {"log": "pg_wal_lsn_diff", "protection": "pg_waldump --stats=record (FPI size)",
                   "data_pages": "pg_stat_bgwriter buffers_checkpoint+clean+backend x 8 KiB"},
    "mariadb": {"log": "Innodb_os_log_written", "protection": "Innodb_dblwr_pages_written x innodb_page_size",
                "data_pages": "Innodb_pages_written x innodb_page_size"},
    "pagestore": {"log": "stats() wal_bytes_written", "protection": "stats() recovery_bytes_written "
                  "(legacy: log bytes above the recovery-files run's)", "data_pages": "stats() page_bytes_written"},
}


def missing(systems=tuple(SYSTEMS)) -> dict:
    """{system: why it cannot run} for the systems not available here."""
    out = {}
    for s in systems:
        why = SYSTEMS[s].missing()
        if why:
            out[s] = why
    return out


def run(rows: int = 1_000_000, seconds: float = 60.0, warmup: float = 10.0, clients: int = 4,
        checkpoint_s: int = 30, systems=tuple(SYSTEMS), run_id: str | None = None, parent: str | None = None,
        progress=print) -> dict:
    """Run every available system's settings; {"rows": summary rows, "skipped": {system: why}}."""
    from bench.results import new_run_id
    processes.guard()
    run_id = run_id or new_run_id("s")
    skipped = missing(systems)
    out = []
    try:
        for name in systems:
            if name in skipped:
                progress(f"{LABELS[name]}: not run ({skipped[name]})")
                continue
            out += _run_system(name, rows, seconds, warmup, clients, checkpoint_s, run_id, parent, progress)
    finally:
        processes.stop_all()
    _fill_legacy_protection(out)
    return {"rows": out, "skipped": skipped, "run_id": run_id}


def _run_system(name, rows, seconds, warmup, clients, checkpoint_s, run_id, parent, progress) -> list:
    out = []
    t = time.monotonic()
    sysobj = CLASSES[name](checkpoint_s=checkpoint_s, parent=parent)
    try:
        sysobj.start()
        version = sysobj.version()
        if name != "pagestore":
            sysobj.load(rows)
            progress(f"{LABELS[name]}: built and loaded {rows:,} rows in {time.monotonic() - t:.0f} s")
        else:
            sysobj.rows, sysobj.seed = rows, 7
        for setting, options in sysobj.settings:
            if name == "pagestore":
                sysobj.prepare(options)
            else:
                sysobj.apply(options)
            window = device.Window(sysobj.dir, sysobj.pids)
            marks = {}

            def before(window=window, marks=marks):
                """Open the device window, then read the system's counters."""
                window.open()
                marks["c0"] = sysobj.counters()

            def after(window=window, marks=marks):
                """Read the system's counters, then close the device window."""
                marks["c1"] = sysobj.counters()
                marks["dev"] = window.close()

            timer = getattr(sysobj, "checkpoints", contextlib.nullcontext)
            with timer():
                r = run_updates(sysobj.connect, rows, clients, warmup, seconds, before, after)
            figs = sysobj.figures(marks["c0"], marks["c1"])
            row = _row(name, setting, options, r, figs, marks["dev"], run_id, clients, rows, warmup,
                       checkpoint_s, version, sysobj)
            out.append(row)
            progress(f"{LABELS[name]}, {setting}: {row['throughput']:,.0f} updates/s, "
                     f"log {_fmt(row['log_bytes_per_op'])} B, protection {_fmt(row['protection_bytes_per_op'])} B, "
                     f"device {_fmt(row['device_bytes_per_op'])} B per update")
    finally:
        sysobj.stop()
    return out


def _per(x, ops):
    return None if x is None or not ops else x / ops


def _fmt(x):
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.0f}"


def _row(name, setting, options, r, figs, dev, run_id, clients, rows, warmup, checkpoint_s, version, sysobj):
    ops = r["ops"]
    legacy = options.get("recovery_data") == "wal"
    codec = sysobj.codec() if name == "pagestore" and not legacy else None
    label = setting.replace("default codec", f"default codec ({codec})") if codec else setting
    cfg = {"rows": rows, "clients": clients, "warmup_s": warmup, "checkpoint_interval_s": checkpoint_s,
           "version": version, "options": options, "device": dev["device"],
           "others_wchar_bytes_per_op": _per(dev["others_wchar_bytes"], ops),
           "protection_in_log": name == "postgresql" or legacy, "sources": SOURCES[name]}
    return {
        "run_id": run_id, "node": 0, "store": name, "scenario": SCENARIO, "experiment": SCENARIO, "round": 0,
        "setting": label, "threads": clients, "duration_s": r["seconds"], "ops": ops,
        "throughput": r["throughput"], "lat_p50_us": r["lat_p50_us"], "lat_p99_us": r["lat_p99_us"],
        "wal_mode": "fsync" if name == "pagestore" else None,
        "recovery_data": options.get("recovery_data"), "compression": codec,
        "wal_bytes": figs["log_bytes"], "recovery_bytes": figs["protection_bytes"],
        "page_bytes": figs["data_page_bytes"], "disk_write_bytes": dev["device_bytes"],
        "bytes_per_op": _per(dev["device_bytes"], ops), "wal_bytes_per_op": _per(figs["log_bytes"], ops),
        "log_bytes_per_op": _per(figs["log_bytes"], ops),
        "protection_bytes_per_op": _per(figs["protection_bytes"], ops),
        "data_page_bytes_per_op": _per(figs["data_page_bytes"], ops),
        "device_bytes_per_op": _per(dev["device_bytes"], ops),
        "wchar_bytes_per_op": _per(dev["wchar_bytes"], ops),
        "config_json": json.dumps(cfg, sort_keys=True),
    }


def _fill_legacy_protection(rows: list) -> None:
    """pagestore's legacy protection: its log bytes above the recovery-files run's."""
    base = next((r for r in rows if r["store"] == "pagestore" and r["recovery_data"] == "checkpoint"), None)
    for r in rows:
        if r["store"] == "pagestore" and r["recovery_data"] == "wal" and base is not None:
            per = max(0.0, r["log_bytes_per_op"] - base["log_bytes_per_op"])
            r["protection_bytes_per_op"] = per
            r["recovery_bytes"] = int(per * r["ops"])


def protection_in_log(row: dict) -> bool:
    """Whether the row's protection bytes are part of its log bytes (page images in the WAL)."""
    return row.get("store") == "postgresql" or row.get("recovery_data") == "wal"


def pick(rows: list, store: str, *words: str):
    """The first row of ``store`` whose setting contains every word (None if absent)."""
    for r in rows:
        s = r.get("setting") or ""
        if r.get("store") == store and all(w in s for w in words):
            return r
    return None


def findings(rows: list) -> dict:
    """The ratios the comparison exists for, and one sentence saying what they show.

    pagestore (recovery files, default codec) against PostgreSQL full_page_writes=on
    and InnoDB doublewrite=ON: updates/s against the better of the two, torn-page
    protection bytes per update against each; its log bytes per update against
    PostgreSQL with full_page_writes=off (a WAL without page images)."""
    ps = pick(rows, "pagestore", "recovery files", "default")
    pg_on = next((r for r in rows if r.get("store") == "postgresql"
                  and r.get("setting") == "full_page_writes=on"), None)
    pg_off = pick(rows, "postgresql", "full_page_writes=off")
    idb_on = pick(rows, "mariadb", "doublewrite=ON")
    f = {}
    if ps is None:
        return {"sentence": "pagestore was not measured in this run, so there is nothing to compare."}
    peers_on = [r for r in (pg_on, idb_on) if r is not None]
    if peers_on:
        best = max(peers_on, key=lambda r: r["throughput"])
        f["tps_vs_best_protected"] = ps["throughput"] / best["throughput"]
        f["best_protected"] = f"{LABELS[best['store']]} {best['setting']}"
    for key, peer in (("protection_vs_pg_fpw_on", pg_on), ("protection_vs_innodb_dw_on", idb_on)):
        if peer is not None and peer.get("protection_bytes_per_op"):
            f[key] = ps["protection_bytes_per_op"] / peer["protection_bytes_per_op"]
    if pg_off is not None and pg_off.get("log_bytes_per_op"):
        f["log_vs_pg_fpw_off"] = ps["log_bytes_per_op"] / pg_off["log_bytes_per_op"]
    f["sentence"] = _sentence(ps, f)
    return f


def _sentence(ps, f) -> str:
    parts = [f"pagestore with recovery files ran {ps['throughput']:,.0f} updates/s"]
    if "tps_vs_best_protected" in f:
        parts.append(f"{f['tps_vs_best_protected']:.2f}x the best protected server ({f['best_protected']})")
    prot = [f"{f[k]:.2f}x {w}" for k, w in (("protection_vs_pg_fpw_on", "PostgreSQL's full-page images"),
                                             ("protection_vs_innodb_dw_on", "InnoDB's doublewrite"))
            if k in f]
    s = ", ".join(parts)
    if prot:
        s += f"; its recovery files cost {_fmt(ps['protection_bytes_per_op'])} bytes per update, " + \
             " and ".join(prot)
    if "log_vs_pg_fpw_off" in f:
        s += f"; its log {_fmt(ps['log_bytes_per_op'])} bytes per update, {f['log_vs_pg_fpw_off']:.2f}x " \
             "PostgreSQL's WAL without page images"
    if len(prot) == 0 and "tps_vs_best_protected" not in f:
        s += " (no server was measured in this run)"
    return s + "."


COLUMNS = (("system", None), ("setting", None), ("updates/s", "throughput"), ("p50 µs", "lat_p50_us"),
           ("p99 µs", "lat_p99_us"), ("log B", "log_bytes_per_op"), ("protection B", "protection_bytes_per_op"),
           ("data pages B", "data_page_bytes_per_op"), ("device B", "device_bytes_per_op"),
           ("wchar B", "wchar_bytes_per_op"), ("others' wchar B", "others_wchar_bytes_per_op"))


def _value(row: dict, key: str):
    """A column of the row, or a figure kept in its ``config_json``."""
    if key in row:
        return row[key]
    try:
        return json.loads(row.get("config_json") or "{}").get(key)
    except ValueError:
        return None


def table_rows(rows: list) -> list:
    """The comparison table as lists of strings (header first), bytes per update.

    "others' wchar" is what every other process on the machine wrote in the window:
    the device column includes their writes that reached the same device."""
    out = [[c for c, _ in COLUMNS]]
    for r in rows:
        out.append([LABELS.get(r["store"], r["store"]), r.get("setting") or ""] +
                   [_fmt(_value(r, k)) for _, k in COLUMNS[2:]])
    return out


def table_text(rows: list) -> str:
    """The table as Markdown (what the terminal prints)."""
    t = table_rows(rows)
    lines = ["| " + " | ".join(t[0]) + " |", "|" + "---|" * len(t[0])]
    lines += ["| " + " | ".join(r) + " |" for r in t[1:]]
    return "\n".join(lines)
