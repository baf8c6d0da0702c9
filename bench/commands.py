"""The subcommands behind ``bench.cli``: each takes the parsed arguments, runs,
writes Parquet under ``--results`` and prints rich tables. Exit codes: 0 done,
1 a run failed or pagestore is needed and cannot be opened, 2 bad options.
"""

from __future__ import annotations

import json
import os
import time
from statistics import median_low

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from bench import bars, ckptbench, peers
from bench.codecs import codec_checkpoints
from bench import report_table as rt
from bench import results as res
from bench.cli import base_config, run_config
from bench.matrix import matrix_configs, quick_configs, run_many
from bench.runner import run as run_one
from bench.stores import pagestore_available


def _note(msg: str) -> None:
    rt.console.print(f"[yellow]{msg}[/yellow]")


def _steps(quiet: bool):
    return Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), disable=quiet)


def _vc(a) -> dict:
    """``--value-compressibility`` when given (else each run's default, 0.5)."""
    vc = getattr(a, "value_compressibility", None)
    return {} if vc is None else dict(value_compressibility=vc)


def _best_config(report: dict):
    """The resolved configuration of the fastest pagestore run in the report (None without one)."""
    rows = list(report.get("matrix") or []) + list((report.get("commit") or {}).get("summaries") or [])
    rows = [r for r in rows if r.get("store") == "pagestore" and r.get("config_json")]
    if not rows:
        return None
    cfg = json.loads(max(rows, key=lambda r: r["throughput"])["config_json"])
    if cfg.get("encryption_key"):    # written out as "<set>": not a key
        return None
    return cfg


def _harness_overhead(data_dir, best: float, extra=None, best_cfg=None, rounds: int = 3) -> dict:
    """The no-op store under the same loop against the store's best configuration, run in
    interleaved pairs so that both see the same machine: identical runs minutes apart differed
    by up to 1.7x here (780 vs 462 k ops/s), and noop runs by 5.4-8.7 M ops/s, so a noop figure
    from one moment against a best store figure from another measured the machine, not the
    harness. The bar's ratio is the median of the pairs' ratios; ``best`` (the session's best
    store figure) is kept for context. Without a configuration to pair with, the best of
    five noop runs against ``best``."""
    noop_cfg = dict(store="noop", scenario="full-speed", duration=1.5, warmup=0.5, data_dir=data_dir,
                    **(extra or {}))
    if best_cfg is None:
        rs = [run_one(dict(noop_cfg)) for _ in range(5)]
        each = [r["summary"]["throughput"] for r in rs]
        noop = max(each)
        return dict(noop=noop, noop_runs=each, best_store=best, ratio=noop / best if best else float("nan"),
                    paired=False)
    cfg = dict(best_cfg, data_dir=data_dir, duration=min(float(best_cfg.get("duration") or 3.0), 3.0),
               run_id=None)
    noops, stores = [], []
    for _ in range(rounds):
        noops.append(run_one(dict(noop_cfg))["summary"]["throughput"])
        stores.append(run_one(dict(cfg))["summary"]["throughput"])
    ratios = sorted(n / st for n, st in zip(noops, stores) if st)
    ratio = median_low(ratios) if ratios else float("nan")   # an even count: the lower middle
    return dict(noop=max(noops), noop_runs=noops, store_runs=stores, pair_ratios=ratios, best_store=best,
                ratio=ratio, paired=True)


def _side_file(results_dir: str, name: str, obj) -> None:
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(results_dir, name), "w") as f:
        json.dump(obj, f, indent=1, default=str)


def _ckpt_derived(r: dict) -> dict:
    """Per-page figures of a run's checkpoints (the compression bar compares them) and
    how many ops fell inside and outside checkpoints (the p99 bar needs enough of each)."""
    rows = r.get("checkpoints") or []
    pages = sum(c["pages"] for c in rows)
    extra = r.get("extra") or {}
    return dict(ckpt_pages=pages, observed_checkpoints=len(rows),
                ops_in_ckpt=extra.get("ops_in_ckpt"), ops_out_ckpt=extra.get("ops_out_ckpt"),
                recovery_bytes_per_page=sum(c["recovery_bytes"] for c in rows) / pages if pages else None,
                ckpt_ms_per_kpage=1000 * sum(c["total_ms"] for c in rows) / pages if pages else None)


