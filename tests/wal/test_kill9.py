"""kill -9 of a process writing in log_only mode on the real disk loses nothing it acknowledged."""

import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from pagestore.diskio import PosixFS  # noqa: E402
from wal_testkit import Harness, kv  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = r"""
import os, sys, threading
sys.path[:0] = [{root!r}, {here!r}]
from pagestore.diskio import PosixFS
from wal_testkit import Harness
h = Harness(PosixFS(), {walpath!r}, mode={mode!r}, segment_size=1 << 20)
h.recover(0)
h.start()
lock = threading.Lock()
out = os.fdopen(1, "w", buffering=1)
def worker(t):
    for i in range(10**9):
        key, value = b"t%d-%07d" % (t, i), bytes([65 + t]) * (i * 37 % 3000)
        with lock:
            _lsn, end = h.writer.put(key, value)
        h.wal.commit(end)
        with lock:
            out.write("%s %d .\n" % (key.decode(), len(value)))
for t in range(3):
    threading.Thread(target=worker, args=(t,), daemon=True).start()
threading.Event().wait()
"""


def run_round(tmp_path, mode, rng):
    walpath = str(tmp_path / "wal")
    code = CHILD.format(root=ROOT, here=os.path.dirname(__file__), walpath=walpath, mode=mode)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    first = [child.stdout.readline() for _ in range(10)]   # it is writing: now pick a moment
    time.sleep(rng.random() * 0.3)
    os.kill(child.pid, signal.SIGKILL)
    lines = (b"".join(first) + child.communicate()[0]).decode().splitlines()
    acked = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[2] == ".":  # a line cut by the kill has no terminator
            acked[parts[0].encode()] = int(parts[1])
    got = dict(kv(Harness(PosixFS(), walpath, segment_size=1 << 20).recover(0)))
    return acked, got


def test_kill9_in_log_only_and_fsync_mode_keeps_every_acknowledged_put(tmp_path):
    rng = random.Random(7)
    for r, mode in enumerate(["log_only", "fsync", "log_only"]):
        d = tmp_path / f"r{r}"
        d.mkdir()
        acked, got = run_round(d, mode, rng)
        assert acked, "the child acknowledged nothing before the kill"
        missing = [k for k in acked if k not in got]
        assert not missing, f"{mode}: {len(missing)} acknowledged puts lost"
        for k, v in got.items():
            t = int(k[1:k.index(b"-")])
            assert v == bytes([65 + t]) * len(v)
            if k in acked:
                assert len(v) == acked[k]
