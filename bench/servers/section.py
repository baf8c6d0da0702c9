"""The report's section on torn-page protection: table, bar chart, sentence.

``section(results_dirs)`` reads the ``summary`` rows with ``scenario="torn-page"``
from the result directories (pyarrow only, no Spark), keeps the newest run, and
returns an HTML fragment: a heading, the table of every system and setting
(bytes per update by kind, updates/s, latency), a chart of bytes per update split
into log / torn-page protection / data pages with updates/s beside it, and the
sentence ``comparison.findings`` writes. Without such rows it says how to run the
comparison. ``page(results_dirs)`` wraps the fragment in a standalone HTML page.
"""

from __future__ import annotations

import base64
import html
import io
import os

from bench.servers import comparison

TITLE = "Torn-page protection: IEP-113 against PostgreSQL and InnoDB"
HOW_TO_RUN = ("The servers were not run for these results. <code>make bench-servers</code> installs "
              "PostgreSQL and MariaDB from the distribution's packages when they are missing and runs the "
              "comparison (about 12 minutes here); <code>python -m bench.servers --results DIR</code> runs it "
              "when they are installed.")
_COLOURS = {"log": "#4f81bd", "protection": "#c0504d", "data pages": "#9bbb59"}


def latest_rows(results_dirs: list) -> list:
    """The torn-page rows of the newest run found in ``results_dirs`` (dicts, in run order)."""
    from bench.results import read_dataset
    rows = []
    for d in results_dirs:
        if not os.path.isdir(os.path.join(d, "summary")):
            continue
        t = read_dataset(d, "summary")
        if "scenario" not in t.column_names or t.num_rows == 0:
            continue
        rows += [r for r in t.to_pylist() if r.get("scenario") == comparison.SCENARIO]
    if not rows:
        return []
    newest = max(r["run_id"] for r in rows)
    order = {s: i for i, s in enumerate(comparison.SYSTEMS)}
    kept = [r for r in rows if r["run_id"] == newest]
    return sorted(kept, key=lambda r: order.get(r["store"], 99))


def split(row: dict) -> dict:
    """Bytes per update by kind; page images inside a WAL are moved out of "log"."""
    log = row.get("log_bytes_per_op") or 0.0
    prot = row.get("protection_bytes_per_op") or 0.0
    if comparison.protection_in_log(row):
        log = max(0.0, log - prot)
    return {"log": log, "protection": prot, "data pages": row.get("data_page_bytes_per_op") or 0.0}


def chart_png(rows: list) -> bytes:
    """Stacked bars of bytes per update by kind, and updates/s beside them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [f"{comparison.LABELS.get(r['store'], r['store'])}\n{r['setting']}" for r in rows]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 0.55 * len(rows) + 1.6), sharey=True,
                                  gridspec_kw={"width_ratios": [3, 1.4]})
    y = range(len(rows))
    left = [0.0] * len(rows)
    for kind, colour in _COLOURS.items():
        vals = [split(r)[kind] for r in rows]
        ax.barh(y, vals, left=left, color=colour, label=kind)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("bytes per update (log / torn-page protection / data pages)")
    ax.legend(fontsize=8, loc="lower right")
    ax2.barh(y, [r["throughput"] for r in rows], color="#7f7f7f")
    ax2.set_xlabel("updates/s")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def section(results_dirs: list) -> str:
    """The report section as an HTML fragment (heading first)."""
    rows = latest_rows(list(results_dirs))
    head = f"<h2>{html.escape(TITLE)}</h2>\n"
    if not rows:
        return head + f"<p>{HOW_TO_RUN}</p>\n"
    t = comparison.table_rows(rows)
    table = ["<table>", "<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in t[0]) + "</tr>"]
    table += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in t[1:]]
    table.append("</table>")
    png = base64.b64encode(chart_png(rows)).decode()
    f = comparison.findings(rows)
    cfg = rows[0].get("config_json") or "{}"
    import json
    c = json.loads(cfg)
    note = (f"Run {html.escape(rows[0]['run_id'])}: {c.get('rows', 0):,} rows (8-byte keys, 100-byte random "
            f"values), {c.get('clients', '?')} clients doing random single-row updates, each its own durable "
            f"commit, {c.get('checkpoint_interval_s', '?')} s checkpoints, {rows[0]['duration_s']:.0f} s "
            "measured per setting. Bytes are per update; PostgreSQL's and legacy pagestore's protection bytes "
            "are page images inside their log (the chart moves them out of the log bar); device bytes are the "
            "block device's sectors written over the window, shared with every other process.")
    missing = [s for s in comparison.SYSTEMS if not any(r["store"] == s for r in rows)]
    extra = (f"<p>Not measured in this run: {', '.join(comparison.LABELS[s] for s in missing)} "
             f"(install it and run <code>make bench-servers</code>).</p>\n" if missing else "")
    return (head + f"<p>{note}</p>\n" + "\n".join(table) + "\n"
            + f'<p><img alt="bytes per update by kind, and updates/s" src="data:image/png;base64,{png}"></p>\n'
            + f"<p><b>{html.escape(f['sentence'])}</b></p>\n" + extra)


def page(results_dirs: list) -> str:
    """A standalone HTML page holding only this section."""
    return ("<!doctype html><html><head><meta charset='utf-8'><title>" + html.escape(TITLE) +
            "</title><style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
            "</style></head><body>\n" + section(results_dirs) + "</body></html>\n")
