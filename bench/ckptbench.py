"""The checkpointer's benchmark (issue 4): latency around checkpoints, recovery-file
write rate against a plain sequential write, and recovery time after kill -9.

* ``checkpoint_latency`` — N random puts into a store whose page memory holds
  the data, checkpoints every few seconds; throughput and p50/p99 put latency
  inside and outside checkpoints (from ``bench.runner.run``).
* ``sequential_write_rate`` — a plain file of the same size written in 1 MiB
  blocks and fsynced, in the same run: the rate recovery files are judged by.
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

_CHILD = r"""
import json, sys
sys.path.insert(0, {root!r})
import numpy as np
import pagestore
from bench.workload import ValuePool, make_keys
a = json.loads(sys.argv[1])
keys = make_keys(np.arange(a["n"], dtype=np.uint64), 16)
vals = ValuePool(100, seed=9).take(a["n"])
db = pagestore.open(a["path"], **a["options"])
step = 100_000
for s in range(0, a["n"], step):
    db.put_many(list(zip(keys[s:s + step], vals[s:s + step])))
print("LOADED", flush=True)
db.checkpoint()
print("NOCRASH", flush=True)
db.close()
"""


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
        fd = os.open(os.path.join(d, "seq"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            t = time.perf_counter()
            left = nbytes
            while left > 0:
                left -= os.write(fd, buf[:min(block, left)])
            os.fsync(fd)
            secs = time.perf_counter() - t
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return dict(bytes=nbytes, seconds=secs, rate=nbytes / secs)


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


def crash_recovery(n: int = 300_000, crash_point: str = "checkpoint.page_written", data_dir=None,
                   store_options=None, timeout: float = 300.0) -> dict:
    """kill -9 in a checkpoint's step 5 (child process), then time ``pagestore.open``."""
    import numpy as np
    import pagestore
    from bench.workload import ValuePool, make_keys

    base = tempfile.mkdtemp(prefix="bench-crash-", dir=data_dir)
    path = os.path.join(base, "db")
    options = dict(wal_mode="log_only", checkpoint_interval=3600.0, memory_size=max(256 * MiB, n * 400))
    options.update(store_options or {})
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PAGESTORE_CRASH_POINT=crash_point)
    out = dict(n=n, crash_point=crash_point)
    try:
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", _CHILD.format(root=root),
                               json.dumps(dict(n=n, path=path, options=options))],
                              env=env, capture_output=True, text=True, timeout=timeout)
        out["child_seconds"] = time.perf_counter() - t
        out["killed"] = proc.returncode == -signal.SIGKILL
        if not out["killed"]:
            out["error"] = (f"child exited {proc.returncode} without dying at {crash_point}"
                            f" ({'NOCRASH' if 'NOCRASH' in proc.stdout else proc.stderr.strip()[-300:]})")
            return out
        out["recovery_file_bytes"], out["read_recovery_files_s"] = _read_tree(os.path.join(path, "cp"))
        t = time.perf_counter()
        db = pagestore.open(path, **options)
        out["recovery_s"] = time.perf_counter() - t
        try:
            st = db.stats() if hasattr(db, "stats") else {}
            out["recovery_stats"] = {k: v for k, v in st.items() if "recover" in k and not isinstance(v, (list, dict))}
            keys = make_keys(np.arange(n, dtype=np.uint64), 16)
            vals = ValuePool(100, seed=9).take(n)
            idx = np.random.default_rng(3).choice(n, min(n, 5000), replace=False)
            out["missing_or_wrong"] = sum(1 for i in idx.tolist() if db.get(keys[i]) != vals[i])
        finally:
            db.close()
    except subprocess.TimeoutExpired:
        out["error"] = f"child did not finish within {timeout:.0f} s"
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return out
