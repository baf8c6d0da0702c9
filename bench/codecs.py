"""Recovery-data codecs side by side: the same dirty pages, checkpointed
under each codec in turn, so every codec meets the same moments of the disk.

The matrix compares codecs through whole extreme-load runs, where each codec's
checkpoints see different page counts and different seconds of this VM, whose
page-cache write rate swings 3-5x between seconds. Here one store per codec
holds the same keys (same seed, values compressible as the matrix's); each
round rewrites every key of every store with the same new values (dirtying the
same pages), syncs the page cache, and checkpoints each store, the order
rotating from round to round. Per codec: the median over rounds of the
checkpoint time and of the recovery-file phase per 1,000 pages, and the
recovery bytes per page.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile

import numpy as np

from bench.scenarios import COMPRESSIONS
from bench.workload import DEFAULT_COMPRESSIBILITY, ValuePool, make_keys

MiB = 1 << 20


def codec_checkpoints(keys: int = 150_000, rounds: int = 5, codecs=COMPRESSIONS, data_dir=None,
                      memory_size: int = 64 * MiB, value_size: int = 100,
                      value_compressibility: float = DEFAULT_COMPRESSIBILITY, progress=None) -> dict:
    import pagestore
    if rounds < 1 or keys < 1:
        raise ValueError("rounds and keys must be positive")
    top = tempfile.mkdtemp(prefix="codecs-", dir=data_dir)
    idx = make_keys(np.arange(keys, dtype=np.uint64), 16)
    dbs = {}
    rows = {c: [] for c in codecs}
    try:
        for c in codecs:
            dbs[c] = pagestore.open(os.path.join(top, c), memory_size=memory_size, checkpoint_interval=3600,
                                    recovery_compression=c)
        for r in range(rounds + 1):        # round 0 loads the keys and is not counted
            vals = ValuePool(value_size, seed=100 + r, compressibility=value_compressibility).take(keys)
            items = list(zip(idx, vals))
            for c in codecs:
                dbs[c].put_many(items)
            order = list(codecs[r % len(codecs):]) + list(codecs[:r % len(codecs)])
            for c in order:
                os.sync()
                if progress:
                    progress(f"round {r}/{rounds}: {c}")
                dbs[c].checkpoint()
                last = dbs[c].stats()["last_checkpoint"]
                if r and last["pages"]:
                    rows[c].append(last)
    finally:
        for db in dbs.values():
            db.close()
        shutil.rmtree(top, ignore_errors=True)
    out = {}
    for c, cps in rows.items():
        if not cps:
            continue
        per_k = [1e6 * cp["total_seconds"] / cp["pages"] for cp in cps]
        rec_k = [1e6 * cp["recovery_write_seconds"] / cp["pages"] for cp in cps]
        out[c] = dict(pages=statistics.median(cp["pages"] for cp in cps), rounds=len(cps),
                      ckpt_ms_per_kpage=statistics.median(per_k),
                      recovery_ms_per_kpage=statistics.median(rec_k),
                      recovery_bytes_per_page=sum(cp["recovery_bytes"] for cp in cps)
                      / sum(cp["pages"] for cp in cps),
                      ckpt_ms_per_kpage_all=per_k)
    return dict(keys=keys, rounds=rounds, memory_size=memory_size, codecs=out)
