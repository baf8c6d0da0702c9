"""The harness's own cost: the no-op store under the same measuring loop as a real store.

``harness_overhead`` runs the ``noop`` store and the store's best configuration
in interleaved pairs, so both see the same machine: identical runs minutes apart
differed by up to 1.7x here (780 vs 462 k ops/s), and noop runs by 5.4-8.7 M
ops/s, so a noop figure from one moment against a store figure from another
measures the machine, not the harness. The figure is the median of the pairs'
ratios (how many times the store's rate the harness alone sustains).
"""

from __future__ import annotations

import json
from statistics import median_low

from bench.runner import run


def best_config(summaries: list):
    """The resolved configuration of the fastest pagestore run among ``summaries`` (None without one)."""
    rows = [r for r in summaries if r.get("store") == "pagestore" and r.get("config_json")]
    if not rows:
        return None
    cfg = json.loads(max(rows, key=lambda r: r["throughput"])["config_json"])
    if cfg.get("encryption_key"):    # written out as "<set>": not a key
        return None
    for key in ("experiment", "round", "session"):
        cfg.pop(key, None)
    return cfg


def harness_overhead(data_dir, best: float, extra=None, best_cfg=None, rounds: int = 3, runner=run) -> dict:
    """Noop vs the best configuration in ``rounds`` interleaved pairs (median of the pairs' ratios);
    without a configuration to pair with, the best of five noop runs against ``best``."""
    noop_cfg = dict(store="noop", scenario="full-speed", duration=1.5, warmup=0.5, data_dir=data_dir,
                    **(extra or {}))
    if best_cfg is None:
        each = [runner(dict(noop_cfg))["summary"]["throughput"] for _ in range(5)]
        noop = max(each)
        return dict(noop=noop, noop_runs=each, best_store=best, ratio=noop / best if best else float("nan"),
                    paired=False)
    cfg = dict(best_cfg, data_dir=data_dir, duration=min(float(best_cfg.get("duration") or 3.0), 3.0),
               run_id=None)
    noops, stores = [], []
    for _ in range(rounds):
        noops.append(runner(dict(noop_cfg))["summary"]["throughput"])
        stores.append(runner(dict(cfg))["summary"]["throughput"])
    ratios = sorted(n / st for n, st in zip(noops, stores) if st)
    ratio = median_low(ratios) if ratios else float("nan")   # an even count: the lower middle
    return dict(noop=max(noops), noop_runs=noops, store_runs=stores, pair_ratios=ratios, best_store=best,
                ratio=ratio, paired=True)


def describe(ov: dict) -> str:
    """One line for the terminal."""
    if ov["paired"]:
        return (f"harness alone (noop store): median {ov['ratio']:.1f}× the store's best configuration over "
                f"{len(ov['pair_ratios'])} interleaved pairs (noop {', '.join(f'{x:,.0f}' for x in ov['noop_runs'])}; "
                f"store {', '.join(f'{x:,.0f}' for x in ov['store_runs'])} ops/s)")
    return f"harness alone (noop store): {ov['noop']:,.0f} ops/s = {ov['ratio']:.1f}× the best run ({ov['best_store']:,.0f} ops/s)"
