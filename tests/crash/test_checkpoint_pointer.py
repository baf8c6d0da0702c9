"""A checkpoint names its CHECKPOINT record's lsn as the replay pointer and
flushes the log only up to that record. A store stopped after END may hold a
log that ends at the pointer: recovery replays nothing from there, and
`verify` agrees (no false fault), noting where the log ends."""

import os
import subprocess
import sys

import pytest

import pagestore
from pagestore.tools import wal_slots
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
                    checkpoint_interval=3600, wal_mode=sys.argv[2])
for i in range(1300):
    db.put(b"k%04d" % i, b"v" * 900)          # the pointer lands in the second segment
db.checkpoint()
for i in range(1300, 1400):
    db.put(b"k%04d" % i, b"w" * 900)          # after the pointer
db.sync()
print("acknowledged", flush=True)
os._exit(9)
"""
S = 1 << 20


def _damage(store, how):
    pointer = [c for c in verify(store)["checks"] if c["check"] == "wal"][0]["from_lsn"]
    slots, _, _ = wal_slots(store)
    for s in slots:
        if s.seq is None or s.seq < pointer // S:
            continue
        if how == "zero from the pointer" and s.seq == pointer // S:
            with open(s.path, "r+b") as f:
                f.seek(pointer % S)
                f.write(bytes(S - pointer % S))
        elif how == "zero the pointer's block":
            if s.seq == pointer // S:
                with open(s.path, "r+b") as f:
                    f.seek(pointer % S // 4096 * 4096)
                    f.write(bytes(4096))
        elif how == "remove the pointer's segment and later ones":
            os.remove(s.path)


@pytest.mark.parametrize("mode", ["fsync", "log_only"])
@pytest.mark.parametrize("how", ["zero from the pointer", "zero the pointer's block",
                                 "remove the pointer's segment and later ones"])
def test_a_log_missing_acknowledged_records_after_the_pointer_is_a_fault(tmp_path, how, mode):
    # the note above is for a log whose writer ended it at the pointer (a
    # whole END there); zeroed or removed log after the pointer ends the scan
    # there too, with acknowledged records lost: a fault
    store = str(tmp_path / "s")
    p = subprocess.run([sys.executable, "-c", AFTER, store, mode], capture_output=True, text=True, timeout=120)
    assert "acknowledged" in p.stdout, p.stderr[-2000:]
    wal = [c for c in verify(store)["checks"] if c["check"] == "wal"][0]
    assert wal["records"] >= 100 and wal["clean"], wal
    _damage(store, how)
    report = verify(store)
    assert [f for f in report["faults"] if f["check"] == "wal"], report
