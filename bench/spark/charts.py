"""PNG charts of the report, drawn with matplotlib (Agg) from small aggregated frames.

Every chart is always produced: when its data is absent (no pagestore runs,
no recovery-file checkpoints) it says so in the picture, so the report's
chart count never depends on the data.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

CHARTS = (("throughput", "Throughput over time"),
          ("latency", "Latency over time (p99)"),
          ("cow_buffer", "Checkpoint-buffer use"),
          ("wal_bytes", "WAL bytes per mode"),
          ("recovery_codec", "Recovery-data size per codec"))
TITLES = dict(CHARTS)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def _lines(df: pd.DataFrame, column: str, title: str, ylabel: str, log: bool = False,
           scale: float = 1.0) -> bytes:
    fig, ax = plt.subplots(figsize=(7.4, 4.2))
    if df.empty or df[column].notna().sum() == 0:
        _empty(ax, "no time series in the results")
    else:
        for config, g in df.groupby("config", sort=True):
            ax.plot(g["second"], g[column] * scale, linewidth=1.1, label=config)
        ax.set_xlabel("second of the measured phase")
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False,
                  ncol=1 if df["config"].nunique() <= 8 else 2)
    ax.set_title(title)
    return _png(fig)


def _bars(ax, labels, values, color, fmt: str) -> None:
    bars = ax.bar(range(len(labels)), values, color=color)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    for b, v in zip(bars, values):
        ax.annotate(fmt.format(v), (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=7)
    ax.grid(axis="y", alpha=0.3)


def wal_chart(df: pd.DataFrame) -> bytes:
    fig, axes = plt.subplots(1, 2, figsize=(7.4, 4.2))
    if df.empty:
        for ax in axes:
            _empty(ax, "no pagestore runs in the results")
    else:
        labels = [f"{w or '-'}\nrd={r or '-'}" for w, r in zip(df["wal_mode"], df["recovery_data"])]
        colors = ["#c0504d" if r == "wal" else "#4f81bd" for r in df["recovery_data"]]
        _bars(axes[0], labels, df["wal_bytes_per_op"].fillna(0), colors, "{:.0f}")
        axes[0].set_ylabel("WAL bytes per operation")
        _bars(axes[1], labels, df["wal_bytes_per_node"].fillna(0) / 2**20, colors, "{:.1f}")
        axes[1].set_ylabel("WAL MiB per node and run")
    fig.suptitle(TITLES["wal_bytes"] + "\n(red: rd=wal, page images in the WAL; blue: rd=checkpoint)",
                 fontsize=10)
    fig.tight_layout()
    return _png(fig)


def codec_chart(df: pd.DataFrame) -> bytes:
    fig, ax = plt.subplots(figsize=(7.4, 4.2))
    if df.empty:
        _empty(ax, "no recovery-file checkpoints in the results")
    else:
        _bars(ax, list(df["codec"].replace("", "-")), df["bytes_per_page"].fillna(0), "#9bbb59", "{:.0f}")
        page = float(df["page_size"].max())
        ax.axhline(page, color="#444", linestyle="--", linewidth=1)
        ax.annotate(f"page size {page:.0f} B", (len(df) - 0.5, page), xytext=(0, 4),
                    textcoords="offset points", fontsize=8, ha="right")
        ax.set_ylim(0, max(page, float(df["bytes_per_page"].max())) * 1.15)
        ax.set_ylabel("recovery-file bytes per page")
    ax.set_title(TITLES["recovery_codec"])
    return _png(fig)


def render_all(series: pd.DataFrame, wal: pd.DataFrame, codecs: pd.DataFrame) -> dict:
    """{chart name: PNG bytes} for every chart of CHARTS, in that order."""
    return {
        "throughput": _lines(series, "throughput", TITLES["throughput"],
                             "ops/s (sum over nodes, mean over runs)"),
        "latency": _lines(series, "lat_p99_us", TITLES["latency"], "p99 latency (µs, mean over nodes)",
                          log=True),
        "cow_buffer": _lines(series, "cow_fill", TITLES["cow_buffer"], "checkpoint buffer used (%)",
                             scale=100.0),
        "wal_bytes": wal_chart(wal),
        "recovery_codec": codec_chart(codecs),
    }
