"""The report's "data outgrows page memory" section: Spark SQL, a table, a chart, a sentence.

The per-round frame (one row per data ratio, store and round: load and get
rates) is computed here in Spark SQL from the ``summary_c`` view of
``bench.spark.report``, from the newest session's rows of the scenario
(``bench.outgrowth``); ``bench.outgrowth_table`` turns it into the table of
medians and per-round ratios and the sentence, the same functions the
terminal uses, and a test holds this frame equal to the pandas one.
"""

from __future__ import annotations

import html
import io

import pandas as pd

from bench import outgrowth_table as ot
from bench.outgrowth import BATCH, KEY, LABELS, SCENARIO, STORES, VALUE

from . import charts
from .htmlpage import data_uri, fmt

_FRAME_SQL = f"""
WITH s AS (
  SELECT store, op_style, ops, throughput, coalesce(round, 0) AS round,
         CAST(get_json_object(config_json, '$.data_ratio') AS double) AS data_ratio,
         CAST(get_json_object(config_json, '$.page_memory') AS bigint) AS page_memory
  FROM summary_c
  WHERE experiment = '{SCENARIO}' AND coalesce(session, '') =
        (SELECT max(coalesce(session, '')) FROM summary_c WHERE experiment = '{SCENARIO}'))
SELECT data_ratio, store, round, max(CASE WHEN op_style = 'load' THEN ops END) AS keys, page_memory,
       max(CASE WHEN op_style = 'load' THEN throughput END) AS load_per_s,
       max(CASE WHEN op_style = 'get' THEN throughput END) AS get_per_s
FROM s GROUP BY data_ratio, store, round, page_memory
"""

CAPTION = ("Each line is one store; left the load rate, right the get rate, against the data size as a "
           "multiple of pagestore's page memory (log scales). A line that falls to the right is a store "
           "slowed by data outgrowing memory; bars span the rounds.")

COLOURS = {"pagestore": "#4f81bd", "lmdb": "#c0504d", "rocksdict": "#4a9a3a", "plyvel": "#8064a2"}


def per_round(spark) -> pd.DataFrame:
    """The per-round frame of ``bench.outgrowth_table`` from the registered ``summary_c`` view."""
    df = spark.sql(_FRAME_SQL).toPandas()
    if df.empty:
        return pd.DataFrame(columns=list(ot.FRAME_COLUMNS))
    df["round"] = df["round"].astype("int64")
    df["_o"] = [STORES.index(s) if s in STORES else len(STORES) for s in df["store"]]
    df = df.sort_values(["data_ratio", "_o", "round"]).drop(columns="_o")
    return df[list(ot.FRAME_COLUMNS)].reset_index(drop=True)


def chart(frame: pd.DataFrame) -> bytes:
    """Load and get rate per store against the data-to-memory ratio: median, min-max bars."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4))
    if frame.empty:
        for ax in axes:
            charts._empty(ax, "not run in these results")
    else:
        ratios = sorted(set(frame["data_ratio"]))
        for ax, (col, what) in zip(axes, ((c, "keys loaded/s" if w == "load" else "gets/s")
                                          for c, w in ot.RATES)):
            for store in sorted(set(frame["store"]), key=lambda s: STORES.index(s) if s in STORES else 99):
                g = frame[frame["store"] == store].groupby("data_ratio")[col]
                med, lo, hi = g.median(), g.min(), g.max()
                ax.errorbar(med.index, med.values, yerr=[med.values - lo.values, hi.values - med.values],
                            color=COLOURS.get(store, "#888"), marker="o", markersize=3.5, linewidth=1.4,
                            capsize=3, label=LABELS.get(store, store))
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xticks(ratios)
            ax.set_xticklabels([f"{r:g}×" for r in ratios])
            ax.minorticks_off()
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(_rate))
            ax.set_xlabel("data ÷ page memory")
            ax.set_ylabel(what)
            ax.grid(alpha=0.3)
            ax.set_title(f"{'Load' if col == 'load_per_s' else 'Random gets'}", fontsize=10)
        axes[0].legend(fontsize=8)
    fig.suptitle("Data outgrows page memory: rate per store", fontsize=10)
    fig.subplots_adjust(wspace=0.38)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _rate(v: float, _pos=None) -> str:
    """An axis label of a rate: 20k, 500k, 1M."""
    return f"{v / 1e6:g}M" if v >= 1e6 else f"{v / 1e3:g}k" if v >= 1e3 else f"{v:g}"


def _table_html(flat: pd.DataFrame) -> str:
    out = ["<table class='outgrowth'><thead><tr>"]
    out += [f"<th>{html.escape(c)}</th>" for c in flat.columns]
    out.append("</tr></thead><tbody>")
    for r in flat.itertuples(index=False):
        out.append("<tr>" + "".join(
            f"<td>{html.escape(v if isinstance(v, str) else fmt(v))}</td>" for v in r) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def section(spark) -> dict:
    """The section's frame, table (flat, for CSV), sentence, chart (PNG; None when the results
    hold no such rows) and HTML."""
    frame = per_round(spark)
    tbl = ot.table(frame) if not frame.empty else pd.DataFrame()
    flat = ot.flat(tbl)
    head = "<h2 id='outgrowth'>Data outgrows page memory: pagestore against LMDB, RocksDB, LevelDB</h2>"
    if frame.empty:
        return dict(frame=frame, table=flat, sentence="", chart=None,
                    html=head + "<p class='note'>not run in these results (`python -m bench quick` "
                                "runs it; `python -m bench.outgrowth` alone)</p>")
    png = chart(frame)
    mem = int(frame["page_memory"].max())
    sentence = ot.sentence(tbl)
    what = (f"Random {KEY}-byte keys with {VALUE}-byte values, loaded in batches of {BATCH:,} until the "
            f"data is {', '.join(f'{r:g}×' for r in sorted(set(frame['data_ratio'])))} pagestore's page "
            f"memory ({mem / (1 << 20):,.0f} MiB here), then random gets of loaded keys; every store on the "
            "same keys, each in the setting that survives a process kill. pagestore cleans dirty pages only "
            "by checkpointing them; LMDB, RocksDB and LevelDB lean on the operating system's page cache. "
            "Ratios are taken within a round: median (min–max over rounds).")
    # its own classes: the layout check counts the scenario tables' .scen charts and p.sentence
    body = ("<div class='outgrowth'><div>"
            f"{_table_html(flat)}<p class='finding'>{html.escape(sentence)}</p></div>"
            f"<div><img alt='data outgrows page memory' src='{data_uri(png)}'>"
            f"<p class='cap'>{html.escape(CAPTION)}</p></div></div>")
    return dict(frame=frame, table=flat, sentence=sentence, chart=png,
                html=head + f"<p class='cap'>{html.escape(what)}</p>" + body)
