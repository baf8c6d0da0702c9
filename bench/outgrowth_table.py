"""The "data outgrows page memory" table: per data-to-memory ratio and store, rates and ratios.

Input is the *per-round frame*: one row per (data ratio, store, round) with
that run's load and get rates, built by ``per_round`` with pandas from the
scenario's summary rows (``bench.outgrowth.summary_rows``); the Spark report
builds the same frame in Spark SQL (``bench.spark.report_outgrowth``) and a
test holds the two equal. ``table`` takes each store's median over rounds and
the median and spread (min-max) of its per-round ratios to LMDB and RocksDB
at the same ratio; ``sentence`` states in one line what pagestore did as the
data grew.
"""

from __future__ import annotations

import json

import pandas as pd

from bench.outgrowth import LABELS, SCENARIO, STORES
from bench.scenario_table import latest_session, ratio_text, spread

FRAME_COLUMNS = ("data_ratio", "store", "round", "keys", "page_memory", "load_per_s", "get_per_s")
#: (store, column title) the ratios are taken against
REFERENCES = (("lmdb", "LMDB"), ("rocksdict", "RocksDB"))
RATES = (("load_per_s", "load"), ("get_per_s", "get"))


def _store_order(name: str) -> int:
    return STORES.index(name) if name in STORES else len(STORES)


def per_round(summary) -> pd.DataFrame:
    """One row per (data ratio, store, round) of the newest session's outgrowth rows
    (``summary``: rows of the summary dataset, a frame or a list of dicts)."""
    s = pd.DataFrame(summary)
    if s.empty or "experiment" not in s:
        return pd.DataFrame(columns=list(FRAME_COLUMNS))
    s = s[s["experiment"] == SCENARIO]
    if "session" not in s:
        s = s.assign(session=None)
    s = latest_session(s).copy()
    if s.empty:
        return pd.DataFrame(columns=list(FRAME_COLUMNS))
    conf = [json.loads(c or "{}") for c in s["config_json"]]
    s["data_ratio"] = [float(c["data_ratio"]) for c in conf]
    s["page_memory"] = [int(c["page_memory"]) for c in conf]
    s["round"] = s["round"].fillna(0).astype("int64")
    keys = ["data_ratio", "store", "round", "page_memory"]
    load = s[s["op_style"] == "load"].groupby(keys).agg(keys_=("ops", "max"), load_per_s=("throughput", "max"))
    get = s[s["op_style"] == "get"].groupby(keys).agg(get_per_s=("throughput", "max"))
    out = load.join(get, how="outer").reset_index().rename(columns={"keys_": "keys"})
    out["_o"] = [_store_order(x) for x in out["store"]]
    out = out.sort_values(["data_ratio", "_o", "round"]).drop(columns="_o")
    return out[list(FRAME_COLUMNS)].reset_index(drop=True)


