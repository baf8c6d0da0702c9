"""The command line of ``python -m bench``: its parser, and run configurations from parsed options.

``parser()`` declares the subcommands (quick | peers | run | matrix |
checkpoint) and their options; ``run_config`` and ``base_config`` turn parsed
options into the flat configuration dict that ``bench.scenarios.resolve``
checks. ``bench.cli`` parses and dispatches; ``bench.commands`` runs.
"""

from __future__ import annotations

import argparse

from bench.scenarios import (COMPRESSIONS, OP_STYLES, RECOVERY_DATA, SCENARIOS, THROTTLING, WAL_MODES,
                             parse_mix)
from bench.stores import STORES
from bench.workload import DISTRIBUTIONS

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size(text: str) -> int:
    """``4096``, ``64M``, ``1G``, ``512K`` (KiB units) -> bytes."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    try:
        v = float(t[:-1] if unit else t) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4096, 64M, 1G)") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return int(v)


def count(text: str) -> int:
    """A positive integer; accepts ``1_000_000``, ``1e6``, ``200k``, ``1M``."""
    t = text.strip().lower().replace("_", "")
    mult = {"k": 1_000, "m": 1_000_000}.get(t[-1:], 1)
    try:
        v = float(t[:-1] if mult > 1 else t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r}") from None
    if v <= 0 or v != int(v):
        raise argparse.ArgumentTypeError(f"must be a positive integer: {text!r}")
    return int(v)


def _number(text: str, ok, want: str) -> float:
    """``float(text)`` when ``ok`` accepts it, else the option's error ``want``
    (text that is no number is NaN here, which no range accepts)."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not ok(v):
        raise argparse.ArgumentTypeError(f"{want}: {text!r}")
    return v


def positive(text: str) -> float:
    """A number > 0."""
    return _number(text, lambda v: v > 0, "must be positive (a number > 0)")


def non_negative(text: str) -> float:
    """A number >= 0."""
    return _number(text, lambda v: v >= 0, "must be a number >= 0")


def fraction(text: str) -> float:
    """A number in [0, 1): ``--value-compressibility``."""
    return _number(text, lambda v: 0 <= v < 1, "must be a number in [0, 1)")


def choice_list(choices):
    """A parser of comma-separated lists whose items are all in ``choices``."""
    def parse(text: str) -> list:
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"{','.join(bad) or text!r} not in {', '.join(choices)}")
        return items
    return parse


