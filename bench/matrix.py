"""Run lists: the configuration matrix and the quick job that ``make bench`` runs.

``matrix_configs`` is the cartesian product recovery_data × compression ×
wal_mode × throttling (× scenario × op style) over a base configuration.
``quick_configs`` is the IEP-113 subset sized for about five minutes here:
for each scenario, atomic puts and implicit transactions in ``log_only`` and
implicit transactions in ``fsync``, each in both recovery-data modes; then
every compression in the ``extreme`` scenario, and every throttling policy
there in ``POLICY_ROUNDS`` interleaved rounds (compared by their medians).
The ``extreme`` pairs (and full-speed's ``fsync`` pair) run ``EXTREME_ROUNDS``
times in all, the later rounds between the policy rounds and in alternating
order, and are compared by their medians: identical extreme runs here differ
by up to 2x (wal-mode atomic runs here: 40-82 k ops/s; checkpoint mode's
pace is the page file's random-write rate on a shared disk).
``run_many`` runs a list, writes each result to Parquet as it finishes and
shows a rich progress bar.
"""

from __future__ import annotations

import itertools
import time

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from bench import results as res
from bench.runner import run
from bench.scenarios import COMPRESSIONS, THROTTLING

#: rounds of the throttling-policy comparison in the quick job (issue 6's bars)
POLICY_ROUNDS = 2
#: rounds of the extreme wal/checkpoint pairs in the quick job (issue 7's bars)
EXTREME_ROUNDS = 3
PAIR_STYLES = (("atomic", "log_only"), ("implicit-tx", "log_only"), ("implicit-tx", "fsync"))


def matrix_configs(base: dict, scenarios, recovery_data, compressions, wal_modes, throttlings,
                   op_styles) -> list:
    out = []
    for scen, style, wal, rd, comp, thr in itertools.product(scenarios, op_styles, wal_modes,
                                                             recovery_data, compressions, throttlings):
        out.append(dict(base, scenario=scen, op_style=style, wal_mode=wal, recovery_data=rd,
                        recovery_compression=comp, throttling=thr))
    return out


def _extreme_pairs(base: dict, flip: bool, repeat: bool = False) -> list:
    """The extreme pairs; in a repeat round also full-speed's fsync pair, the one other pair
    whose two modes run within noise of each other (both wait on the commit's fdatasync)."""
    order = ("checkpoint", "wal") if flip else ("wal", "checkpoint")
    out = [dict(base, scenario="extreme", op_style=style, wal_mode=wal, recovery_data=rd)
           for style, wal in PAIR_STYLES for rd in order]
    if repeat:
        out += [dict(base, scenario="full-speed", op_style="implicit-tx", wal_mode="fsync", recovery_data=rd)
                for rd in order]
    return out


def quick_configs(base: dict) -> list:
    out = []
    for scen in ("full-speed", "fixed-rate"):
        for style, wal in PAIR_STYLES:
            for rd in ("wal", "checkpoint"):
                out.append(dict(base, scenario=scen, op_style=style, wal_mode=wal, recovery_data=rd))
    out += _extreme_pairs(base, flip=False)
    for comp in COMPRESSIONS:
        out.append(dict(base, scenario="extreme", recovery_data="checkpoint", recovery_compression=comp))
    # every policy, the default included (named "adaptive", so that these runs stay
    # apart from the pairs above), in POLICY_ROUNDS interleaved rounds: identical
    # extreme runs minutes apart differed by 16 % here, more than the policies do
    rounds = max(POLICY_ROUNDS, EXTREME_ROUNDS - 1)
    for r in range(rounds):
        if r < POLICY_ROUNDS:
            for thr in THROTTLING:
                if thr == "default":    # the same policy as "adaptive"
                    continue
                out.append(dict(base, scenario="extreme", recovery_data="checkpoint", throttling=thr))
        if r < EXTREME_ROUNDS - 1:
            out += _extreme_pairs(base, flip=r % 2 == 0, repeat=True)
    return out


def _label(cfg: dict) -> str:
    parts = [cfg.get("store", "pagestore"), cfg.get("scenario", ""), cfg.get("op_style", "atomic"),
             cfg.get("wal_mode", "log_only"), cfg.get("recovery_data", "")]
    for k in ("recovery_compression", "throttling"):
        if cfg.get(k):
            parts.append(str(cfg[k]))
    return " ".join(p for p in parts if p)


def run_many(configs: list, results_dir: str | None, quiet: bool = False, keep_going: bool = True) -> dict:
    """Run each config; write Parquet as results arrive; return results and failures."""
    done, failures = [], []
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), disable=quiet, transient=False) as bar:
        task = bar.add_task("matrix", total=len(configs))
        for cfg in configs:
            label = _label(cfg)
            bar.update(task, description=label)
            sub = bar.add_task(f"  {label}", total=float(cfg.get("warmup") or 0) + float(cfg.get("duration") or 10))
            t0 = time.monotonic()

            def progress(_t, sub=sub, t0=t0):
                bar.update(sub, completed=time.monotonic() - t0)
            try:
                r = run(cfg, progress=progress)
                if results_dir:
                    res.write_result(results_dir, r)
                done.append(r)
            except Exception as e:
                failures.append((label, repr(e)))
                if not keep_going:
                    raise
            finally:
                bar.remove_task(sub)
                bar.advance(task)
    return dict(results=done, failures=failures)