def _ratios(at: pd.DataFrame, store: str, ref: str, column: str) -> list:
    """Per-round ratios store ÷ ref of one rate, at one data ratio."""
    a = at[at["store"] == store].set_index("round")[column]
    b = at[at["store"] == ref].set_index("round")[column]
    both = a.to_frame("a").join(b.to_frame("b"), how="inner").dropna()
    return [float(x / y) for x, y in zip(both["a"], both["b"]) if y]


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (data ratio, store): median rates over rounds and the spread of per-round ratios."""
    rows = []
    for ratio in sorted(set(frame["data_ratio"])):
        at = frame[frame["data_ratio"] == ratio]
        for store in sorted(set(at["store"]), key=_store_order):
            mine = at[at["store"] == store]
            row = dict(data_ratio=float(ratio), store=store, rounds=int(mine["round"].nunique()),
                       keys=int(mine["keys"].max()), page_memory=int(mine["page_memory"].max()))
            for col, what in RATES:
                row[col] = float(mine[col].median())
                for ref, _title in REFERENCES:
                    row[f"{what}_x_{ref}"] = spread(_ratios(at, store, ref, col))
            rows.append(row)
    return pd.DataFrame(rows)


def _cell(row: dict, what: str, ref: str) -> str:
    """A ratio cell; a reference store against itself is a dash, not 1.00 with no spread."""
    return "–" if row["store"] == ref else ratio_text(row[f"{what}_x_{ref}"])


def flat(tbl: pd.DataFrame) -> pd.DataFrame:
    """The table with its ratio columns as text, for CSV, Markdown and HTML."""
    cols = ["data ÷ page memory", "store", "keys", "load keys/s"] + \
        [f"load ÷ {t}" for _r, t in REFERENCES] + ["gets/s"] + [f"gets ÷ {t}" for _r, t in REFERENCES]
    if tbl.empty:
        return pd.DataFrame(columns=cols)
    out = []
    for r in tbl.to_dict("records"):
        out.append([f"{r['data_ratio']:g}×", LABELS.get(r["store"], r["store"]), r["keys"], r["load_per_s"]]
                   + [_cell(r, "load", ref) for ref, _t in REFERENCES] + [r["get_per_s"]]
                   + [_cell(r, "get", ref) for ref, _t in REFERENCES])
    return pd.DataFrame(out, columns=cols)


def markdown(tbl: pd.DataFrame) -> str:
    """The flat table as Markdown."""
    f = flat(tbl)
    lines = ["| " + " | ".join(f.columns) + " |", "|" + "---|" * len(f.columns)]
    for r in f.itertuples(index=False):
        lines.append("| " + " | ".join(f"{v:,.0f}" if isinstance(v, (int, float)) else str(v) for v in r) + " |")
    return "\n".join(lines)


def _arrow(a: float, b: float, fmt: str) -> str:
    return f"{a:{fmt}} → {b:{fmt}}"


def sentence(tbl: pd.DataFrame) -> str:
    """One line: pagestore's rates and ratios at the smallest and the largest data ratio
    (at the one data ratio, when only one was run)."""
    if tbl.empty or "pagestore" not in set(tbl["store"]):
        return "Data outgrowing page memory: pagestore did not run."
    ps = tbl[tbl["store"] == "pagestore"].sort_values("data_ratio")
    lo, hi = ps.iloc[0], ps.iloc[-1]
    mem = f"{lo['page_memory'] / (1 << 20):,.0f} MiB"
    # one data size is stated as it is, not as an arrow from a size to itself
    arrow = _arrow if len(ps) > 1 else (lambda a, b, fmt: f"{b:{fmt}}")
    size = f"growing from {lo['data_ratio']:g}× to {hi['data_ratio']:g}×" if len(ps) > 1 else \
        f"{hi['data_ratio']:g}×"
    parts = [f"With {mem} of page memory and data {size} "
             f"of it, pagestore loaded {arrow(lo['load_per_s'], hi['load_per_s'], ',.0f')} keys/s"]
    ratios = [f"{arrow(lo[f'load_x_{ref}']['median'], hi[f'load_x_{ref}']['median'], '.2f')}× {t}"
              for ref, t in REFERENCES if lo[f"load_x_{ref}"]["n"] and hi[f"load_x_{ref}"]["n"]]
    if ratios:
        parts[0] += f" ({', '.join(ratios)})"
    gets = f"and served {arrow(lo['get_per_s'], hi['get_per_s'], ',.0f')} gets/s"
    if lo["get_x_lmdb"]["n"] and hi["get_x_lmdb"]["n"]:
        gets += f" ({arrow(lo['get_x_lmdb']['median'], hi['get_x_lmdb']['median'], '.2f')}× LMDB)"
    parts.append(gets)
    n = int(ps["rounds"].max())
    how = "one round, so no spread to judge it by" if n == 1 else f"medians of {n} rounds"
    return " ".join(parts) + f"; {how}."


def rich_table(tbl: pd.DataFrame, title: str = "Data outgrows page memory"):
    """The flat table as a rich table for the terminal."""
    from rich.table import Table
    f = flat(tbl)
    t = Table(title=title)
    for c in f.columns:
        t.add_column(c, justify="left" if c == "store" else "right")
    for r in f.itertuples(index=False):
        t.add_row(*[f"{v:,.0f}" if isinstance(v, (int, float)) else str(v) for v in r])
    return t
