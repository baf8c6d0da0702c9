"""Many Python threads call one core at once (cffi releases the GIL): puts,
deletes, gets and scans interleave under the tree lock without losing or
tearing anything, including readers that hit page misses and retry under
the write side."""

import os
import sys
import random
import threading

from pagestore import _native

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from native_kit import scan  # noqa: E402

PS = 4096


class Disk:
    def __init__(self):
        self.pages = {}
        self.lock = threading.Lock()

    def read_page(self, page_id, buf):
        with self.lock:
            buf[:] = self.pages[page_id]


def test_concurrent_put_get_scan_keep_every_thread_consistent():
    disk = Disk()
    core = _native.Core(PS, 96 * PS, 256 * PS, 0, read_page=disk.read_page)
    core.wal_disable()
    core.format_new()
    ckpt_lock = threading.Lock()
    cid = [0]

    def checkpoint():
        with ckpt_lock:
            cid[0] += 1
            ids, _ = core.ckpt_begin(cid[0])
            out = bytearray(len(ids) * PS)
            core.ckpt_copy(ids, out)
            with disk.lock:
                for i, pid in enumerate(ids):
                    disk.pages[pid] = bytes(out[i * PS:(i + 1) * PS])
            core.ckpt_release(ids)
            core.ckpt_end()

    def write(fn, *args):
        while True:
            try:
                return fn(*args)
            except _native.Retry:
                checkpoint()

    errors = []
    n_threads, n_ops = 6, 3000

    def worker(t):
        try:
            rng = random.Random(t)
            mine = {}
            for i in range(n_ops):
                k = b"t%d-%05d" % (t, rng.randrange(1500))
                r = rng.random()
                if r < 0.5:
                    v = b"%d:%d" % (t, i) * rng.randrange(1, 30)
                    write(core.put, k, v)
                    mine[k] = v
                elif r < 0.6:
                    write(core.delete, k)
                    mine.pop(k, None)
                elif r < 0.9:
                    assert write(core.get, k) == mine.get(k)   # a miss may find no free slot
                else:
                    lo = b"t%d-" % t
                    got = write(scan, core, lo, b"t%d." % t, rng.random() < 0.5)
                    assert dict(got) == mine
            got = write(scan, core, b"t%d-" % t, b"t%d." % t)
            assert got == sorted(mine.items())
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
    checkpoint()
    core.verify()
    assert core.signals.evictions > 0                  # readers did miss and reload
