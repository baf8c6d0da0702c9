"""A WAL segment appears whole: a process killed (SIGKILL) at any point inside
the creation of a segment file leaves no new segment or a complete one, and
the store reopens with every acknowledged write, no damage warning, and
`python -m pagestore verify` clean.

A new segment is made under a temporary name, allocated and zeroed,
fsynced, renamed, and its directory fsynced (wal/spare.py); each gap has a
crash point, armed in the child through PAGESTORE_CRASH_POINT. Hit 1 is the
first segment, made while the store is created; hit 3 is a spare made in
the background while 1 MiB batches cross segment ends.
"""

import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import pagestore
from pagestore.diskio import CRASH_ENV
from pagestore.wal import WalRecoveryWarning

SEGMENT = 1 << 20
POINTS = ["wal.segment_tmp_created", "wal.segment_preallocated", "wal.segment_synced",
          "wal.segment_created", "wal.segment_dir_synced"]

CHILD = textwrap.dedent(r"""
    import sys, pagestore
    db = pagestore.open(sys.argv[1], wal_mode="log_only", wal_segment_size=1 << 20)
    for b in range(40):
        db.put_many([(b"b%03d-%03d" % (b, i), bytes([b]) * 10000) for i in range(100)])
        print(b, flush=True)                 # batch b acknowledged
    sys.exit(0)                              # the crash point never fired
""")


def _acknowledged(stdout: str) -> list:
    return [int(line) for line in stdout.split()]


@pytest.mark.parametrize("hit", [1, 3])
@pytest.mark.parametrize("point", POINTS)
def test_kill9_inside_segment_creation_leaves_no_segment_or_a_whole_one(tmp_path, point, hit):
    path = str(tmp_path / "s")
    env = dict(os.environ, **{CRASH_ENV: f"{point}@{hit}"})
    run = subprocess.run([sys.executable, "-c", CHILD, path], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == -9, f"{point}@{hit} never fired: {run.returncode} {run.stderr[-1500:]}"
    acked = _acknowledged(run.stdout)
    wal = os.path.join(path, "wal")
    names = sorted(os.listdir(wal)) if os.path.isdir(wal) else []
    for name in names:
        if name.startswith("seg-") and name.endswith(".wal"):
            assert os.path.getsize(os.path.join(wal, name)) == SEGMENT, (name, names)
    with warnings.catch_warnings():
        warnings.simplefilter("error", WalRecoveryWarning)
        with pagestore.open(path, wal_segment_size=SEGMENT) as db:
            for b in acked:
                assert db.get(b"b%03d-%03d" % (b, 99)) == bytes([b]) * 10000
    assert not [n for n in os.listdir(wal) if n.endswith(".tmp")], os.listdir(wal)
    verify = subprocess.run([sys.executable, "-m", "pagestore", "verify", path],
                            capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]


FSYNC_CHILD = textwrap.dedent(r"""
    import sys, pagestore
    from pagestore.diskio import PosixFS
    fs = PosixFS()
    db = pagestore.open(sys.argv[1], fs=fs, wal_mode="fsync", wal_segment_size=1 << 20,
                        memory_size=16 << 20, checkpoint_interval=3600)
    fs.arm("wal.segment_preallocated", hit=2)
    for b in range(40):
        db.put_many({b"b%02d-%04d" % (b, j): b"x" * 3000 for j in range(1000)})
""")


def test_a_reopen_removes_the_unfinished_segment_a_killed_writer_left(tmp_path):
    # the killed writer's .tmp (a whole segment's size) has a slot number
    # beyond any segment the reopened store makes: only the open removes it
    path = str(tmp_path / "s")
    run = subprocess.run([sys.executable, "-c", FSYNC_CHILD, path], capture_output=True, text=True, timeout=300)
    assert run.returncode == -9, run.stderr[-1500:]
    wal = os.path.join(path, "wal")
    assert [n for n in os.listdir(wal) if n.endswith(".tmp")], os.listdir(wal)
    with pagestore.open(path, wal_mode="fsync", wal_segment_size=SEGMENT, memory_size=16 << 20) as db:
        db.put(b"after", b"the kill")
    assert not [n for n in os.listdir(wal) if n.endswith(".tmp")], os.listdir(wal)
