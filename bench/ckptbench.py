"""The checkpointer's benchmark: latency around checkpoints, recovery-file
write rate against a plain sequential write, and recovery time after kill -9.

* ``checkpoint_latency`` — N random puts into a store whose page memory holds
  the data, checkpoints every few seconds; throughput and p50/p99 put latency
  inside and outside checkpoints (from ``bench.runner.run``).
* ``sequential_write_rate`` — a plain file of the same size created, written in
  1 MiB blocks, fsynced and its directory fsynced, in the same run: the rate
  recovery files are judged by (their phase creates, writes, fsyncs each file
  and fsyncs cp/, in >= 1 MiB pwrites). "The same bytes" are the recovery
  files' bytes as stored: a compressing codec is compared with a plain write
  of its compressed bytes (its rate counts the bytes it writes, not the 4 KiB
  pages it covers), so a codec that spends CPU to write fewer bytes scores
  lower here than its pages per second suggest.
  The crash child measures it three times between its two phase-A checkpoints
  (``plain_rates``, with ``recovery_rates`` of those checkpoints); the report
  compares the fastest of each.
* ``scattered_write_rate`` — what a checkpoint's in-place step costs the
  device: random pages of a file already written (and cached), in ascending
  order, one 4 KiB pwrite each, then fsync; pages/s including the fsync.
* ``crash_recovery`` — a child process loads keys and starts a checkpoint with
  ``PAGESTORE_CRASH_POINT`` set (default ``checkpoint.page_written``, a point
  in step 5), so it dies by SIGKILL there; the parent then times
  ``pagestore.open`` on the directory and checks the keys are all present.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from bench.runner import run

MiB = 1 << 20


def checkpoint_latency(n: int = 1_000_000, interval: float = 2.0, data_dir=None,
                       store_options=None, progress=None) -> dict:
    """N random puts with checkpoints every ``interval`` s; returns the run result."""
    cfg = dict(store="pagestore", scenario="full-speed", ops=n, warmup=0, key_range=n,
               distribution="uniform", memory_size=max(256 * MiB, n * 400),
               checkpoint_interval=interval, data_dir=data_dir)
    cfg.update(store_options or {})
    return run(cfg, progress=progress)


def recovery_write_rate(result: dict) -> dict:
    """Bytes/s at which recovery files were written, over the run's checkpoints."""
    rows = [c for c in result["checkpoints"] if c["recovery_bytes"] > 0 and c["recovery_write_ms"] > 0]
    total = sum(c["recovery_bytes"] for c in rows)
    ms = sum(c["recovery_write_ms"] for c in rows)
    biggest = max((c["recovery_bytes"] for c in rows), default=0)
    return dict(checkpoints=len(rows), bytes=total, rate=total / (ms / 1000) if ms else float("nan"),
                biggest=biggest)


