"""The child process of ``bench.ckptbench.crash_recovery``: load, checkpoint, then die at a crash point.

Run as ``python -m bench.crash_child JSON`` (from the project root). Phase A
prints ``PHASEA {json}`` (the write-lock figure with every loaded page dirty,
recovery-file and plain write rates); phase B arms ``PAGESTORE_CRASH_POINT``,
dirties every page again and checkpoints while a thread keeps putting new keys,
and is expected to be killed there (``NOCRASH`` when it was not).
"""

import json
import os
import sys
import threading

import numpy as np

import pagestore
from bench.ckptbench import sequential_write_rate
from bench.workload import ValuePool, make_keys


def main(argv) -> None:
    """Both phases, with the JSON arguments of ``crash_recovery``."""
    a = json.loads(argv[0])
    n = a["n"]
    keys = make_keys(np.arange(n, dtype=np.uint64), 16)
    def load(db, seed):
        vals = ValuePool(a["value_size"], seed=seed).take(n)
        for s in range(0, n, 100_000):
            db.put_many(list(zip(keys[s:s + 100_000], vals[s:s + 100_000])))
    # phase A (no crash point): checkpoints of every loaded page, for the lock figure
    # and the recovery-file rate, and plain sequential writes of the same size, the
    # rate it is judged by. This VM's write rate swings 3x from one second to the next
    # (page-cache memory the host must back first), so each is measured more than
    # once, interleaved: a plain write, a checkpoint, for two rounds (the second
    # rewrites every key), then a last plain write; every step starts from a synced
    # page cache, and the fastest of each kind is compared.
    os.environ.pop("PAGESTORE_CRASH_POINT", None)
    db = pagestore.open(a["path"], **a["options"])
    here = os.path.dirname(a["path"])
    plain, rates, first = [], [], None
    for rnd in range(2):
        load(db, 8 - rnd)
        if first is None:
            dirty = db.stats()["dirty_pages"]
        # the plain write is the size of the recovery files: the first checkpoint's
        # once known, before it dirty pages at skip_garbage's ~2,850 B each
        os.sync()
        plain.append(sequential_write_rate(first["recovery_bytes"] if first else dirty * 2850, here)["rate"])
        os.sync()
        c = db.checkpoint()
        first = first or c
        rates.append(c["recovery_bytes"] / c["recovery_write_seconds"])
    os.sync()
    plain.append(sequential_write_rate(first["recovery_bytes"], here)["rate"])
    print("PHASEA " + json.dumps(dict(dirty_pages=dirty, checkpoint=first, recovery_rates=rates,
                                      plain_rates=plain), default=str), flush=True)
    db.close()
    # phase B: the crash point armed through the environment, every page dirtied again,
    # a writer putting new keys while the checkpoint runs (the records recovery replays)
    spec = a["crash_point"]
    if "@" not in spec and spec == "checkpoint.page_written":
        chunks = -(-int(c["pages"]) // a["chunk_pages"])
        spec += "@%d" % max(1, chunks // 2)     # about the middle of step 5
    os.environ["PAGESTORE_CRASH_POINT"] = spec
    db = pagestore.open(a["path"], **a["options"])
    load(db, 9)
    print("LOADED " + spec, flush=True)
    stop = False
    def writer():
        i = n
        vals = ValuePool(a["value_size"], seed=10).take(4096)
        while not stop:
            ks = make_keys(np.arange(i, i + 4096, dtype=np.uint64), 16)
            for s in range(0, 4096, 64):
                db.put_many(list(zip(ks[s:s + 64], vals[s:s + 64])))
            i += 4096
    threading.Thread(target=writer, daemon=True).start()
    db.checkpoint()
    stop = True
    print("NOCRASH", flush=True)
    db.close()


if __name__ == "__main__":
    main(sys.argv[1:])