def _extra_runs(a, report, best) -> tuple[float, list]:
    """The repeat of one matrix configuration (bar: two runs within 15 %) and the same
    configuration encrypted between two plain runs (bar: encryption costs <= 25 % of their mean)."""
    failures = []
    base = dict(scenario="full-speed", op_style="atomic", wal_mode="log_only", recovery_data="checkpoint",
                duration=a.seconds, warmup=1.0, data_dir=a.data_dir, **_vc(a))
    first = next((s for s in report.get("matrix", []) if s["scenario"] == "full-speed"
                  and s["op_style"] == "atomic" and s["wal_mode"] == "log_only"
                  and s["recovery_data"] == "checkpoint" and s["compression"] == "default"
                  and s["throttling"] == "default"), None)
    # plain, encrypted, plain: the encrypted run is bracketed, so a drift of
    # the machine over the ~15 s does not read as the cost of encryption
    cfgs = [base, dict(base, encryption_key=os.urandom(32)), base]
    out = run_many(cfgs, a.results, a.quiet)
    failures += out["failures"]
    if len(out["results"]) == 3:
        plain, enc, after = (r["summary"] for r in out["results"])
        best = max(best, plain["throughput"], enc["throughput"], after["throughput"])
        report["encryption"] = dict(plain=plain, encrypted=enc, plain_after=after)
        if first:
            report["repeat"] = dict(a=first["throughput"], b=plain["throughput"],
                                    label="full-speed atomic log_only checkpoint, minutes apart")
        rt.show(rt.runs_table(out["results"], "Repeat (plain), encrypted, plain again"))
    return best, failures


def _codec_figures(a) -> dict:
    """Every recovery-data codec on the same dirty pages, interleaved (bench/codecs.py)."""
    with _steps(a.quiet) as bar:
        task = bar.add_task("codecs", total=None)
        out = codec_checkpoints(data_dir=a.data_dir, progress=lambda s: bar.update(task, description=f"codecs: {s}"),
                                **_vc(a))
    rt.show(rt.codecs_table(out))
    return out


def quick(a, p) -> int:
    t0 = time.monotonic()
    ok, why = pagestore_available()
    if not ok:
        _note(f"pagestore is not available ({why}): the peers run, the pagestore parts are skipped.")
    report, best, best_peer, failures = {}, 0.0, 0.0, []
    if "base" not in a.skip:
        with _steps(a.quiet) as bar:
            task = bar.add_task("bulk load / get / scan", total=None)
            base = peers.base_compare(a.n, data_dir=a.data_dir, store_options=dict(memory_size=a.memory_size),
                                      progress=lambda s: bar.update(task, description=f"base: {s}"),
                                      **_vc(a))
        res.write_dataset(a.results, "summary", peers.base_summary_rows(base, res.new_run_id("base")))
        rt.show(rt.base_table(base))
        report["base"] = base
    if "commit" not in a.skip:
        with _steps(a.quiet) as bar:
            task = bar.add_task("commit per put", total=None)
            # The same page memory as the base comparison: with the default
            # 256 MiB, 1M random keys fill it near the end of the log_only run
            # and its last seconds run evictions and checkpoints, which the
            # peers' unbounded page-cache maps never pay.
            cmp = peers.commit_compare(a.peer_seconds, data_dir=a.data_dir,
                                       store_options=dict(memory_size=a.memory_size),
                                       progress=lambda s: bar.update(task, description=f"commit: {s}"),
                                       **_vc(a))
        for r in cmp["results"]:
            res.write_result(a.results, r)
        best = max([best] + [r["summary"]["throughput"] for r in cmp["results"] if r["summary"]["store"] == "pagestore"])
        best_peer = max(r["summary"]["throughput"] for r in cmp["results"])
        rt.show(rt.commit_table(cmp))
        report["commit"] = dict(bare=cmp["bare"], summaries=[r["summary"] for r in cmp["results"]])
    if ok and "checkpoint" not in a.skip:
        failures += _checkpoint_figures(a.results, a.data_dir, a.ckpt_ops, a.ckpt_interval, a.crash_keys,
                                        "checkpoint.page_written", a.quiet, report)
    if ok and "matrix" not in a.skip:
        out = run_many(quick_configs(dict(duration=a.seconds, warmup=1.0, data_dir=a.data_dir, **_vc(a))),
                       a.results, a.quiet)
        failures += out["failures"]
        rt.show(rt.iep_table(out["results"]), rt.runs_table(out["results"], "Quick matrix runs"))
        best = max([best] + [r["summary"]["throughput"] for r in out["results"]])
        report["matrix"] = [dict(r["summary"], **_ckpt_derived(r)) for r in out["results"]]
        best, more = _extra_runs(a, report, best)
        failures += more
        report["codecs"] = _codec_figures(a)
    against = "the best pagestore run" if best else "the best store run"
    best = best or best_peer
    if best:
        ov = _harness_overhead(a.data_dir, best, _vc(a), best_cfg=_best_config(report))
        if ov["paired"]:
            rt.console.print(f"harness alone (noop store): median {ov['ratio']:.1f}× the store's best "
                             f"configuration over {len(ov['pair_ratios'])} interleaved pairs "
                             f"(noop {', '.join(f'{x:,.0f}' for x in ov['noop_runs'])}; store "
                             f"{', '.join(f'{x:,.0f}' for x in ov['store_runs'])} ops/s)")
        else:
            rt.console.print(f"harness alone (noop store): {ov['noop']:,.0f} ops/s = {ov['ratio']:.1f}× "
                             f"{against} ({best:,.0f} ops/s)")
        report["harness"] = ov
    report["wall_seconds"] = time.monotonic() - t0
    if a.bars:
        report["bars"] = bars.evaluate(report)
        rt.show(bars.table(report["bars"], f"Bars of issues 2-7 (quick, {report['wall_seconds']:,.0f} s)"))
    _side_file(a.results, "quick.json", report)
    for label, err in failures:
        _note(f"failed: {label}: {err}")
    rt.console.print(f"quick finished in {time.monotonic() - t0:,.0f} s; Parquet under {a.results}/")
    return 1 if failures else 0


