"""The plain hot path of one pagestore checkout: single-threaded puts, then gets.

Run by ``bench.txn_peers`` in a fresh interpreter per measurement, so that two
checkouts (the tree under test and a baseline) can be timed alternately:

    python -m bench.hot_path TREE KEYS

imports ``pagestore`` from ``TREE`` (put first on ``sys.path``), puts ``KEYS``
random 16-byte keys with 100-byte values into a new store (``log_only``, no
timed checkpoint), gets them back in random order, and prints one JSON line:
``{"put": ops/s, "get": ops/s, "file": the pagestore module measured}``.
Both loops are timed in process CPU time: another process on a busy machine
stretches the wall clock of a single-threaded loop, much less its CPU time.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import tempfile
import time

VALUE = b"v" * 100


def measure(n: int) -> dict:
    """Put then get ``n`` keys in a new store; rates in ops per CPU second."""
    import pagestore     # imported here: the caller chose the tree on sys.path first
    rng = random.Random(7)
    keys = [rng.randbytes(16) for _ in range(n)]
    d = tempfile.mkdtemp(prefix="hot_path")
    try:
        db = pagestore.open(d, memory_size=512 << 20, wal_mode="log_only", checkpoint_interval=3600)
        put, get, v = db.put, db.get, VALUE
        list(db.scan())     # a scan has run (and ended): the state every store is in after one
        clock = time.process_time
        t0 = clock()
        for k in keys:
            put(k, v)
        t1 = clock()
        rng.shuffle(keys)
        t2 = clock()
        for k in keys:
            get(k)
        t3 = clock()
        db.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return {"put": n / (t1 - t0), "get": n / (t3 - t2), "file": pagestore.__file__}


def main(argv=None) -> int:
    """``TREE KEYS``: measure the checkout at TREE; print the JSON line."""
    tree, n = argv if argv is not None else sys.argv[1:]
    sys.path.insert(0, tree)
    print(json.dumps(measure(int(n))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
