"""PNG charts of the report, drawn with matplotlib (Agg) from small aggregated frames.

Per scenario of IEP-113's experiment, only the compared modes are drawn (WAL
mode, recovery files, recovery files + lz4: three lines, one colour each, the
same in every chart). Time charts show one round's runs with each mode's
checkpoints as a band of its colour under the curves. Every chart is always
produced: when its data is absent it says so in the picture.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.transforms as mtransforms  # noqa: E402
import pandas as pd  # noqa: E402

from bench.experiment import MODE_TITLES, MODES  # noqa: E402

COLOURS = {"wal": "#c0504d", "files": "#4f81bd", "compressed": "#4a9a3a",
           "exponential_backoff": "#c0504d", "fill_rate": "#4f81bd"}
#: (name, title, caption) of the charts drawn per scenario, in page order
SCENARIO_CHARTS = (
    ("throughput", "Throughput over time",
     "Look for dips under the bands (checkpoints): a mode whose line sags there pays for its checkpoints."),
    ("latency", "Latency p99 over time",
     "Spikes under a band are writers waiting on a checkpoint; log scale."),
    ("cow_buffer", "Checkpoint-buffer use",
     "Pages copied on write while a checkpoint runs, as a share of the buffer; near 100 % writers are throttled."),
    ("pages", "Pages per checkpoint",
     "Each dot is one checkpoint; recovery files write each of these pages twice (file, then in place)."),
    ("parks", "Throttling parks per second",
     "How often writers were parked to let the checkpoint catch up; zero is best."),
    ("disk_bytes", "Disk bytes per operation, by kind",
     "Where each mode's bytes go: WAL, recovery files, pages in place (median over rounds)."),
)


def _png(fig, ax, title: str) -> bytes:
    """The chart under ``title`` as PNG bytes; the figure is closed."""
    ax.set_title(title, fontsize=10)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _modes_in(frame: pd.DataFrame) -> list:
    """The compared modes that have rows in ``frame``, in the report's order."""
    present = set(frame["mode"]) if not frame.empty else set()
    return [k for k, _t, _o in MODES if k in present]


def _axes(frame: pd.DataFrame, empty: str):
    """A chart's figure, axes and the modes ``frame`` has; with none, the axes say ``empty``."""
    fig, ax = plt.subplots(figsize=(7.4, 3.3))
    keys = _modes_in(frame)
    if not keys:
        _empty(ax, empty)
    return fig, ax, keys