def _checkpoint_figures(results_dir, data_dir, ops, interval, crash_keys, crash_point, quiet, report) -> list:
    failures, lat = [], None
    with _steps(quiet) as bar:
        task = bar.add_task(f"checkpoints: {ops:,} puts", total=None)
        try:
            lat = ckptbench.checkpoint_latency(ops, interval, data_dir)
            res.write_result(results_dir, lat)
        except Exception as e:
            failures.append(("checkpoint latency", repr(e)))
        bar.update(task, description=f"checkpoints: {crash_keys:,} keys, kill -9 at {crash_point}")
        crash = ckptbench.crash_recovery(crash_keys, crash_point, data_dir)
        # the recovery-file rate: the big checkpoint of the crash child's phase A when there is
        # one (about 100,000 pages), else the latency run's checkpoints
        lock = crash.get("lock") or {}
        if crash.get("recovery_rates"):
            rs = crash["recovery_rates"]
            rate = dict(checkpoints=len(rs), bytes=lock["recovery_bytes"], biggest=lock["recovery_bytes"],
                        rate=max(rs), rates=rs, source="crash child phase A")
        elif lock.get("recovery_write_s"):
            rate = dict(checkpoints=1, bytes=lock["recovery_bytes"], biggest=lock["recovery_bytes"],
                        rate=lock["recovery_bytes"] / lock["recovery_write_s"], source="crash child phase A")
        else:
            rate = ckptbench.recovery_write_rate(lat) if lat else None
            if rate:
                rate["source"] = "latency run"
        # the plain writes the crash child interleaved with phase A's checkpoints
        # (same process, same size, each after os.sync); else one here. The
        # fastest of each is compared: what the disk and this phase can do when
        # nothing else is in the way (this VM's page-cache writes swing 3-5x)
        seq = None
        if crash.get("plain_rates"):
            ps = crash["plain_rates"]
            seq = dict(bytes=lock["recovery_bytes"], rate=max(ps), rates=ps,
                       seconds=lock["recovery_bytes"] / max(ps))
        if not seq:
            bar.update(task, description="checkpoints: plain sequential write")
            seq = ckptbench.sequential_write_rate(rate["biggest"] if rate and rate["biggest"] else 64 << 20,
                                                  data_dir)
    if crash.get("error"):
        failures.append(("crash recovery", crash["error"]))
    rt.show(rt.checkpoint_table(lat, rate, seq, crash))
    report["checkpoint"] = dict(summary=lat and lat["summary"], recovery_rate=rate, sequential=seq, crash=crash,
                                lock=crash.get("lock"),
                                latency_rate=ckptbench.recovery_write_rate(lat) if lat else None)
    return failures


