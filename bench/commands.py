"""The subcommands behind ``bench.cli``: each takes the parsed arguments, runs,
writes Parquet under ``--results`` and prints rich tables. Exit codes: 0 done,
1 a run failed or pagestore is needed and cannot be opened, 2 bad options.

``quick`` (what ``make bench`` runs) is, in order: IEP-113's experiment
(``bench.experiment``: three scenarios × WAL mode / recovery files / recovery
files + lz4, in interleaved rounds), the throttling comparison, the peer
stores, data outgrowing page memory beside the peers (``bench.outgrowth``), the
harness's own cost; then the scenario tables and IEP-113's claims
with a verdict each (``bench.scenario_table``, ``bench.claims``).
"""

from __future__ import annotations

import json
import os
import time

import pandas as pd
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from bench import ckptbench, claims, experiment, overhead, peers
from bench import report_table as rt
from bench import results as res
from bench import scenario_table as st
from bench.arguments import base_config, run_config
from bench.codecs import codec_checkpoints
from bench.matrix import matrix_configs, run_many
from bench.runner import run as run_one
from bench.schema import columns
from bench.stores import pagestore_available


def _note(msg: str) -> None:
    rt.console.print(f"[yellow]{msg}[/yellow]")


def _steps(quiet: bool):
    return Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), disable=quiet)


def _vc(a) -> dict:
    """``--value-compressibility`` when given (else each run's default, 0.5)."""
    vc = getattr(a, "value_compressibility", None)
    return {} if vc is None else dict(value_compressibility=vc)


def _side_file(results_dir: str, name: str, obj) -> None:
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(results_dir, name), "w") as f:
        json.dump(obj, f, indent=1, default=str)


def frames(results: list) -> tuple:
    """(summary, checkpoints) of in-memory run results as pandas frames of the schema's columns."""
    summary = pd.DataFrame([r["summary"] for r in results], columns=columns("summary"))
    ckpts = pd.DataFrame([c for r in results for c in r.get("checkpoints") or []], columns=columns("checkpoints"))
    return summary, ckpts


def _peers(a, report: dict, session: str) -> list:
    """The bulk load / get / scan comparison and commit per put; their summary rows."""
    summaries = []
    with _steps(a.quiet) as bar:
        task = bar.add_task("bulk load / get / scan", total=None)
        base = peers.base_compare(a.n, data_dir=a.data_dir, store_options=dict(memory_size=a.memory_size),
                                  progress=lambda s: bar.update(task, description=f"peers, bulk: {s}"), **_vc(a))
    rows = peers.base_summary_rows(base, res.new_run_id("base"))
    for r in rows:
        r.update(experiment="peers", session=session)
    res.write_dataset(a.results, "summary", rows)
    rt.show(rt.base_table(base))
    report["base"] = base
    with _steps(a.quiet) as bar:
        task = bar.add_task("commit per put", total=None)
        # The same page memory as the bulk comparison: with the default 256 MiB,
        # 1M random keys fill it near the end of the log_only run and its last
        # seconds run evictions, which the peers' page-cache maps never pay.
        cmp = peers.commit_compare(a.peer_seconds, data_dir=a.data_dir, store_options=dict(memory_size=a.memory_size),
                                   progress=lambda s: bar.update(task, description=f"peers, commit: {s}"), **_vc(a))
    for r in cmp["results"]:
        r["summary"].update(experiment="peers", session=session)
        res.write_result(a.results, r)
        summaries.append(r["summary"])
    rt.show(rt.commit_table(cmp))
    report["commit"] = dict(bare=cmp["bare"], summaries=summaries)
    return summaries


def _outgrowth(a, report: dict, session: str) -> None:
    """Data outgrowing page memory, every store at each ratio (``bench.outgrowth``)."""
    from bench import outgrowth, outgrowth_table
    t0 = time.monotonic()
    with _steps(a.quiet) as bar:
        task = bar.add_task("data outgrows page memory", total=None)
        rows = outgrowth.session_run(a.results, session, full=a.full, data_dir=a.data_dir,
                                     say=lambda line: bar.update(task, description=line.strip()))
    tbl = outgrowth_table.table(outgrowth_table.per_round(outgrowth.summary_rows(rows, "og", session)))
    rt.show(outgrowth_table.rich_table(tbl), outgrowth_table.sentence(tbl))
    report["outgrowth"] = rows
    report["outgrowth_seconds"] = time.monotonic() - t0


