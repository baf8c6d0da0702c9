"""After an I/O failure the store recovers what it can by itself: a failed
checkpoint is retried (the checkpointer never wedges), a segment that could
not be made leaves no file behind, and close() releases every descriptor and
mapping in every WAL mode."""

import errno
import gc
import os

import pytest

import pagestore
from pagestore.diskio import PosixFS, SimFS
from pagestore.diskio.posix import PosixFile
from pagestore.diskio.errors import DiskIOError as LayerDiskIOError
from pagestore.tools import wal_slots
from pagestore.wal.segments import Segments

OPTS = dict(memory_size=1 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600,
            checkpoint_threads=1, checkpoint_buffer_size=64 * 4096)


def test_a_checkpoint_that_failed_for_space_is_retried_and_the_store_goes_on():
    # find an I/O of the checkpoint that is not the log's: the store stays OPEN
    for n in range(1, 60):
        sim = SimFS()
        db = pagestore.open("/s", fs=sim, wal_mode="fsync", **OPTS)
        for i in range(200):
            db.put(b"k%04d" % i, b"v%d" % i)
        sim.arm_fault(n, errno.ENOSPC)
        try:
            db.checkpoint()
        except pagestore.DiskFullError as e:
            if db.state is pagestore.database.State.OPEN:
                assert e.path and e.operation == "checkpoint"
                break
        db.close()
    else:
        pytest.fail("no checkpoint I/O failed without failing the log")
    assert db.stats()["checkpoint_failures"] == 1
    db.put(b"after", b"the failure")                      # writes go on
    stats = db.checkpoint()                                # and the next checkpoint works
    assert stats["pages"] > 0 and db.stats()["checkpoint_error"] is None
    db.close()
    sim.crash(mode="keep")
    with pagestore.open("/s", fs=sim, wal_mode="fsync", **OPTS) as db:
        assert db[b"after"] == b"the failure" and db[b"k0199"] == b"v199" and len(db) == 201


def test_a_segment_that_could_not_be_made_leaves_no_file_and_no_gap_in_the_numbers():
    sim = SimFS()
    segs = Segments(sim, "/w", 1 << 20, write_path="pwrite")
    sim.arm_fault(1, errno.ENOSPC, persistent=True)
    for _ in range(20):
        with pytest.raises(LayerDiskIOError):
            segs.acquire(0)
    assert sim.listdir("/w") == []
    sim.clear_fault()
    segs.acquire(0)
    segs.close()                  # waits for the spare prepared after it
    slots = sorted(n for n in sim.listdir("/w") if n != "NEWEST")     # NEWEST: wal/newest.py
    assert slots[0] == "seg-00000000.wal"
    assert set(slots) <= {"seg-00000000.wal", "seg-00000001.wal"}


def _held(path: str) -> tuple:
    gc.collect()
    fds = sum(1 for fd in os.listdir("/proc/self/fd")
              if os.path.realpath(f"/proc/self/fd/{fd}").startswith(path))
    maps = sum(1 for line in open("/proc/self/maps") if path in line)
    return fds, maps


@pytest.mark.parametrize("mode", ["log_only", "background", "fsync"])
def test_close_releases_every_descriptor_and_mapping(tmp_path, mode):
    path = str(tmp_path / "s")
    for _ in range(5):
        db = pagestore.open(path, wal_mode=mode, memory_size=4 << 20, wal_segment_size=1 << 20)
        for j in range(400):                  # past the first segment: a spare is prepared
            db.put(b"k%d" % j, os.urandom(3000))
        db.close()
    assert _held(path) == (0, 0)


def test_a_store_whose_checkpoint_markers_were_removed_refuses_to_open_naming_cp():
    sim = SimFS()
    with pagestore.open("/s", fs=sim, **OPTS) as db:
        for i in range(300):
            db.put(b"k%04d" % i, b"v" * 500)
        db.checkpoint()
    for name in sim.listdir("/s/cp"):
        sim.remove("/s/cp/" + name)
    with pytest.raises(pagestore.CorruptionError) as info:
        pagestore.open("/s", fs=sim, **OPTS)
    assert info.value.path == "/s/cp" and "checkpoint" in str(info.value)


