"""A writer that outruns the WAL's space reservation on a full disk gets
DiskFullError, not SIGBUS, and the put that raised leaves no trace.

A new store's segments are sparse and mapped shared (log_only): a write
into a page with no disk blocks makes the kernel allocate one, and on a
full file system it kills the process with SIGBUS. The encoder now stops
at the allocated end and asks the WAL for more (wal/growth.py `reserve`).

The real check runs in a child process on a tmpfs of 8 MiB filled to its
last 256 KiB, so a SIGBUS fails the test by the child's exit status; it
needs root to mount (skipped otherwise, with the reason). It runs again with
`File.allocate` made a no-op, as on a file system without fallocate(2), where
the WAL writes zeros instead. The last test runs everywhere: a segment file
whose allocation fails past a point.
"""

import errno
import subprocess
import sys
import textwrap

import pytest

import pagestore
from pagestore.database import State
from pagestore.diskio.posix import PosixFile

CHILD = textwrap.dedent(r"""
    import os, sys, pagestore
    root = sys.argv[1]
    if sys.argv[2:] == ["no-fallocate"]:     # as on a file system without fallocate(2)
        from pagestore.diskio.posix import PosixFile
        PosixFile.allocate = lambda self, offset, length: None
    store = os.path.join(root, "store")
    db = pagestore.open(store, wal_mode="log_only")
    db.put(b"first", b"x")
    free = os.statvfs(root).f_bavail * os.statvfs(root).f_frsize
    filler = os.path.join(root, "filler")
    with open(filler, "wb") as f:
        try:
            f.write(b"\0" * max(0, free - (256 << 10)))
        except OSError:
            pass                                  # full to the last block: just as good
    v = os.urandom(4000)
    n = 0
    try:
        # far more than the 8 MiB the file system holds: the disk fills
        # long before the loop ends, or the store is wrong
        for n in range(10000):
            db.put(b"k%08d" % n, v)
    except pagestore.DiskFullError as e:
        failed = b"k%08d" % n
        assert "seg-" in str(e) and e.path and "/wal/" in e.path, e
        assert db.get(failed) is None, "the put that raised is visible"
        os.remove(filler)
        db.put(failed, v)                          # space is back: writes go on
        db.close()
        with pagestore.open(store) as again:
            assert again.get(failed) == v and again.get(b"first") == b"x"
            assert sum(1 for k in again.keys() if k.startswith(b"k")) == n + 1
        print("disk full after", n, flush=True)
        sys.exit(0)
    print("the disk never filled", n, flush=True)
    sys.exit(4)
""")


def _mount_tmpfs(where) -> None:
    try:
        out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)],
                             capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("no mount command: cannot make a small real file system")
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {out.stderr.strip()}")


@pytest.mark.parametrize("fallocate", ["fallocate", "no-fallocate"])
def test_log_only_writer_past_the_reservation_on_a_full_tmpfs_gets_disk_full_not_sigbus(tmp_path, fallocate):
    where = tmp_path / "fs"
    where.mkdir()
    _mount_tmpfs(where)
    try:
        run = subprocess.run([sys.executable, "-c", CHILD, str(where), fallocate], capture_output=True,
                             text=True, timeout=300)
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=60)
    assert run.returncode != -7, "the writer was killed by SIGBUS: " + run.stderr[-1000:]
    assert run.returncode == 0, (run.returncode, run.stdout, run.stderr[-2000:])
    assert "disk full after" in run.stdout


def test_encoder_stops_at_the_allocated_end_and_raises_disk_full_naming_the_segment(tmp_path, monkeypatch):
    """Allocation of a WAL segment fails past 1.5 MiB (as on a full disk):
    the put needing that space raises DiskFullError naming the segment, is
    not applied, and the puts before it are all there after reopen."""
    limit = (3 << 20) // 2
    real = PosixFile.allocate
    asked = []

    def allocate(self, offset, length):
        if "/wal/seg-" in self.path and offset + length > limit:
            asked.append(offset + length)
            raise OSError(errno.ENOSPC, f"cannot allocate {length} bytes at {offset}", self.path)
        return real(self, offset, length)

    monkeypatch.setattr(PosixFile, "allocate", allocate)
    path = str(tmp_path / "s")
    db = pagestore.open(path, wal_mode="log_only")
    v = bytes(4000)
    n = 0
    with pytest.raises(pagestore.DiskFullError) as info:
        for n in range(2000):
            db.put(b"k%06d" % n, v)
    assert "seg-00000000.wal" in str(info.value)
    assert asked and db.get(b"k%06d" % n) is None
    assert db.state is State.OPEN       # nothing was written: the store goes on
    monkeypatch.setattr(PosixFile, "allocate", real)
    db.put(b"k%06d" % n, v)
    db.close()
    with pagestore.open(path) as again:
        assert len(again) == n + 1