def mix(text: str) -> dict:
    """An op mix, ``put=80,get=20`` (``bench.scenarios.parse_mix``)."""
    try:
        return parse_mix(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default="results", help="results directory for Parquet (default: results)")
    p.add_argument("--data-dir", default=None, help="where stores are created (default: system temp dir)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _knobs(p: argparse.ArgumentParser, lists: bool = False) -> None:
    """Options of one run; with ``lists`` the matrix dimensions take comma-separated lists."""
    g = p.add_argument_group("workload")
    g.add_argument("--store", choices=STORES, default="pagestore")
    if lists:
        g.add_argument("--scenario", type=choice_list(SCENARIOS), default=["full-speed"])
        g.add_argument("--op-style", type=choice_list(OP_STYLES), default=["atomic"])
    else:
        g.add_argument("--scenario", choices=SCENARIOS, default="full-speed")
        g.add_argument("--op-style", choices=OP_STYLES, default=None,
                       help="atomic: single puts; implicit-tx: each put its own transaction; "
                            "tx: writes grouped up to commit markers (replayed workloads)")
    g.add_argument("--threads", type=count, default=None)
    g.add_argument("--warmup", type=non_negative, default=None, help="seconds before measuring")
    g.add_argument("--duration", type=positive, default=None, help="measured seconds")
    g.add_argument("--ops", type=count, default=None, help="measure this many ops instead of a duration")
    g.add_argument("--rate", type=positive, default=None, help="target ops/s (fixed-rate)")
    g.add_argument("--key-size", type=count, default=None)
    g.add_argument("--value-size", type=count, default=None)
    g.add_argument("--value-size-max", type=count, default=None, help="values uniform in [value-size, max]")
    g.add_argument("--value-compressibility", type=fraction, default=None,
                   help="fraction of each value a fast compressor removes (db_bench's 1 - "
                        "--compression_ratio; default 0.5; 0: random bytes)")
    g.add_argument("--key-range", type=count, default=None)
    g.add_argument("--distribution", choices=DISTRIBUTIONS, default=None)
    g.add_argument("--zipf-theta", type=positive, default=None)
    g.add_argument("--hot-fraction", type=positive, default=None)
    g.add_argument("--hot-ops", type=positive, default=None)
    g.add_argument("--mix", type=mix, default=None, help="op mix, e.g. put=80,get=15,scan=5")
    g.add_argument("--scan-len", type=count, default=None)
    g.add_argument("--preload", action="store_true", default=None, help="bulk-load the key range first")
    g.add_argument("--seed", type=int, default=None)
    s = p.add_argument_group("pagestore options")
    s.add_argument("--page-size", type=size, default=None)
    s.add_argument("--memory-size", type=size, default=None)
    s.add_argument("--checkpoint-buffer-size", type=size, default=None)
    s.add_argument("--checkpoint-interval", type=positive, default=None)
    s.add_argument("--checkpoint-threads", type=count, default=None)
    s.add_argument("--checkpoint-spread", type=float, default=None,
                   help="fraction of the interval a timed checkpoint spreads its page writes over (0: full speed)")
    s.add_argument("--checkpoint-every", type=non_negative, default=None,
                   help="harness calls checkpoint() every N s (0: back to back)")
    s.add_argument("--encryption-key", default=None, help="64 hex digits, or a key file path")
    if lists:
        s.add_argument("--wal-mode", type=choice_list(WAL_MODES), default=["log_only"])
        s.add_argument("--recovery-data", type=choice_list(RECOVERY_DATA), default=list(RECOVERY_DATA))
        s.add_argument("--compression", type=choice_list(COMPRESSIONS), default=["disabled"])
        s.add_argument("--throttling", type=choice_list(THROTTLING), default=["default"])
    else:
        s.add_argument("--wal-mode", choices=WAL_MODES, default=None)
        s.add_argument("--recovery-data", choices=RECOVERY_DATA, default=None)
        s.add_argument("--compression", choices=COMPRESSIONS, default=None, dest="recovery_compression")
        s.add_argument("--throttling", choices=THROTTLING, default=None)


_KNOB_KEYS = ("store", "threads", "warmup", "duration", "ops", "rate", "key_size", "value_size",
              "value_size_max", "value_compressibility", "key_range", "distribution", "zipf_theta",
              "hot_fraction", "hot_ops", "mix",
              "scan_len", "preload", "seed", "page_size", "memory_size", "checkpoint_buffer_size",
              "checkpoint_interval", "checkpoint_spread", "checkpoint_threads", "checkpoint_every")


def _config(a) -> dict:
    cfg = {k: getattr(a, k) for k in _KNOB_KEYS if getattr(a, k, None) is not None}
    key = getattr(a, "encryption_key", None)
    if key:
        try:
            cfg["encryption_key"] = bytes.fromhex(key) if len(key) == 64 else key
        except ValueError:
            cfg["encryption_key"] = key
    cfg["data_dir"] = a.data_dir
    return cfg


def parser() -> argparse.ArgumentParser:
    """The parser of every subcommand."""
    p = argparse.ArgumentParser(prog="python -m bench", description="pagestore benchmark harness "
                                "(IEP-113 experiments and peer stores, side by side).",
                                epilog="The peer comparisons one at a time: python -m bench peers --what "
                                       "base|commit|durable|txn (docs/bench.md).")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{quick,peers,run,matrix,checkpoint}")
    q = sub.add_parser("quick", help="what `make bench` runs: IEP-113's experiment in interleaved rounds, "
                                     "the throttling comparison, the peers (about 8 minutes)")
    _common(q)
    q.add_argument("--full", action="store_true",
                   help="the long version: 60 s runs, 10 s checkpoint interval, 5 rounds (about an hour)")
    q.add_argument("--rounds", type=count, default=None, help="rounds of the IEP-113 experiment (default 3)")
    q.add_argument("--seconds", type=positive, default=None,
                   help="measured seconds per run of the experiment (default 6: three checkpoint cycles and more)")
    q.add_argument("--n", type=count, default=1_000_000, help="keys of the bulk load / get / scan comparison")
    q.add_argument("--peer-seconds", type=positive, default=2.0, help="seconds per commit comparison run")
    q.add_argument("--memory-size", type=size, default=512 << 20,
                   help="pagestore memory_size in the peer comparisons (default 512M)")
    q.add_argument("--value-compressibility", type=fraction, default=None,
                   help="of every generated value, peers' too (default 0.5 as db_bench; 0: random)")
    q.add_argument("--skip", type=choice_list(("iep", "throttling", "peers", "outgrowth", "harness")), default=[])
    pe = sub.add_parser("peers", help="pagestore beside LMDB, RocksDB, LevelDB, SQLite: bulk load/get/scan "
                                      "(--what base), a commit per put (commit), durable commits and gets "
                                      "(durable), transactions and snapshot scans against LMDB (txn)")
    _common(pe)
    pe.add_argument("--what", choices=("base", "commit", "durable", "txn", "all"), default="all",
                    help="base: bulk load, gets and scans of --n keys; commit: a put per commit, "
                         "--seconds per run; durable: interleaved rounds of durable commits (threads, "
                         "asyncio tasks) and point gets beside plyvel and LMDB, with the ratios; txn: "
                         "interleaved rounds of a full scan through a snapshot and transactions of 10 "
                         "puts beside LMDB, with the ratios; all: every one (default)")
    pe.add_argument("--n", type=count, default=1_000_000, help="keys loaded (default 1M)")
    pe.add_argument("--rounds", type=count, default=3, help="rounds of the durable and txn comparisons (default 3)")
    pe.add_argument("--seconds", type=positive, default=3.0,
                    help="seconds per timed run of the commit and durable comparisons (default 3)")
    pe.add_argument("--threads", type=lambda t: [count(x) for x in t.split(",")], default=[1, 4, 16],
                    help="thread counts of the commit comparison (default 1,4,16)")
    pe.add_argument("--stores", type=choice_list(STORES), default=None,
                    help="only these stores in the base and commit comparisons")
    pe.add_argument("--memory-size", type=size, default=None,
                    help="pagestore memory_size")
    r = sub.add_parser("run", help="one scenario on one store, every knob an option")
    _common(r)
    _knobs(r)
    r.add_argument("--workload", default=None, help="replay a Parquet workload directory (from bench/spark)")
    r.add_argument("--partition", default="0", help="partition of --workload to replay")
    r.add_argument("--run-id", default=None)
    r.add_argument("--json", action="store_true", help="print the summary row as JSON")
    m = sub.add_parser("matrix", help="recovery_data x compression x wal_mode x throttling")
    _common(m)
    _knobs(m, lists=True)
    c = sub.add_parser("checkpoint", help="checkpoint figures: latency in/out of checkpoints, recovery-file rate, kill -9 recovery")
    _common(c)
    c.add_argument("--ops", type=count, default=1_000_000)
    c.add_argument("--interval", type=positive, default=1.0)
    c.add_argument("--crash-keys", type=count, default=2_200_000)
    c.add_argument("--crash-point", default="checkpoint.page_written")
    return p


def run_config(a) -> dict:
    """The ``run`` subcommand's configuration (before ``resolve``)."""
    cfg = _config(a)
    for k in ("scenario", "op_style", "wal_mode", "recovery_data", "recovery_compression", "throttling"):
        if getattr(a, k, None) is not None:
            cfg[k] = getattr(a, k)
    if a.run_id:
        cfg["run_id"] = a.run_id
    return cfg


def base_config(a) -> dict:
    """The knobs shared by every run of a matrix."""
    return _config(a)
