"""A checkpoint names its CHECKPOINT record's lsn as the replay pointer:
that record is on disk before START is, so that after a crash once the
checkpoint completed `verify` finds it where the markers say (no false fault)."""

import subprocess
import sys

import pagestore
from pagestore.verify import verify

CHILD = r"""
import sys
import pagestore
from pagestore.diskio import PosixFS
fs = PosixFS()
db = pagestore.open(sys.argv[1], fs=fs, memory_size=4 << 20, wal_segment_size=1 << 20,
                    checkpoint_interval=3600, wal_mode="fsync")
for i in range(200):
    db.put(b"k%04d" % i, b"v" * 100)
print("acknowledged", flush=True)
fs.arm("checkpoint.after_end_marker")            # the process is killed there
db.checkpoint()
"""


def test_the_checkpoint_record_at_the_pointer_is_on_disk_before_start(tmp_path):
    # fsync mode, one writer: the last put's round made the log durable up to
    # exactly where the CHECKPOINT record then begins
    store = str(tmp_path / "s")
    p = subprocess.run([sys.executable, "-c", CHILD, store], capture_output=True, text=True, timeout=120)
    assert "acknowledged" in p.stdout and p.returncode != 0, p.stderr[-2000:]
    report = verify(store)
    assert [f for f in report["faults"] if f["check"] == "wal"] == []
    with pagestore.open(store, memory_size=4 << 20, wal_segment_size=1 << 20, wal_mode="fsync") as db:
        assert len(db) == 200