def sequential_write_rate(nbytes: int, data_dir=None, block: int = MiB) -> dict:
    """Write ``nbytes`` to a new file in ``block`` chunks, fsync; bytes/s including the fsync."""
    nbytes = max(int(nbytes), block)
    d = tempfile.mkdtemp(prefix="bench-seq-", dir=data_dir)
    buf = os.urandom(block)
    try:
        # The same durability steps as the recovery-file phase it is compared
        # with: the file is created inside the timed span, written, fsynced,
        # and its directory fsynced (the new name).
        t = time.perf_counter()
        fd = os.open(os.path.join(d, "seq"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            left = nbytes
            while left > 0:
                left -= os.write(fd, buf[:min(block, left)])
            os.fsync(fd)
        finally:
            os.close(fd)
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        secs = time.perf_counter() - t
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return dict(bytes=nbytes, seconds=secs, rate=nbytes / secs)


def scattered_write_rate(pages: int, span_pages: int, data_dir=None, rounds: int = 3,
                         page: int = 4096, seed: int = 113) -> dict:
    """Write ``pages`` random distinct pages of a ``span_pages``-page file in
    ascending order, one pwrite a page (as a checkpoint writes pages that are
    not adjacent; ~1 us of Python a call, small beside the device's time),
    then fsync; the median pages/s of ``rounds`` rounds, each drawn afresh.
    The file is written and fsynced untimed first, so, like a store's page
    file, it is whole and in the page cache."""
    import random
    span_pages = max(int(span_pages), 2)
    pages = max(1, min(int(pages), span_pages // 2))
    d = tempfile.mkdtemp(prefix="bench-scatter-", dir=data_dir)
    rnd, img, rates = random.Random(seed), os.urandom(page), []
    try:
        fd = os.open(os.path.join(d, "pages"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            chunk = os.urandom(256 * page)
            for first in range(0, span_pages, 256):
                os.pwrite(fd, chunk[:min(256, span_pages - first) * page], first * page)
            os.fsync(fd)
            for _ in range(rounds):
                ids = sorted(rnd.sample(range(span_pages), pages))
                t = time.perf_counter()
                for i in ids:
                    os.pwrite(fd, img, i * page)
                os.fsync(fd)
                rates.append(pages / (time.perf_counter() - t))
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    rates.sort()
    return dict(pages=pages, span_pages=span_pages, rates=rates, rate=rates[len(rates) // 2])


def _read_tree(path: str) -> tuple[int, float]:
    """Read every file under ``path`` sequentially: (bytes, seconds)."""
    total, t = 0, time.perf_counter()
    for root, _dirs, files in os.walk(path):
        for f in sorted(files):
            with open(os.path.join(root, f), "rb", buffering=0) as fh:
                while True:
                    b = fh.read(MiB)
                    if not b:
                        break
                    total += len(b)
    return total, time.perf_counter() - t


def _read_tree_direct(path: str) -> tuple[int, float]:
    """Read every file under ``path`` with O_DIRECT (the disk's rate, not the page cache's):
    (bytes, seconds); (0, nan) where O_DIRECT is refused."""
    import mmap
    buf = mmap.mmap(-1, 4 * MiB)          # page-aligned, as O_DIRECT wants
    total, t = 0, time.perf_counter()
    try:
        for root, _dirs, files in os.walk(path):
            for f in sorted(files):
                fd = os.open(os.path.join(root, f), os.O_RDONLY | getattr(os, "O_DIRECT", 0))
                try:
                    while True:
                        got = os.readv(fd, [buf])
                        total += got
                        if got < len(buf):
                            break
                finally:
                    os.close(fd)
    except OSError:
        return 0, float("nan")
    finally:
        buf.close()
    return total, time.perf_counter() - t


def crash_recovery(n: int = 2_200_000, crash_point: str = "checkpoint.page_written", data_dir=None,
                   store_options=None, timeout: float = 600.0, value_size: int = 100,
                   chunk_pages: int = 256) -> dict:
    """kill -9 in a checkpoint's step 5 (child process), then time ``pagestore.open``.

    The child loads ``n`` keys and checkpoints them (phase A: the write-lock figure
    with that many dirty pages), reopens with ``PAGESTORE_CRASH_POINT`` set, dirties
    every page again, and checkpoints while a thread keeps putting new keys; the
    crash point kills it in step 5 (``checkpoint.page_written`` without ``@hit``:
    about the middle, assuming ``chunk_pages`` pages per write: the checkpointer's
    DEFAULT_CHUNK_PAGES, which bench may not import; a test keeps them equal). The parent reads the
    recovery files sequentially, times ``pagestore.open`` and checks 5,000 keys.
    """
    import numpy as np
    import pagestore
    from bench.workload import ValuePool, make_keys

    base = tempfile.mkdtemp(prefix="bench-crash-", dir=data_dir)
    path = os.path.join(base, "db")
    options = dict(wal_mode="log_only", checkpoint_interval=3600.0, memory_size=1 << 30,
                   checkpoint_wal_size=4 << 30)
    options.update(store_options or {})
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "PAGESTORE_CRASH_POINT"}
    out = dict(n=n, crash_point=crash_point, value_size=value_size)
    try:
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "bench.crash_child",
                               json.dumps(dict(n=n, path=path, options=options, crash_point=crash_point,
                                               value_size=value_size, chunk_pages=chunk_pages))],
                              env=env, cwd=root, capture_output=True, text=True, timeout=timeout)
        out["child_seconds"] = time.perf_counter() - t
        for line in proc.stdout.splitlines():
            if line.startswith("PHASEA "):
                a = json.loads(line[7:])
                c = a["checkpoint"]
                out["lock"] = dict(pages=int(c["pages"]), dirty_pages=int(a["dirty_pages"]),
                                   lock_ms=float(c["lock_seconds"]) * 1000,
                                   recovery_bytes=int(c["recovery_bytes"]),
                                   recovery_write_s=float(c["recovery_write_seconds"]),
                                   total_s=float(c["total_seconds"]))
                out["recovery_rates"] = a.get("recovery_rates")
                out["plain_rates"] = a.get("plain_rates")
            elif line.startswith("LOADED "):
                out["crash_spec"] = line[7:]
        out["killed"] = proc.returncode == -signal.SIGKILL
        if not out["killed"]:
            out["error"] = (f"child exited {proc.returncode} without dying at {crash_point}"
                            f" ({'NOCRASH' if 'NOCRASH' in proc.stdout else proc.stderr.strip()[-300:]})")
            return out
        # the reference read: O_DIRECT, i.e. from the disk (after a power loss nothing is cached);
        # the cached read is reported too (recovery after kill -9 finds the files in the page cache)
        cp = os.path.join(path, "cp")
        out["recovery_file_bytes"], out["read_recovery_files_cached_s"] = _read_tree(cp)
        _b, direct_s = _read_tree_direct(cp)
        out["read_recovery_files_direct_s"] = direct_s
        out["read_recovery_files_s"] = direct_s if direct_s == direct_s else out["read_recovery_files_cached_s"]
        t = time.perf_counter()
        db = pagestore.open(path, **options)
        out["recovery_s"] = time.perf_counter() - t
        try:
            st = db.stats()
            rec = dict(st.get("recovery") or {})
            last = st.get("last_checkpoint") or {}
            out["recovery_stats"] = {k: v for k, v in rec.items() if not isinstance(v, (list, dict))}
            out["pages_restored"] = int(rec.get("pages_restored", 0) or 0)
            out["records_replayed"] = int(rec.get("records_replayed", 0) or 0)
            out["restore_s"] = rec.get("restore_seconds")
            out["final_checkpoint_s"] = float(last.get("total_seconds", 0) or 0)
            out["final_checkpoint"] = {k: v for k, v in last.items() if isinstance(v, (int, float))}
            if rec.get("seconds") is not None and out["restore_s"] is not None:
                # what is left once the restore and the checkpoint that ends recovery are taken out
                out["replay_s"] = max(1e-9, float(rec["seconds"]) - float(out["restore_s"])
                                      - out["final_checkpoint_s"])
                out["replay_rate"] = out["records_replayed"] / out["replay_s"]
            keys = make_keys(np.arange(n, dtype=np.uint64), 16)
            vals = ValuePool(value_size, seed=9).take(n)
            idx = np.random.default_rng(3).choice(n, min(n, 5000), replace=False)
            out["checked"] = int(idx.size)
            out["missing_or_wrong"] = sum(1 for i in idx.tolist() if db.get(keys[i]) != vals[i])
        finally:
            db.close()
    except subprocess.TimeoutExpired:
        out["error"] = f"child did not finish within {timeout:.0f} s"
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return out
