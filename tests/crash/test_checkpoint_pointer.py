"""A checkpoint names its CHECKPOINT record's lsn as the replay pointer and
flushes the log only up to that record. A store stopped after END may hold a
log that ends at the pointer: recovery replays nothing from there, and
`verify` agrees (no false fault), noting where the log ends."""

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


def test_a_log_ending_at_a_completed_checkpoints_pointer_verifies_clean(tmp_path):
    # fsync mode, one writer: the last put's round made the log durable up to
    # exactly where the CHECKPOINT record then begins
    store = str(tmp_path / "s")
    p = subprocess.run([sys.executable, "-c", CHILD, store], capture_output=True, text=True, timeout=120)
    assert "acknowledged" in p.stdout and p.returncode != 0, p.stderr[-2000:]
    report = verify(store)
    assert [f for f in report["faults"] if f["check"] == "wal"] == []
    assert any("ends at checkpoint" in n["message"] for n in report["notes"]), report["notes"]
    with pagestore.open(store, memory_size=4 << 20, wal_segment_size=1 << 20, wal_mode="fsync") as db:
        assert len(db) == 200


AFTER = r"""
import os, sys
import pagestore
db = pagestore.open(sys.argv[1], memory_size=4 << 20, wal_segment_size=1 << 20,
                    checkpoint_interval=3600, wal_mode="fsync")
for i in range(200):
    db.put(b"k%04d" % i, b"v" * 100)
db.checkpoint()
for i in range(200, 300):
    db.put(b"k%04d" % i, b"v" * 100)
print("acknowledged", flush=True)
os._exit(9)
"""


def test_a_missing_record_at_the_pointer_with_acknowledged_records_after_it_is_a_fault(tmp_path):
    # the exemption above is for a log that ends at the pointer; zeroing the
    # block of the CHECKPOINT record, with acknowledged puts after it, is damage
    store = str(tmp_path / "s")
    p = subprocess.run([sys.executable, "-c", AFTER, store], capture_output=True, text=True, timeout=120)
    assert "acknowledged" in p.stdout, p.stderr[-2000:]
    wal = [c for c in verify(store)["checks"] if c["check"] == "wal"][0]
    assert wal["records"] > 100 and wal["clean"], wal
    at = wal["from_lsn"] % (1 << 20) // 4096 * 4096
    seg = wal["stop_file"]
    with open(seg, "r+b") as f:
        f.seek(at)
        f.write(bytes(4096))
    report = verify(store)
    assert [f for f in report["faults"] if f["check"] == "wal"], report