def quick(a, p) -> int:
    """IEP-113's experiment, the throttling comparison, the peers; tables and the claims."""
    t0 = time.monotonic()
    ok, why = pagestore_available()
    if not ok:
        _note(f"pagestore is not available ({why}): the peers run, the pagestore parts are skipped.")
    sizes = dict(experiment.FULL if a.full else experiment.QUICK)
    if a.seconds:
        sizes["duration"] = a.seconds
    rounds = a.rounds or (5 if a.full else 3)
    session = res.new_run_id("q")
    base = dict(sizes, data_dir=a.data_dir, session=session, **_vc(a))
    report, results, failures = dict(rounds=rounds, sizes=sizes, session=session), [], []
    if ok and "iep" not in a.skip:
        out = run_many(experiment.iep_configs(base, rounds), a.results, a.quiet)
        results += out["results"]
        failures += out["failures"]
    if ok and "throttling" not in a.skip:
        out = run_many(experiment.throttling_configs(base, rounds=2), a.results, a.quiet)
        results += out["results"]
        failures += out["failures"]
    peer_summaries = _peers(a, report, session) if "peers" not in a.skip else []
    if ok and "outgrowth" not in a.skip:
        try:
            _outgrowth(a, report, session)
        except Exception as e:
            failures.append(("data outgrows page memory", repr(e)))
    if results:
        frame = st.per_round(*frames(results))
        for scen in experiment.SCENARIOS:
            tbl = st.table(frame, scen)
            rt.show(rt.scenario_table(tbl, scen), st.sentence(tbl, scen))
        report["claims"] = claims.evaluate(frame)
        rt.show(claims.table(report["claims"]))
        report["per_round"] = frame.to_dict("records")
    if "harness" not in a.skip:
        summaries = [r["summary"] for r in results] + peer_summaries
        best = max([s["throughput"] for s in summaries if s["store"] == "pagestore"] or
                   [s["throughput"] for s in summaries] or [0.0])
        if best:
            ov = overhead.harness_overhead(a.data_dir, best, _vc(a), best_cfg=overhead.best_config(summaries))
            rt.console.print(overhead.describe(ov))
            report["harness"] = ov
    report["wall_seconds"] = time.monotonic() - t0
    _side_file(a.results, "quick.json", report)
    for label, err in failures:
        _note(f"failed: {label}: {err}")
    rt.console.print(f"quick finished in {report['wall_seconds']:,.0f} s; Parquet under {a.results}/")
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
    """The peer comparisons alone."""
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
        with _steps(a.quiet) as bar:
            task = bar.add_task("commit", total=None)
            cmp = peers.commit_compare(a.seconds, tuple(a.threads), data_dir=a.data_dir,
                                       store_options=dict(memory_size=a.memory_size) if a.memory_size else None,
                                       progress=lambda s: bar.update(task, description=f"commit: {s}"),
                                       nosync_stores=pick(peers.NOSYNC_STORES), sync_stores=pick(peers.SYNC_STORES))
        for r in cmp["results"]:
            res.write_result(a.results, r)
        rt.show(rt.commit_table(cmp))
        for n in cmp["notes"]:
            _note(n)
        report["commit"] = dict(bare=cmp["bare"], summaries=[r["summary"] for r in cmp["results"]])
    if a.what in ("durable", "all"):
        from bench import durable_peers
        dur = durable_peers.durable_compare(rounds=a.rounds, seconds=a.seconds, keys=a.n, data_dir=a.data_dir,
                                            progress=lambda s: None if a.quiet else _note(s))
        durable_peers.show(dur)
        report["durable"] = dur
    if a.what in ("txn", "all"):
        from bench import txn_peers
        txn = txn_peers.txn_compare(rounds=a.rounds, keys=a.n, data_dir=a.data_dir,
                                    progress=lambda s: None if a.quiet else _note(s))
        txn_peers.show(txn)
        report["txn"] = txn
    _side_file(a.results, "peers.json", report)
    return 0


def run_cmd(a, p) -> int:
    """One scenario on one store."""
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
    """A configuration matrix of pagestore options."""
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
    rt.show(rt.runs_table(out["results"], "Matrix runs"))
    for label, err in out["failures"]:
        _note(f"failed: {label}: {err}")
    return 1 if out["failures"] else 0


def checkpoint_cmd(a, p) -> int:
    """Checkpoint latency, recovery-file rate and kill -9 recovery."""
    ok, why = pagestore_available()
    if not ok:
        rt.console.print(f"[red]pagestore cannot be opened: {why}[/red]")
        return 1
    report = {}
    failures = _checkpoint_figures(a.results, a.data_dir, a.ops, a.interval, a.crash_keys, a.crash_point,
                                   a.quiet, report)
    with _steps(a.quiet) as bar:
        task = bar.add_task("codecs", total=None)
        report["codecs"] = codec_checkpoints(data_dir=a.data_dir,
                                             progress=lambda s: bar.update(task, description=f"codecs: {s}"))
    rt.show(rt.codecs_table(report["codecs"]))
    _side_file(a.results, "checkpoint.json", report)
    for label, err in failures:
        _note(f"failed: {label}: {err}")
    return 1 if failures else 0


COMMANDS = dict(quick=quick, peers=peers_cmd, run=run_cmd, matrix=matrix_cmd, checkpoint=checkpoint_cmd)