def peers_cmd(a, p) -> int:
    report = {}
    only = set(a.stores) if a.stores else None
    pick = lambda names: tuple(s for s in names if only is None or s in only)  # noqa: E731
    if a.what in ("base", "all"):
        with _steps(a.quiet) as bar:
            task = bar.add_task("base", total=None)
            opts = dict(memory_size=a.memory_size) if a.memory_size else None
            base = peers.base_compare(a.n, stores=pick(peers.BASE_STORES), data_dir=a.data_dir,
                                      store_options=opts, progress=lambda s: bar.update(task, description=f"base: {s}"))
        res.write_dataset(a.results, "summary", peers.base_summary_rows(base, res.new_run_id("base")))
        rt.show(rt.base_table(base))
        for n in base["notes"]:
            _note(n)
        report["base"] = base
    if a.what in ("commit", "all"):
        saved = peers.NOSYNC_STORES, peers.SYNC_STORES
        peers.NOSYNC_STORES, peers.SYNC_STORES = pick(saved[0]), pick(saved[1])
        try:
            with _steps(a.quiet) as bar:
                task = bar.add_task("commit", total=None)
                cmp = peers.commit_compare(a.seconds, tuple(a.threads), data_dir=a.data_dir,
                                           store_options=dict(memory_size=a.memory_size) if a.memory_size else None,
                                           progress=lambda s: bar.update(task, description=f"commit: {s}"))
        finally:
            peers.NOSYNC_STORES, peers.SYNC_STORES = saved
        for r in cmp["results"]:
            res.write_result(a.results, r)
        rt.show(rt.commit_table(cmp))
        for n in cmp["notes"]:
            _note(n)
        report["commit"] = dict(bare=cmp["bare"], summaries=[r["summary"] for r in cmp["results"]])
    rows = bars.issue2(report.get("base")) if "base" in report else []
    rows += bars.issue3(report.get("commit")) if "commit" in report else []
    if rows:
        rt.show(bars.table(rows, "Bars of issues 2-3 (peers)"))
    report["bars"] = rows
    _side_file(a.results, "peers.json", report)
    return 0


def run_cmd(a, p) -> int:
    cfg = run_config(a)
    if cfg.get("store") == "pagestore":
        ok, why = pagestore_available()
        if not ok:
            rt.console.print(f"[red]pagestore cannot be opened: {why}[/red]")
            return 1
    workload = None
    if a.workload:
        from bench.workload import ParquetWorkload
        try:
            workload = ParquetWorkload(a.workload, a.partition)
        except (OSError, ValueError) as e:
            p.error(f"--workload: {e}")
    total = float(cfg.get("warmup") or 1) + float(cfg.get("duration") or 10)
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), disable=a.quiet or a.json) as bar:
        task = bar.add_task(f"{cfg.get('store')} {a.scenario}", total=None if cfg.get("ops") else total)
        start = time.monotonic()
        r = run_one(cfg, workload, progress=lambda _t: bar.update(task, completed=time.monotonic() - start))
    res.write_result(a.results, r)
    if a.json:
        print(json.dumps(r["summary"], default=str))
    else:
        rt.show(rt.runs_table([r], f"run {r['summary']['run_id']}"))
        rt.console.print(f"{len(r['timeseries'])} seconds, {len(r['checkpoints'])} checkpoints written "
                         f"under {a.results}/")
    return 0


def matrix_cmd(a, p) -> int:
    if a.store != "pagestore":
        p.error("matrix varies pagestore options; use --store pagestore (the default)")
    ok, why = pagestore_available()
    if not ok:
        rt.console.print(f"[red]pagestore cannot be opened: {why}[/red]")
        return 1
    configs = matrix_configs(base_config(a), a.scenario, a.recovery_data, a.compression, a.wal_mode,
                             a.throttling, a.op_style)
    rt.console.print(f"{len(configs)} runs")
    out = run_many(configs, a.results, a.quiet)
    rt.show(rt.iep_table(out["results"]), rt.runs_table(out["results"], "Matrix runs"))
    for label, err in out["failures"]:
        _note(f"failed: {label}: {err}")
    return 1 if out["failures"] else 0


def checkpoint_cmd(a, p) -> int:
    ok, why = pagestore_available()
    if not ok:
        rt.console.print(f"[red]pagestore cannot be opened: {why}[/red]")
        return 1
    report = {}
    failures = _checkpoint_figures(a.results, a.data_dir, a.ops, a.interval, a.crash_keys, a.crash_point,
                                   a.quiet, report)
    _side_file(a.results, "checkpoint.json", report)
    for label, err in failures:
        _note(f"failed: {label}: {err}")
    return 1 if failures else 0


COMMANDS = dict(quick=quick, peers=peers_cmd, run=run_cmd, matrix=matrix_cmd, checkpoint=checkpoint_cmd)
