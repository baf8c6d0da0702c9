"""Run lists: the configuration matrix, and running a list of configurations.

``matrix_configs`` is the cartesian product recovery_data × compression ×
wal_mode × throttling (× scenario × op style) over a base configuration (the
IEP-113 experiment's interleaved rounds are ``bench.experiment``'s).
``run_many`` runs a list, writes each result to Parquet as it finishes and
shows a rich progress bar.
"""

from __future__ import annotations

import itertools
import time

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from bench import results as res
from bench.runner import run


def matrix_configs(base: dict, scenarios, recovery_data, compressions, wal_modes, throttlings,
                   op_styles) -> list:
    """The cartesian product of the given dimensions over ``base``."""
    out = []
    for scen, style, wal, rd, comp, thr in itertools.product(scenarios, op_styles, wal_modes,
                                                             recovery_data, compressions, throttlings):
        out.append(dict(base, scenario=scen, op_style=style, wal_mode=wal, recovery_data=rd,
                        recovery_compression=comp, throttling=thr))
    return out


def _label(cfg: dict) -> str:
    parts = [f"round {cfg['round'] + 1}" if cfg.get("round") is not None else "",
             cfg.get("store", "pagestore"), cfg.get("scenario", ""), cfg.get("op_style", "atomic"),
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
