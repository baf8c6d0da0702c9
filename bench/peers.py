"""Side-by-side comparisons with the peer stores (LMDB, RocksDB, LevelDB, SQLite).

``base_compare`` — the same N keys (16-byte random keys, 100-byte values,
random order) bulk-loaded into each store in one atomic batch (pagestore
put_many, lmdb putmulti, rocksdict WriteBatch, plyvel write_batch, sqlite
executemany in one transaction), then N random point gets (an untimed loop:
total time / N), then one full ordered scan. pagestore runs first, so the
resident-memory figures read after it (VmRSS, VmHWM) are its own.

``commit_compare`` — single puts, each its own commit: one thread in the
"survives kill -9" setting of each store, then durable commits with 1, 4 and
16 threads; plus a bare 4 KiB pwrite + fdatasync loop measured in the same run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import numpy as np

from bench.histogram import LogHistogram
from bench.measure import read_rss
from bench.runner import run, timed_phase
from bench.stores import open_store, pagestore_available
from bench.workload import DEFAULT_COMPRESSIBILITY, ValuePool, make_keys

BASE_STORES = ("pagestore", "lmdb", "rocksdict", "plyvel", "sqlite")
STORE_CHECKPOINT_INTERVAL = 30.0   # pagestore.Config.checkpoint_interval's default
# the closest "commit per put, survives a process kill" setting of each peer
NOSYNC_STORES = ("pagestore", "sqlite", "lmdb_writemap", "rocksdict", "plyvel")
SYNC_STORES = ("pagestore", "sqlite", "lmdb", "rocksdict", "plyvel")


def available(stores) -> tuple[list, list]:
    """(stores to run, notes on the ones skipped)."""
    ok, notes = [], []
    for s in stores:
        if s == "pagestore":
            good, why = pagestore_available()
            if not good:
                notes.append(f"pagestore skipped: {why}")
                continue
        ok.append(s)
    return ok, notes


def _dir_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def base_compare(n: int = 1_000_000, stores=BASE_STORES, data_dir=None, store_options=None,
                 progress=None, value_compressibility: float = DEFAULT_COMPRESSIBILITY) -> dict:
    """Bulk load, point gets and ordered scan of the same N pairs on each store."""
    stores, notes = available(stores)
    rng = np.random.default_rng(42)
    keys = make_keys(rng.permutation(n).astype(np.uint64) + np.uint64(1 << 40), 16)
    pairs = list(zip(keys, ValuePool(100, count=8192, seed=5, compressibility=value_compressibility).take(n)))
    expect = {k: v for k, v in pairs[: 2000]}
    get_order = [keys[i] for i in rng.permutation(n)]
    rows, mem = [], {}
    for name in stores:
        if progress:
            progress(name)
        path = tempfile.mkdtemp(prefix=f"bench-base-{name}-", dir=data_dir)
        try:
            rss0 = read_rss()
            cfg = dict(wal_mode="log_only", **(store_options or {} if name == "pagestore" else {}))
            st = open_store(name, path, cfg)
            t_load, _, io_load = timed_phase(st.bulk_load, pairs)
            get = st.get
            t0 = time.perf_counter()
            for k in get_order:
                get(k)
            t_get = time.perf_counter() - t0
            wrong = sum(1 for k, v in expect.items() if bytes(st.get(k) or b"") != v)
            t_scan, count, _ = timed_phase(st.scan_all)
            if name == "pagestore":
                mem = dict(rss_before=rss0.get("VmRSS", 0), **read_rss())
                mem["memory_size"] = cfg.get("memory_size")
            st.close()
            rows.append(dict(store=name, n=n, load_ops=n / t_load, get_ops=n / t_get,
                             scan_rows=count / t_scan, scan_ok=count == n, get_mismatches=wrong,
                             load_write_bytes=io_load, size_bytes=_dir_bytes(path)))
        finally:
            shutil.rmtree(path, ignore_errors=True)
    ratios = {}
    ps = next((r for r in rows if r["store"] == "pagestore"), None)
    if ps:
        for r in rows:
            if r["store"] != "pagestore":
                ratios[r["store"]] = {m: ps[m] / r[m] for m in ("load_ops", "get_ops", "scan_rows")}
    return dict(rows=rows, ratios=ratios, memory=mem, notes=notes)


def fdatasync_loop(seconds: float = 3.0, data_dir=None, block: int = 4096, blocks: int = 256) -> dict:
    """Bare durable 4 KiB writes: pwrite at rotating offsets of a preallocated file + fdatasync."""
    d = tempfile.mkdtemp(prefix="bench-fsync-", dir=data_dir)
    path = os.path.join(d, "f")
    buf = os.urandom(block)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"\0" * block * blocks)
        os.fsync(fd)
        lat = []
        now = time.perf_counter_ns
        end = now() + int(seconds * 1e9)
        i = 0
        t0 = now()
        while t0 < end:
            os.pwrite(fd, buf, (i % blocks) * block)
            os.fdatasync(fd)
            t1 = now()
            lat.append(t1 - t0)
            t0 = t1
            i += 1
    finally:
        os.close(fd)
        shutil.rmtree(d, ignore_errors=True)
    h = LogHistogram()
    h.record_many(lat)
    s = h.summary_us()
    return dict(ops=h.count, ops_per_s=h.count / (h.total / 1e9), p50_us=s["p50"], p99_us=s["p99"])


def commit_compare(seconds: float = 3.0, threads=(1, 4, 16), data_dir=None, key_range=1_000_000,
                   store_options=None, progress=None,
                   value_compressibility: float = DEFAULT_COMPRESSIBILITY,
                   nosync_stores=NOSYNC_STORES, sync_stores=SYNC_STORES) -> dict:
    """Commit-per-put throughput: no-fsync with one thread, durable with T threads."""
    # checkpoint_interval: the store's default (30 s), so no timed checkpoint falls in these
    # few seconds; a None here was overridden by the full-speed preset's 3 s
    base = dict(scenario="full-speed", duration=seconds, warmup=0.5, distribution="uniform",
                key_range=key_range, data_dir=data_dir, checkpoint_interval=STORE_CHECKPOINT_INTERVAL,
                value_compressibility=value_compressibility)
    results = []
    nosync, notes = available(nosync_stores)
    sync, _ = available(sync_stores)
    for name in nosync:
        if progress:
            progress(f"{name} log_only 1 thread")
        extra = store_options or {} if name == "pagestore" else {}
        results.append(run(dict(base, store=name, wal_mode="log_only", threads=1, **extra)))
    bare = None
    for t in threads:
        for name in sync:
            # pagestore's one-thread fsync run is compared with the bare
            # loop; fdatasync here drifts by 10-20 % over tens of seconds, so
            # the loop brackets that run (just before and just after it).
            bracket = bare is None and name == "pagestore"
            if bracket:
                if progress:
                    progress("bare pwrite+fdatasync (before pagestore)")
                before = fdatasync_loop(seconds, data_dir)
            if progress:
                progress(f"{name} fsync {t} threads")
            extra = store_options or {} if name == "pagestore" else {}
            results.append(run(dict(base, store=name, wal_mode="fsync", threads=t, **extra)))
            if bracket:
                if progress:
                    progress("bare pwrite+fdatasync (after pagestore)")
                bare = bracketed(before, fdatasync_loop(seconds, data_dir))
        if bare is None:
            if progress:
                progress("bare pwrite+fdatasync")
            bare = fdatasync_loop(seconds, data_dir)
    return dict(results=results, bare=bare, notes=notes)


def bracketed(before: dict, after: dict) -> dict:
    """One bare-loop figure from the runs before and after a store's run: the mean rate."""
    return dict(ops=before["ops"] + after["ops"],
                ops_per_s=(before["ops_per_s"] + after["ops_per_s"]) / 2,
                p50_us=(before["p50_us"] + after["p50_us"]) / 2,
                p99_us=(before["p99_us"] + after["p99_us"]) / 2,
                before=before["ops_per_s"], after=after["ops_per_s"])


def base_summary_rows(base: dict, run_id: str, node: int = 0) -> list:
    """Summary rows (docs/results-schema.md) for the base comparison: one per store and phase."""
    import json
    rows = []
    for r in base["rows"]:
        for scen, key in (("bulk-load", "load_ops"), ("point-get", "get_ops"), ("ordered-scan", "scan_rows")):
            ops = int(r["n"])
            rows.append(dict(run_id=run_id, node=node, store=r["store"], scenario=scen, recovery_data="",
                             compression="", wal_mode="log_only", throttling="", op_style="atomic",
                             threads=1, duration_s=ops / r[key], ops=ops, throughput=r[key],
                             disk_write_bytes=r["load_write_bytes"] if scen == "bulk-load" else None,
                             config_json=json.dumps(dict(n=r["n"], key_size=16, value_size=100,
                                                         size_bytes=r["size_bytes"]))))
    return rows
