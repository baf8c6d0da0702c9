"""One benchmark run: open a store, (pre)load, measure, and build result rows.

``run(config, workload=None, node=0)`` is the entry point shared by the CLI,
the matrix and the Spark job. It returns
``dict(timeseries=[rows], checkpoints=[rows], summary=row)`` with the columns
of ``docs/results-schema.md`` (plus ``extra``: figures for the terminal that
are not part of the contract). Pass a :class:`bench.workload.ParquetWorkload`
to replay a generated workload; otherwise the config's key/value/distribution
options generate one. The store lives in a fresh directory under
``data_dir`` (default: the system temporary directory), removed afterwards
unless ``keep`` is set.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import numpy as np

from bench.histogram import LogHistogram
from bench.measure import NS, measure, read_proc_io
from bench.results import new_run_id
from bench.scenarios import config_json, resolve
from bench.stores import open_store
from bench.workload import GeneratedWorkload

_CKPT_FIELDS = ("lock_ms", "recovery_write_ms", "page_write_ms", "fsync_ms", "total_ms")


def _g(d: dict, key, default=0):
    v = d.get(key, default) if isinstance(d, dict) else default
    return default if v is None else v


def run(config: dict, workload=None, node: int = 0, progress=None) -> dict:
    """Run one configuration on one node; see the module docstring."""
    cfg = resolve(config)
    run_id = cfg.get("run_id") or new_run_id()
    # Earlier runs leave dirty page cache behind (their stores are deleted, their
    # writeback is not): without this, the kernel writes it back inside the next
    # run's window and the first run of a block pays for the last one.
    os.sync()
    path = tempfile.mkdtemp(prefix=f"bench-{cfg['store']}-", dir=cfg.get("data_dir"))
    try:
        store = open_store(cfg["store"], path, cfg)
        try:
            wl = workload if workload is not None else GeneratedWorkload(cfg)
            if wl.transactional and cfg["op_style"] == "atomic":
                cfg["op_style"] = "tx"  # replay the workload's own transactions
            if cfg.get("preload"):
                for pairs in wl.preload_pairs():
                    store.bulk_load(pairs)
            raw = measure(store, wl, cfg, progress)
        finally:
            store.close()
    finally:
        if not cfg.get("keep"):
            shutil.rmtree(path, ignore_errors=True)
    if raw["errors"]:
        raise RuntimeError(f"run {run_id} failed: {raw['errors'][0]}")
    return build_rows(cfg, run_id, node, raw)


def _second_rows(run_id, node, recs, sampler, duration_s):
    last = int(np.ceil(duration_s))
    seconds = sorted(s for s in set().union(*[r.sec_hist for r in recs]) | set(sampler.rows) if s < last)
    rows = []
    for s in seconds:
        h = LogHistogram.merged([r.sec_hist[s] for r in recs if s in r.sec_hist])
        span = min(1.0, duration_s - s) if duration_s > s else 1.0
        lat = h.summary_us()
        row = dict(run_id=run_id, node=node, second=int(s), ops=h.count,
                   throughput=h.count / max(span, 1e-3), lat_mean_us=lat["mean"],
                   lat_p50_us=lat["p50"], lat_p99_us=lat["p99"], lat_p999_us=lat["p999"],
                   lat_max_us=lat["max"], _full=span >= 0.999)
        row.update(sampler.rows.get(s, dict(dirty_pages=0, cow_used=0, cow_capacity=0, parks=0,
                                             park_seconds=0.0, checkpoint_running=False)))
        rows.append(row)
    return rows


# pagestore's last_checkpoint reports seconds (lock_seconds, ...); the schema has ms
_CKPT_SECONDS = dict(lock_ms="lock_seconds", recovery_write_ms="recovery_write_seconds",
                     page_write_ms="page_write_seconds", fsync_ms="fsync_seconds", total_ms="total_seconds")


def ckpt_figures(c: dict) -> dict:
    """The IEP-113 figures of one checkpoint dict, in ms, whichever unit the store used."""
    out = {}
    for f in _CKPT_FIELDS:
        if c.get(f) is not None:
            out[f] = float(c[f])
        elif c.get(_CKPT_SECONDS[f]) is not None:
            out[f] = float(c[_CKPT_SECONDS[f]]) * 1000.0
        else:
            out[f] = 0.0
    return out


def _checkpoint_rows(run_id, node, sampler):
    start, end = sampler.start_stats, sampler.end_stats
    hist = _g(end, "checkpoint_history", None)
    if isinstance(hist, list) and hist:
        n_before = len(_g(start, "checkpoint_history", []) or [])
        total_before = int(_g(start, "checkpoints"))
        base = total_before if len(hist) < int(_g(end, "checkpoints")) else n_before
        items = [(base + i + 1, c) for i, c in enumerate(hist[n_before:] if len(hist) >= n_before else hist)]
    else:
        first = int(_g(start, "checkpoints"))
        items = sorted((n, c) for n, c in sampler.ckpt_seen.items() if n > first)
    rows = []
    for cid, c in items:
        fig = ckpt_figures(c)
        t = c.get("t_start") if isinstance(c.get("t_start"), (int, float)) else None
        if t is None and isinstance(c.get("t_start_monotonic"), (int, float)):
            # time.monotonic and perf_counter share CLOCK_MONOTONIC on Linux
            t = float(c["t_start_monotonic"]) - sampler.ctl.measure_start_ns / NS
        if t is None:
            done = sampler.ckpt_done.get(cid)
            t = done - fig["total_ms"] / 1000 if done is not None else float("nan")
        row = dict(run_id=run_id, node=node, checkpoint_id=int(c.get("id", c.get("checkpoint_id", cid))),
                   t_start=float(t), pages=int(_g(c, "pages")), recovery_bytes=int(_g(c, "recovery_bytes")),
                   cow_peak=int(_g(c, "cow_peak")))
        row.update(fig)
        rows.append(row)
    return rows


def _mark_checkpoint_seconds(ts: list, ckpts: list) -> None:
    """A second overlapping any checkpoint's [t_start, t_start + total] counts as inside one
    (the sampler's live flag misses checkpoints that start and end between two samples)."""
    spans = [(c["t_start"], c["t_start"] + c["total_ms"] / 1000) for c in ckpts
             if c["t_start"] == c["t_start"] and c["total_ms"] > 0]
    for r in ts:
        s = r["second"]
        if not r["checkpoint_running"] and any(a < s + 1 and b > s for a, b in spans):
            r["checkpoint_running"] = True


def build_rows(cfg: dict, run_id: str, node: int, raw: dict) -> dict:
    recs, sampler, duration = raw["recorders"], raw["sampler"], raw["duration_s"]
    ts = _second_rows(run_id, node, recs, sampler, duration)
    ckpts = _checkpoint_rows(run_id, node, sampler)
    _mark_checkpoint_seconds(ts, ckpts)
    full = [r for r in ts if r.pop("_full")] or ts
    tput = [r["throughput"] for r in full]
    ck = [r["throughput"] for r in full if r["checkpoint_running"]]
    no_ck = [r["throughput"] for r in full if not r["checkpoint_running"]]
    med = lambda xs: float(np.median(xs)) if xs else float("nan")  # noqa: E731
    whole = LogHistogram.merged([h for r in recs for h in r.sec_hist.values()])
    h_ck = LogHistogram.merged([r.hist_ckpt for r in recs])
    h_out = LogHistogram.merged([r.hist_out for r in recs])
    st0, st1 = sampler.start_stats, sampler.end_stats
    delta = lambda k: int(_g(st1, k)) - int(_g(st0, k))  # noqa: E731
    ops = whole.count
    wal, disk = delta("wal_bytes_written"), sampler.io_end - sampler.io_start
    is_ps = cfg["store"] == "pagestore"
    lat = whole.summary_us()
    summary = dict(
        run_id=run_id, node=node, store=cfg["store"], scenario=cfg["scenario"],
        recovery_data=cfg["recovery_data"] if is_ps else "",
        compression=(cfg["recovery_compression"] or "default") if is_ps else "",
        wal_mode=cfg["wal_mode"], throttling=(cfg["throttling"] or "default") if is_ps else "",
        op_style=cfg["op_style"], threads=int(cfg["threads"]), duration_s=float(duration), ops=ops,
        throughput=med(tput), lat_mean_us=lat["mean"], lat_p99_us=lat["p99"], wal_bytes=wal,
        recovery_bytes=delta("recovery_bytes_written"), page_bytes=delta("page_bytes_written"),
        disk_write_bytes=disk, bytes_per_op=disk / ops if ops else float("nan"),
        wal_bytes_per_op=wal / ops if ops else float("nan"), parks=delta("throttle_parks"),
        stalls=delta("throttle_stalls"), checkpoints=delta("checkpoints"),
        park_seconds=float(_g(st1, "throttle_park_seconds")) - float(_g(st0, "throttle_park_seconds")),
        park_seconds_max=float(_g(st1, "throttle_park_seconds_max")), config_json=config_json(cfg),
        lat_p50_us=lat["p50"], lat_p50_ckpt_us=h_ck.summary_us()["p50"],
        lat_p99_ckpt_us=h_ck.summary_us()["p99"], lat_p50_no_ckpt_us=h_out.summary_us()["p50"],
        lat_p99_no_ckpt_us=h_out.summary_us()["p99"], throughput_ckpt=med(ck),
        throughput_no_ckpt=med(no_ck), experiment=cfg.get("experiment") or "", session=cfg.get("session") or "",
        round=None if cfg.get("round") is None else int(cfg["round"]))
    extra = dict(mean_throughput=ops / duration if duration else float("nan"),
                 ops_in_ckpt=h_ck.count, ops_out_ckpt=h_out.count)
    return dict(timeseries=ts, checkpoints=ckpts,
                summary=summary, extra=extra)


def timed_phase(fn, *args) -> tuple[float, object, int]:
    """(seconds, result, /proc/self/io write_bytes delta) of one call."""
    io0 = read_proc_io()
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out, read_proc_io() - io0
