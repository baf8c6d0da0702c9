"""The report as ONE self-contained HTML file (inline CSS, PNGs as base64 data URIs), and Markdown tables.

Named `htmlpage` rather than `html` so that it can never shadow the standard
library's `html` module, which it uses for escaping.
"""

from __future__ import annotations

import base64
import datetime
import html
import math
import numbers

import pandas as pd

from bench.experiment import MODES
from bench.scenario_table import ratio_text

from .charts import SCENARIO_CHARTS

#: the raw tables (folded, last): key, title, one-line caption
SECTIONS = (
    ("configurations", "Per configuration",
     "Every configuration of every run: cluster throughput (sum over nodes, median over runs), "
     "latency, bytes per node; look here for a figure the story above does not show."),
    ("checkpoints", "Checkpoints per configuration",
     "Averages per checkpoint: pages, recovery-file bytes and phase times; the slowest checkpoint "
     "and the checkpoint-buffer peak."),
    ("ratios", "Ratios against the baseline",
     "Each configuration's figure divided by the baseline's (1.000 is the baseline itself)."),
    ("checkpoint_effect", "During a checkpoint vs outside",
     "Per-second rows with a checkpoint running against the others: p99_ratio near 1 means "
     "checkpoints do not hurt writers."),
    ("runs", "Runs", "One row per run: nodes, summed throughput and bytes."),
)

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:14px 22px;color:#222}
h1{font-size:20px;margin:0 0 2px} h2{font-size:16px;margin:16px 0 3px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:4px 0 2px}
p.note,p.cap{color:#555;font-size:12px;margin:1px 0 4px;max-width:1300px}
p.sentence{font-size:12.5px;margin:3px 0 0;max-width:600px;font-weight:500}
table{border-collapse:collapse;font-size:11px;margin:2px 0 6px}
th,td{border:1px solid #d6d6d6;padding:1px 5px;text-align:right;white-space:nowrap}
th{background:#f1f3f6;white-space:normal;vertical-align:bottom;min-width:42px}
td.t{text-align:left;white-space:normal;min-width:150px;max-width:420px}
th.t{text-align:left} tr:nth-child(even) td{background:#fafbfc} tr.base td{background:#fff3c4}
table.iep td:first-child{text-align:left} table.iep{font-size:11.5px}
.scen{display:flex;gap:18px;align-items:flex-start;margin:0 0 6px}
.scen .left{width:610px;flex:none} .scen .right{width:670px;flex:none}
.scen img,.grid img{width:100%;border:1px solid #e3e3e3}
.grid{display:grid;grid-template-columns:1fr 1fr 1fr;gap:6px 14px;max-width:1340px}
.meta{font-size:12px;color:#444;margin:0} nav a{margin-right:14px;font-size:12.5px}
td.v-reproduced{color:#176b1b;font-weight:600} td.v-reversed{color:#b3261e;font-weight:600}
td.v-not{color:#8a6d00;font-weight:600}
div.outgrowth{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start;max-width:1400px;margin:0 0 6px}
div.outgrowth>div:first-child{flex:0 1 790px} div.outgrowth th{white-space:normal}
div.outgrowth img{width:540px;border:1px solid #e3e3e3} div.outgrowth p.cap{max-width:540px} table.outgrowth td:nth-child(2){text-align:left}
p.finding{font-size:12.5px;margin:3px 0 0;max-width:640px;font-weight:500}
table.claims{max-width:1340px} table.claims td{white-space:normal} table.claims td.t{min-width:0;max-width:none} details{margin:4px 0} summary{cursor:pointer;font-size:13px}
"""

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _is_bytes(column: str) -> bool:
    return "bytes" in column and "per_op" not in column and "ratio" not in column


def human_bytes(v: float) -> str:
    i = 0
    while abs(v) >= 1024 and i < len(_UNITS) - 1:
        v, i = v / 1024, i + 1
    return f"{v:.0f} {_UNITS[i]}" if i == 0 else f"{v:.1f} {_UNITS[i]}"


def cell(v, column: str) -> str:
    """A table cell as text: byte counts in IEC units, other numbers by `fmt`."""
    if _is_bytes(column) and isinstance(v, numbers.Real) and not isinstance(v, bool) \
            and not math.isnan(v):
        return human_bytes(float(v))
    return fmt(v)


def fmt(v) -> str:
    """A cell: thousands separators for big numbers, 3 significant-ish decimals for small ones."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, numbers.Integral):
        return f"{int(v):,}"
    if isinstance(v, numbers.Real):
        v = float(v)
        a = abs(v)
        if a >= 1000:
            return f"{v:,.0f}"
        if a >= 10:
            return f"{v:.1f}"
        return f"{v:.3f}"
    return str(v)


def markdown_table(df: pd.DataFrame) -> str:
    head = "| " + " | ".join(df.columns) + " |\n|" + "|".join("---" for _ in df.columns) + "|\n"
    rows = ["| " + " | ".join(cell(v, c).replace("|", "\\|") for v, c in zip(r, df.columns)) + " |"
            for r in df.itertuples(index=False)]
    return head + "\n".join(rows) + "\n"


def html_table(df: pd.DataFrame, highlight: str | None = None) -> str:
    text_cols = {c for c in df.columns if df[c].dtype == object}
    cls = lambda c: ' class="t"' if c in text_cols else ""  # noqa: E731
    out = ["<table><thead><tr>"]
    out += [f"<th{cls(c)} title='{html.escape(str(c))}'>{html.escape(str(c).replace('_', ' '))}</th>"
            for c in df.columns]
    out.append("</tr></thead><tbody>")
    for r in df.itertuples(index=False):
        row = dict(zip(df.columns, r))
        mark = ' class="base"' if highlight is not None and row.get("config") == highlight else ""
        out.append(f"<tr{mark}>" + "".join(f"<td{cls(c)}>{html.escape(cell(row[c], c))}</td>"
                                           for c in df.columns) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _num(v) -> str:
    """A figure of a scenario table: no more digits than the machine's noise supports."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    a = abs(float(v))
    return f"{v:,.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.2f}"


def scenario_html(tbl: pd.DataFrame) -> str:
    """A scenario table: parameters as rows, the modes and the two ratio columns."""
    if tbl.empty:
        return "<p class='note'>not run in these results</p>"
    out = ["<table class='iep'><thead><tr><th class='t'>parameter</th>"]
    out += [f"<th>{html.escape(t)}</th>" for _k, t, _o in MODES]
    out.append("<th>files ÷ WAL<br>(spread)</th><th>lz4 ÷ WAL<br>(spread)</th></tr></thead><tbody>")
    for r in tbl.to_dict("records"):
        out.append(f"<tr><td class='t'>{html.escape(r['parameter'])}</td>"
                   + "".join(f"<td>{_num(r[k])}</td>" for k, _t, _o in MODES)
                   + f"<td>{html.escape(ratio_text(r['files_ratio']))}</td>"
                   + f"<td>{html.escape(ratio_text(r['compressed_ratio']))}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def claims_html(rows: list) -> str:
    """IEP-113's claims with the measured figure and the verdict."""
    if not rows:
        return "<p class='note'>IEP-113's experiment is not in these results (`python -m bench quick` runs it).</p>"
    out = ["<table class='claims'><thead><tr><th class='t'>IEP-113 claims</th><th>IEP</th><th>measured here</th>"
           "<th>verdict</th><th class='t'>why</th></tr></thead><tbody>"]
    for r in rows:
        cls = "v-" + r["verdict"].split()[0]
        out.append(f"<tr><td class='t'>{html.escape(r['claim'])}</td><td>{html.escape(r['iep'])}</td>"
                   f"<td>{html.escape(r['measured'])}</td><td class='{cls}'>{html.escape(r['verdict'])}</td>"
                   f"<td class='t'>{html.escape(r['why'])}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _img(png: bytes, alt: str) -> str:
    return f"<img alt='{html.escape(alt)}' src='{data_uri(png)}'>"


def render(told: dict, raw: dict, baseline: str, inputs: list) -> str:
    """The whole page: the IEP-113 story (``bench.spark.report.story``) first, raw tables last."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    conf = raw.get("configurations", pd.DataFrame())
    frame = told["frame"]
    n_rounds = len(set(frame[frame["experiment"] == "iep-113"]["round"])) if not frame.empty else 0
    captions = {name: cap for name, _t, cap in SCENARIO_CHARTS}
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             "<title>pagestore benchmark report</title>", f"<style>{CSS}</style></head><body>",
             "<h1>pagestore benchmark report: IEP-113's recovery files against WAL mode</h1>",
             f"<p class='meta'>{n_rounds} interleaved rounds of each scenario's three modes; "
             f"{len(conf)} configurations in all; results: {html.escape(', '.join(inputs))}; built {now} "
             f"by Spark SQL. <a href='#claims'>Claims</a> · <a href='#charts'>Charts</a> · "
             f"<a href='#peers'>Peers</a> · <a href='#outgrowth'>Data outgrows memory</a> · "
             f"<a href='#raw'>Raw tables</a></p>",
             "<p class='cap'>Each table: medians over rounds; a ratio is recovery files ÷ WAL mode within "
             "one round, shown as the median (min–max over rounds): when the spread includes 1.00 the "
             "difference is this machine's noise. Right: throughput of the three modes, checkpoints as bands.</p>"]
    for sc in told["scenarios"]:
        parts += ["<div class='scen'><div class='left'>",
                  f"<h3 id='iep-{sc['scenario']}'>{html.escape(sc['scenario'])}</h3>",
                  scenario_html(sc["table"]), f"<p class='sentence'>{html.escape(sc['sentence'])}</p>",
                  "</div><div class='right'>", _img(sc["charts"]["throughput"], f"throughput {sc['scenario']}"),
                  f"<p class='cap'>{html.escape(captions['throughput'])}</p></div></div>"]
    parts += ["<h2 id='claims'>IEP-113's claims, checked on this machine</h2>",
              "<p class='cap'>Reproduced: every pair of runs went the IEP's way (by the stated factor); "
              "reversed: every pair went the other way; otherwise not reproduced here.</p>",
              claims_html(told["claims"])]
    parts.append("<h2 id='charts'>Charts per scenario (the compared modes only)</h2>")
    for sc in told["scenarios"]:
        parts.append(f"<h3>{html.escape(sc['scenario'])}{html.escape(sc['round_label'])}</h3><div class='grid'>")
        for name, _title, cap in SCENARIO_CHARTS[1:]:
            parts.append(f"<div>{_img(sc['charts'][name], name)}<p class='cap'>{html.escape(cap)}</p></div>")
        parts.append("</div>")
    parts += ["<h3>Throttling: exponential backoff against fill-rate</h3><div class='grid'><div>",
              _img(told["policy_chart"], "throttling policies"),
              "<p class='cap'>A line that drops to zero while recovery data is written is writers "
              "stalled by the policy.</p></div></div>"]
    peers = told["peers"]
    parts += ["<h2 id='peers'>Peers: pagestore against LMDB, RocksDB, LevelDB, SQLite</h2>",
              "<p class='cap'>ops/s per operation and pagestore ÷ peer (above 1: pagestore is faster); "
              "durable rows fsync every commit.</p>",
              html_table(peers) if len(peers) else "<p class='note'>the peers did not run in these results</p>"]
    parts.append((told.get("outgrowth") or {}).get("html", ""))
    parts.append(told.get("servers_html") or "")
    parts.append(f"<h2 id='raw'>Raw tables</h2><p class='cap'>Baseline of the ratios: {html.escape(baseline)}.</p>")
    for key, title, note in SECTIONS:
        if key not in raw:
            continue
        parts += [f"<details id='{key}'><summary>{html.escape(title)}</summary>",
                  f"<p class='cap'>{html.escape(note)}</p>", html_table(raw[key], highlight=baseline), "</details>"]
    parts.append("</body></html>")
    return "\n".join(parts)