def test_a_failed_in_place_page_write_is_a_typed_error_naming_the_page_file(tmp_path):
    # the checkpoint's in-place writer (one C call, pagestore/_native/paging.py)
    # meets EBADF: its descriptor now refers to a read-only open of the file
    path = str(tmp_path / "s")
    db = pagestore.open(path, wal_mode="fsync", checkpoint_interval=3600, memory_size=4 << 20)
    for i in range(500):
        db.put(b"k%04d" % i, b"v" * 300)
    fd = pagestore.database.engine_of(db).pages.direct_fd()
    saved = os.dup(fd)
    readonly = os.open(os.path.join(path, "pages.dat"), os.O_RDONLY)
    os.dup2(readonly, fd)
    try:
        with pytest.raises(pagestore.DiskIOError) as info:
            db.checkpoint()
    finally:
        os.dup2(saved, fd)
        os.close(saved)
        os.close(readonly)
    err = info.value
    assert err.operation == "checkpoint" and err.path == os.path.join(path, "pages.dat")
    assert err.errno == errno.EBADF and "the page file" in str(err)
    db.checkpoint()                                   # the retry writes the pages
    db.close()
    with pagestore.open(path, wal_mode="fsync") as db:
        assert len(db) == 500 and db[b"k0499"] == b"v" * 300


class _FullForRecoveryFiles(PosixFS):
    """A file system with no room for a recovery file's first bytes, once full."""

    full = False

    def open(self, path, **kw):
        f = super().open(path, **kw)
        if "RECOVERY" in path and self.full:
            def pwrite(data, offset, _f=f):
                if offset == 0:
                    raise LayerDiskIOError(errno.ENOSPC, "No space left on device", path)
                return PosixFile.pwrite(_f, data, offset)
            f.pwrite = pwrite
        return f


def test_a_checkpoint_failing_for_space_at_a_recovery_files_header_leaves_no_descriptor(tmp_path):
    path = str(tmp_path / "s")
    fs = _FullForRecoveryFiles()
    db = pagestore.open(path, fs=fs, wal_mode="fsync", memory_size=4 << 20, checkpoint_interval=3600)
    for i in range(500):
        db.put(b"k%04d" % i, b"v" * 300)
    fs.full = True
    with pytest.raises(pagestore.DiskFullError):
        db.checkpoint()
    fs.full = False                   # space freed: close's checkpoint succeeds
    db.close()
    assert _held(path) == (0, 0)


@pytest.mark.parametrize("mode", ["fsync", "log_only"])
@pytest.mark.parametrize("what", ["pages.dat", "the segment being written"])
def test_the_next_checkpoint_after_a_file_was_removed_under_the_store_fails_naming_it(tmp_path, what, mode):
    # the descriptor still takes writes, into a file no reopen would find:
    # the checkpoint must not make that look durable, and writes stop
    path = str(tmp_path / "s")
    db = pagestore.open(path, wal_mode=mode, memory_size=4 << 20, wal_segment_size=1 << 20,
                        checkpoint_interval=3600)
    for i in range(500):
        db.put(b"k%04d" % i, b"v" * 300)
    if what == "pages.dat":
        gone = os.path.join(path, "pages.dat")
    else:
        seq = db.stats()["wal_end_lsn"] // (1 << 20)
        gone = next(s.path for s in wal_slots(path)[0] if s.seq == seq)
    os.remove(gone)
    with pytest.raises(pagestore.DiskIOError) as info:
        db.checkpoint()
    assert info.value.path == gone and "removed" in str(info.value)
    with pytest.raises(pagestore.DiskIOError):
        db.put(b"after", b"the removal")
    assert db.get(b"k0499") == b"v" * 300          # reads go on from memory
    db.close()
    assert _held(path) == (0, 0)