def _lines_from_zero(ax, xlabel: str, ylabel: str) -> None:
    """A line chart's frame: y from 0, axis labels, a light grid, the legend."""
    ax.set_ylim(bottom=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def _bands(ax, spans: pd.DataFrame, keys: list) -> None:
    """Each mode's checkpoints as a thin band of its colour along the bottom of the plot."""
    trans = mtransforms.blended_transform_factory(ax.transData, ax.transAxes)
    for i, key in enumerate(keys):
        rows = spans[spans["mode"] == key] if not spans.empty else spans
        bars = [(float(t), max(float(d) / 1000, 0.02)) for t, d in zip(rows.get("t_start", []),
                                                                        rows.get("total_ms", []))
                if t == t and d == d]
        if bars:
            ax.broken_barh(bars, (0.01 + 0.035 * i, 0.03), transform=trans, color=COLOURS.get(key, "#888"),
                           alpha=0.45, linewidth=0)


def over_time(ts: pd.DataFrame, spans: pd.DataFrame, column: str, title: str, ylabel: str,
              log: bool = False, scale: float = 1.0, size=(7.4, 3.3)) -> bytes:
    """Lines per mode over the seconds of the measured phase; checkpoints as bands."""
    fig, ax = plt.subplots(figsize=size)
    keys = _modes_in(ts)
    if not keys or ts[column].notna().sum() == 0:
        _empty(ax, "not measured in these results")
    else:
        for key in keys:
            g = ts[ts["mode"] == key].sort_values("second")
            ax.plot(g["second"] + 0.5, g[column] * scale, linewidth=1.4, color=COLOURS[key],
                    label=MODE_TITLES[key], marker="o", markersize=2.5)
        _bands(ax, spans, keys)
        if log:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel("second of the measured phase (bands: checkpoints)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper right", framealpha=0.8)
    return _png(fig, ax, title)


def pages_chart(spans: pd.DataFrame, title: str) -> bytes:
    """Pages of each checkpoint against its start time, per mode."""
    fig, ax, keys = _axes(spans, "no checkpoints in these results")
    if keys:
        for key in keys:
            g = spans[spans["mode"] == key].sort_values("t_start")
            ax.plot(g["t_start"], g["pages"], color=COLOURS[key], marker="o", linewidth=0.8,
                    label=MODE_TITLES[key])
        _lines_from_zero(ax, "checkpoint start (s)", "pages")
    return _png(fig, ax, title)


def disk_bytes_chart(frame: pd.DataFrame, title: str) -> bytes:
    """Stacked bars per mode: WAL, recovery-file and page bytes per operation."""
    fig, ax, keys = _axes(frame, "not measured in these results")
    if keys:
        med = frame.groupby("mode")[["wal_bytes_per_op", "recovery_bytes_per_op", "page_bytes_per_op"]].median()
        bottom = [0.0] * len(keys)
        for col, label, colour in (("wal_bytes_per_op", "WAL", "#8064a2"),
                                   ("recovery_bytes_per_op", "recovery files", "#f79646"),
                                   ("page_bytes_per_op", "pages in place", "#4bacc6")):
            vals = [float(med.loc[k, col]) if k in med.index and med.loc[k, col] == med.loc[k, col] else 0.0
                    for k in keys]
            ax.bar([MODE_TITLES[k] for k in keys], vals, bottom=bottom, color=colour, label=label)
            bottom = [b + v for b, v in zip(bottom, vals)]
        for i, b in enumerate(bottom):
            ax.annotate(f"{b:,.0f} B", (i, b), ha="center", va="bottom", fontsize=8)
        ax.set_ylabel("bytes per operation")
        ax.set_ylim(0, max(bottom + [1.0]) * 1.18)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    return _png(fig, ax, title)


def scenario_charts(scenario: str, ts: pd.DataFrame, spans: pd.DataFrame, frame: pd.DataFrame,
                    round_label: str) -> dict:
    """{chart name: PNG} for one scenario, every chart of SCENARIO_CHARTS."""
    t = {name: f"{title} — {scenario}{round_label}" for name, title, _c in SCENARIO_CHARTS}
    return {
        "throughput": over_time(ts, spans, "throughput", t["throughput"], "ops/s"),
        "latency": over_time(ts, spans, "lat_p99_us", t["latency"], "p99 latency (µs)", log=True),
        "cow_buffer": over_time(ts, spans, "cow_fill", t["cow_buffer"], "buffer used (%)", scale=100.0),
        "pages": pages_chart(spans, t["pages"]),
        "parks": over_time(ts, spans, "parks", t["parks"], "parks per second"),
        "disk_bytes": disk_bytes_chart(frame, f"{SCENARIO_CHARTS[5][1]} — {scenario}"),
    }


def policy_chart(ts: pd.DataFrame, title: str) -> bytes:
    """Throughput over time of the throttling comparison: one line per policy (one round)."""
    fig, ax = plt.subplots(figsize=(7.4, 3.3))
    if ts.empty:
        _empty(ax, "the throttling comparison is not in these results")
    else:
        for pol, g in ts.groupby("throttling"):
            g = g.sort_values("second")
            ax.plot(g["second"] + 0.5, g["throughput"], color=COLOURS.get(pol, "#888"), marker="o",
                    markersize=2.5, label=pol.replace("_", " "))
        _lines_from_zero(ax, "second of the measured phase", "ops/s")
    return _png(fig, ax, title)
