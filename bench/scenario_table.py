"""The scenario table: IEP-113's comparison of one scenario, parameters as rows, modes as columns.

Input is the *per-round frame*: one row per (experiment, scenario, mode, round)
with the figures of that run (nodes summed or averaged as each figure says).
``per_round`` builds it with pandas from the summary and checkpoint rows; the
Spark report builds the same frame in Spark SQL (``bench.spark.report``), and a
test holds the two equal. ``table`` takes the median over rounds of each mode
and the median and spread (min-max) of the per-round ratios against WAL mode;
``sentence`` says in one line what the table shows.
"""

from __future__ import annotations

import math

import pandas as pd

from bench.experiment import IEP, MODES, THROTTLING, mode_of

#: (column of the per-round frame, row title, unit) in the table's row order
PARAMETERS = (
    ("throughput", "throughput", "ops/s"),
    ("lat_p50_us", "latency p50", "µs"),
    ("lat_p99_us", "latency p99", "µs"),
    ("lat_p99_ckpt_us", "latency p99 during checkpoints", "µs"),
    ("wal_bytes_per_op", "WAL bytes per op", "B"),
    ("disk_bytes_per_op", "disk bytes written per op", "B"),
    ("checkpoints", "checkpoints in the run", ""),
    ("pages", "pages per checkpoint", ""),
    ("recovery_bytes_per_page", "recovery data per page", "B"),
    ("recovery_write_ms", "recovery-data write", "ms"),
    ("page_write_ms", "page write", "ms"),
    ("fsync_ms", "fsync", "ms"),
    ("total_ms", "checkpoint total", "ms"),
    ("parks", "throttling parks", ""),
)
KEYS = ("experiment", "scenario", "mode", "round", "throttling")
EXPERIMENTS = (IEP, THROTTLING)


def per_round(summary: pd.DataFrame, checkpoints: pd.DataFrame) -> pd.DataFrame:
    """One row per (experiment, scenario, mode, round, throttling) of the IEP-113 experiment and
    the throttling comparison; pandas over the summary and checkpoint rows (``run_id`` and
    ``node`` join them)."""
    s = latest_session(summary[summary["experiment"].isin(EXPERIMENTS)]).copy()
    if s.empty:
        return pd.DataFrame(columns=list(KEYS) + [p for p, _, _ in PARAMETERS])
    s["mode"] = [mode_of(r, c) for r, c in zip(s["recovery_data"], s["compression"])]
    # sums of nothing but nulls are null (min_count), as in SQL
    g = s.groupby(list(KEYS))
    out = pd.DataFrame({
        "throughput": g["throughput"].sum(min_count=1), "lat_p50_us": g["lat_p50_us"].mean(),
        "lat_p99_us": g["lat_p99_us"].mean(), "lat_p99_ckpt_us": g["lat_p99_ckpt_us"].mean(),
        "throughput_ckpt": g["throughput_ckpt"].sum(min_count=1),
        "wal_bytes_per_op": g["wal_bytes"].sum(min_count=1) / g["ops"].sum(min_count=1),
        "disk_bytes_per_op": g["disk_write_bytes"].sum(min_count=1) / g["ops"].sum(min_count=1),
        "recovery_bytes_per_op": g["recovery_bytes"].sum(min_count=1) / g["ops"].sum(min_count=1),
        "page_bytes_per_op": g["page_bytes"].sum(min_count=1) / g["ops"].sum(min_count=1),
        "checkpoints": g["checkpoints"].mean(), "parks": g["parks"].mean(),
        "park_seconds_max": g["park_seconds_max"].max(), "stalls": g["stalls"].sum(min_count=1)})
    c = checkpoints.merge(s[["run_id", "node"] + list(KEYS)], on=["run_id", "node"])
    gc = c.groupby(list(KEYS))
    cp = pd.DataFrame({"pages": gc["pages"].mean(),
                       "recovery_bytes_per_page": gc["recovery_bytes"].sum(min_count=1) / gc["pages"].sum(min_count=1),
                       "recovery_write_ms": gc["recovery_write_ms"].mean(),
                       "page_write_ms": gc["page_write_ms"].mean(), "fsync_ms": gc["fsync_ms"].mean(),
                       "total_ms": gc["total_ms"].mean()})
    out = out.join(cp, how="left").reset_index()
    return out.sort_values(list(KEYS)).reset_index(drop=True)


