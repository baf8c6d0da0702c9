"""Scenario presets (after IEP-113's experiments) and configuration resolution.

A run configuration is a flat dict. ``resolve(config)`` lays it over the
common defaults and the chosen scenario's preset and checks every value, so
the CLI, the matrix and the Spark job (through ``bench.runner.run``) share
one definition of a run. Sizes fit a 2-core machine; every one is an option.

* ``full-speed`` — puts as fast as the writers go into a key range that fits
  page memory; periodic checkpoints (``checkpoint_interval``).
* ``fixed-rate`` — the same data at a target ``rate`` (ops/s) all modes can
  sustain, so disk bytes and checkpoint cost are compared at equal load:
  20,000 ops/s, or ``FSYNC_RATE`` in ``wal_mode="fsync"`` (one fdatasync per
  commit caps a thread near 5,000/s here, under 3,000/s when the disk is
  busy, so 20,000 would just be full speed with pacing noise). An explicit
  ``rate`` always wins.
* ``extreme`` — unique keys (the store grows far past page memory), a small
  checkpoint buffer and checkpoints back to back (``checkpoint_every=0``).
"""

from __future__ import annotations

import json

from bench.stores import STORES
from bench.workload import DISTRIBUTIONS, OP_NAMES

MiB = 1 << 20
SCENARIOS = ("full-speed", "fixed-rate", "extreme")
WAL_MODES = ("fsync", "log_only", "background")
RECOVERY_DATA = ("checkpoint", "wal")
COMPRESSIONS = ("disabled", "skip_garbage", "snappy", "zstd", "lz4")
THROTTLING = ("default", "disabled", "exponential_backoff", "fill_rate", "speed_based", "adaptive")
OP_STYLES = ("atomic", "implicit-tx", "tx")

COMMON = dict(
    store="pagestore", scenario="full-speed", threads=1, warmup=1.0, duration=10.0, ops=None,
    rate=None, key_size=16, value_size=100, value_size_max=None, value_compressibility=0.5, key_range=200_000,
    distribution="uniform", zipf_theta=0.99, hot_fraction=0.1, hot_ops=0.9, mix=None,
    scan_len=100, op_style="atomic", preload=False, seed=1, batch=2048,
    # pagestore options (None: the store's own default)
    page_size=None, memory_size=256 * MiB, checkpoint_buffer_size=None, wal_mode="log_only",
    checkpoint_interval=3.0, checkpoint_spread=None, checkpoint_threads=None, recovery_data="checkpoint",
    recovery_compression=None, encryption_key=None, throttling=None,
    checkpoint_every=None, data_dir=None,
)

FSYNC_RATE = 1_000

PRESETS = {
    "full-speed": dict(),
    "fixed-rate": dict(rate=20_000),
    "extreme": dict(distribution="unique", memory_size=32 * MiB, checkpoint_buffer_size=4 * MiB,
                    checkpoint_interval=0.5, checkpoint_every=0.0),
}

_CHOICES = dict(store=STORES, scenario=SCENARIOS, wal_mode=WAL_MODES, recovery_data=RECOVERY_DATA,
                recovery_compression=COMPRESSIONS, throttling=THROTTLING, op_style=OP_STYLES,
                distribution=DISTRIBUTIONS)
_POSITIVE = ("threads", "duration", "key_size", "value_size", "key_range", "batch", "scan_len")


def parse_mix(text: str) -> dict:
    """``"put=80,get=20"`` -> {"put": 80.0, "get": 20.0}."""
    out = {}
    for part in text.split(","):
        name, _, weight = part.partition("=")
        name = name.strip()
        if name not in OP_NAMES:
            raise ValueError(f"unknown op {name!r} in mix (choose from {', '.join(OP_NAMES)})")
        try:
            out[name] = float(weight) if weight else 1.0
        except ValueError:
            raise ValueError(f"bad weight {weight!r} for {name} in mix") from None
        if out[name] < 0:
            raise ValueError(f"negative weight for {name} in mix")
    if not sum(out.values()) > 0:
        raise ValueError("mix needs a positive weight")
    return out


def resolve(config: dict) -> dict:
    """Defaults, then the scenario preset, then ``config``; validated."""
    scenario = config.get("scenario", COMMON["scenario"])
    if scenario not in PRESETS:
        raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
    cfg = dict(COMMON)
    cfg.update(PRESETS[scenario])
    cfg.update({k: v for k, v in config.items() if v is not None or k not in cfg})
    if scenario == "fixed-rate" and config.get("rate") is None and cfg.get("wal_mode") == "fsync":
        cfg["rate"] = FSYNC_RATE
    if cfg.get("distribution") == "hotset":  # bench/spark's spelling
        cfg["distribution"] = "hot-set"
    unknown = set(cfg) - set(COMMON) - {"run_id", "node", "results", "note", "keep", "experiment", "round", "session"}
    if unknown:
        raise ValueError(f"unknown option(s): {', '.join(sorted(unknown))}")
    for key, choices in _CHOICES.items():
        if cfg.get(key) is not None and cfg[key] not in choices:
            raise ValueError(f"{key} must be one of {', '.join(choices)}, not {cfg[key]!r}")
    for key in _POSITIVE:
        if cfg.get(key) is not None and not float(cfg[key]) > 0:
            raise ValueError(f"{key} must be positive, not {cfg[key]!r}")
    if cfg["key_size"] < 8:
        raise ValueError("key_size must be at least 8")
    if cfg["warmup"] < 0:
        raise ValueError("warmup must not be negative")
    if cfg["rate"] is not None and not float(cfg["rate"]) > 0:
        raise ValueError("rate must be positive")
    if not 0 <= float(cfg["value_compressibility"]) < 1:
        raise ValueError(f"value_compressibility must be in [0, 1), not {cfg['value_compressibility']!r}")
    if isinstance(cfg.get("mix"), str):
        cfg["mix"] = parse_mix(cfg["mix"])
    if cfg["throttling"] == "default":
        cfg["throttling"] = None
    return cfg


def config_json(cfg: dict) -> str:
    """The configuration as stable JSON (the encryption key is never written out)."""
    safe = {k: ("<set>" if k == "encryption_key" and v else v) for k, v in cfg.items()}
    return json.dumps(safe, sort_keys=True, default=str)
