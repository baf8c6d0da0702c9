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

from .charts import TITLES

SECTIONS = (
    ("configurations", "Per configuration (IEP-113 style)",
     "Throughput is the cluster figure: the sum over nodes of each node's median ops/s; its median "
     "over runs (the quick job repeats the extreme pairs: identical runs here differ up to 2x). Mean latency is weighted by operations; p99 is the mean of the nodes' p99. WAL, "
     "recovery and page bytes are per node and run; parks per node and run."),
    ("checkpoints", "Checkpoints per configuration (IEP-113 style)",
     "Averages per checkpoint across nodes and runs: pages, recovery-file bytes and the phase "
     "times (lock, recovery-data write, page write, fsync, total), then the slowest checkpoint "
     "and the checkpoint-buffer peak."),
    ("ratios", "Ratios against the baseline",
     "Each configuration's figure divided by the baseline's (1.000 is the baseline itself; "
     "empty where the baseline's figure is zero)."),
    ("checkpoint_effect", "During a checkpoint vs outside",
     "Per-second rows with a checkpoint running against the others; the design's goal is "
     "p99_ratio within 2 and no park over 100 ms."),
    ("runs", "Runs", "One row per run: nodes, summed throughput and bytes."),
)

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:18px 24px;color:#222}
h1{font-size:21px;margin:0 0 4px} h2{font-size:16px;margin:22px 0 4px;border-bottom:1px solid #ddd}
h3{font-size:13px;margin:6px 0 2px}
p.note{color:#555;font-size:12px;margin:2px 0 6px;max-width:1150px}
table{border-collapse:collapse;font-size:11px;margin:4px 0 8px}
th,td{border:1px solid #d6d6d6;padding:2px 5px;text-align:right;white-space:nowrap}
th{background:#f1f3f6;white-space:normal;vertical-align:bottom;min-width:42px}
td.t{text-align:left;white-space:normal;min-width:200px;max-width:300px}
th.t{text-align:left} tr:nth-child(even) td{background:#fafbfc} tr.base td{background:#fff3c4}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:8px 18px;max-width:1240px}
.grid img{width:100%;border:1px solid #e3e3e3} .meta{font-size:12px;color:#444}
nav a{margin-right:14px;font-size:12.5px}
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


def render(tables: dict, figures: dict, baseline: str, inputs: list) -> str:
    """The whole page: header, tables in SECTIONS order, then every chart embedded."""
    conf = tables["configurations"]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             "<title>pagestore benchmark report</title>", f"<style>{CSS}</style></head><body>",
             "<h1>pagestore benchmark report</h1>",
             f"<p class='meta'>{len(conf)} configurations, {int(conf['runs'].sum())} runs; "
             f"baseline: <b>{html.escape(baseline)}</b>; results: "
             f"{html.escape(', '.join(inputs))}; built {now} by Spark SQL (bench/spark).</p>",
             "<nav>" + "".join(f"<a href='#{k}'>{html.escape(t)}</a>" for k, t, _ in SECTIONS
                               if k in tables) + "<a href='#charts'>Charts</a></nav>"]
    for key, title, note in SECTIONS:
        if key not in tables:
            continue
        parts += [f"<h2 id='{key}'>{html.escape(title)}</h2>", f"<p class='note'>{html.escape(note)}</p>",
                  html_table(tables[key], highlight=baseline)]
    parts.append("<h2 id='charts'>Charts</h2><div class='grid'>")
    for name, png in figures.items():
        title = TITLES.get(name, name)
        parts.append(f"<div><h3>{html.escape(title)}</h3><img alt='{html.escape(title)}' "
                     f"src='{data_uri(png)}'></div>")
    parts.append("</div></body></html>")
    return "\n".join(parts)