def latest_session(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of the newest session (session ids sort by time; a missing one sorts first):
    rounds are numbered within a session, so two sessions' round 0 are not one pair."""
    if rows.empty:
        return rows
    sess = rows["session"].fillna("")
    return rows[sess == sess.max()]


def _ok(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def ratios(rounds: pd.DataFrame, column: str, num: str, den: str) -> list:
    """Per-round ratios ``num / den`` of one column (rounds where both ran and den is not 0)."""
    a = rounds[rounds["mode"] == num].set_index("round")[column]
    b = rounds[rounds["mode"] == den].set_index("round")[column]
    both = a.to_frame("a").join(b.to_frame("b"), how="inner")
    return [float(x / y) for x, y in zip(both["a"], both["b"]) if _ok(x) and _ok(y) and y != 0]


def spread(values: list) -> dict:
    """Median, min, max and count of per-round ratios (NaN when there are none)."""
    if not values:
        return dict(median=float("nan"), lo=float("nan"), hi=float("nan"), n=0)
    s = pd.Series(values)
    return dict(median=float(s.median()), lo=float(s.min()), hi=float(s.max()), n=len(values))


def scenario_rounds(frame: pd.DataFrame, scenario: str) -> pd.DataFrame:
    """The per-round rows of one scenario of the IEP-113 experiment."""
    return frame[(frame["experiment"] == IEP) & (frame["scenario"] == scenario)]


def table(frame: pd.DataFrame, scenario: str) -> pd.DataFrame:
    """Parameters as rows; each mode's median over rounds; per-round ratios against WAL mode."""
    rounds = scenario_rounds(frame, scenario)
    rows = []
    for col, title, unit in PARAMETERS:
        row = dict(parameter=title + (f" ({unit})" if unit else ""), key=col)
        for key, _t, _o in MODES:
            vals = rounds[rounds["mode"] == key][col].dropna()
            row[key] = float(vals.median()) if len(vals) else float("nan")
        for num in ("files", "compressed"):
            row[f"{num}_ratio"] = spread(ratios(rounds, col, num, "wal"))
        rows.append(row)
    return pd.DataFrame(rows)


def ratio_text(r: dict, digits: int = 2) -> str:
    """``1.41× (1.30–1.52)``: median and spread of the per-round ratios; empty without any."""
    if not r or not r["n"]:
        return ""
    if r["n"] == 1:
        return f"{r['median']:.{digits}f}×"
    return f"{r['median']:.{digits}f}× ({r['lo']:.{digits}f}–{r['hi']:.{digits}f})"


def _times(r: dict, what: str, inverse: bool = False) -> str:
    m = r["median"]
    if inverse and m > 0:
        return f"1/{1 / m:.1f} of the {what}" if m < 1 else f"{m:.2f}× the {what}"
    return f"{m:.2f}× the {what}"


def sentence(tbl: pd.DataFrame, scenario: str) -> str:
    """One line: what recovery files did against WAL mode in this scenario, and how sure."""
    by = {r["key"]: r for r in tbl.to_dict("records")}
    thr, wal, tot = (by.get(k, {}).get("files_ratio") for k in ("throughput", "wal_bytes_per_op", "total_ms"))
    if not thr or not thr["n"]:
        return f"{scenario}: not run."
    parts = [_times(thr, "throughput")]
    if wal and wal["n"]:
        parts.append(_times(wal, "WAL bytes", inverse=True))
    if tot and tot["n"]:
        parts.append(f"checkpoints {tot['median']:.1f}× as long")
    comp = by.get("recovery_bytes_per_page", {})
    if comp and _ok(comp.get("files")) and _ok(comp.get("compressed")) and comp["compressed"]:
        parts.append(f"lz4 cuts recovery data {comp['files'] / comp['compressed']:.1f}×")
    if thr["n"] == 1:
        how = "one round, so no spread to judge it by"
    else:
        noise = "inside" if thr["lo"] <= 1 <= thr["hi"] else "outside"
        how = (f"median of {thr['n']} rounds; throughput ratio {thr['lo']:.2f}–{thr['hi']:.2f}, "
               f"so 1.00 is {noise} the run-to-run spread")
    return f"{scenario}: recovery files: " + ", ".join(parts) + f" ({how})."
