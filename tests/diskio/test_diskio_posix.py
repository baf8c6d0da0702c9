"""PosixFS against the real file system: each test names the rule it checks."""

import errno
import os
import subprocess
import sys
import textwrap

import pytest

from pagestore import diskio
from pagestore.diskio import DiskIOError, LockedError, NotFoundError, PosixFS, aligned_buffer, is_aligned

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def fs():
    return PosixFS()


def test_pwrite_then_pread_round_trips_at_offsets(fs, tmp_path):
    path = str(tmp_path / "f")
    f = fs.open(path, create=True)
    assert f.pwrite(b"hello", 0) == 5
    assert f.pwrite(memoryview(b"world"), 10000) == 5
    assert f.size() == 10005
    assert f.pread(5, 0) == b"hello"
    assert f.pread(5, 10000) == b"world"
    assert f.pread(5, 5) == b"\0" * 5  # the hole reads as zeros
    assert f.pread(100, 10003) == b"ld"  # short read at end of file
    buf = bytearray(5)
    assert f.pread_into(buf, 10000) == 5 and buf == b"world"
    f.fsync()
    f.fdatasync()
    f.close()
    assert fs.size(path) == 10005


def test_direct_io_round_trips_with_aligned_buffers(tmp_path):
    fs = PosixFS(direct=True)
    path = str(tmp_path / "d")
    f = fs.open(path, create=True, direct=True)
    assert f.direct  # really opened with O_DIRECT
    assert os.O_DIRECT & __import__("fcntl").fcntl(f.fileno(), __import__("fcntl").F_GETFL)
    out = aligned_buffer(3 * 4096)
    assert is_aligned(out)
    out[:] = bytes(range(256)) * 48
    assert f.pwrite(out, 4096) == 3 * 4096
    f.fsync()
    back = aligned_buffer(2 * 4096)
    assert f.pread_into(back, 8192) == 8192
    assert bytes(back) == bytes(out[4096:])
    assert f.pread(4096, 4096) == bytes(out[:4096])
    f.pwrite(b"\x07" * 4096, 0)  # an unaligned bytes object is bounced through an aligned copy
    assert f.pread(4096, 0) == b"\x07" * 4096
    with pytest.raises(DiskIOError) as info:
        f.pwrite(b"x" * 100, 3)  # unaligned offset and length: the kernel refuses
    assert info.value.path == path
    f.close()


def test_aligned_buffer_is_page_aligned_and_sliceable():
    b = aligned_buffer(10000)
    assert len(b) == 10000 and not b.readonly
    assert is_aligned(b) and is_aligned(b[4096:])
    assert not is_aligned(b[1:])
    b[4096:4100] = b"abcd"
    assert bytes(b[4096:4100]) == b"abcd"


def test_errors_are_diskioerrors_carrying_the_path(fs, tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(NotFoundError) as info:
        fs.open(missing)
    assert isinstance(info.value, DiskIOError) and isinstance(info.value, FileNotFoundError)
    assert info.value.path == missing
    with pytest.raises(DiskIOError) as info:
        fs.rename(missing, missing + "2")
    assert info.value.path == missing
    f = fs.open(str(tmp_path / "c"), create=True)
    f.close()
    with pytest.raises(DiskIOError):
        f.pread(1, 0)
    # an OSError raised inside a call (here EBADF from a descriptor closed behind the
    # file's back) comes out as a DiskIOError naming the file, for writes and syncs too
    g = fs.open(str(tmp_path / "d"), create=True)
    os.close(g.fileno())
    for call in (lambda: g.pwrite(b"x", 0), g.fdatasync, g.fsync):
        with pytest.raises(DiskIOError) as info:
            call()
        assert info.value.path == str(tmp_path / "d") and info.value.errno == errno.EBADF
        assert isinstance(info.value.__cause__, OSError)
    with pytest.raises(DiskIOError):
        g.close()       # the descriptor is gone: closing it again says so, and forgets it
    assert g._fd == -1


def test_rename_replaces_atomically_and_fsync_dir_works(fs, tmp_path):
    d = str(tmp_path / "sub")
    fs.makedirs(d)
    fs.makedirs(d)  # idempotent
    a, b = d + "/a", d + "/b"
    for p, data in ((a, b"new"), (b, b"old")):
        f = fs.open(p, create=True)
        f.pwrite(data, 0)
        f.close()
    fs.rename(a, b)
    fs.fsync_dir(d)
    assert fs.listdir(d) == ["b"]
    assert fs.open(b).pread(10, 0) == b"new"
    fs.write_atomic(b, b"newer")
    assert fs.listdir(d) == ["b"] and fs.open(b).pread(10, 0) == b"newer"
    fs.remove(b)
    assert not fs.exists(b)


def test_preallocate_extends_and_truncate_shrinks(fs, tmp_path):
    f = fs.open(str(tmp_path / "p"), create=True)
    f.pwrite(b"abc", 0)
    f.preallocate(1 << 16)
    assert f.size() == 1 << 16 and f.pread(3, 0) == b"abc"
    f.preallocate(10)  # never shrinks
    assert f.size() == 1 << 16
    f.truncate(2)
    assert f.size() == 2 and f.pread(10, 0) == b"ab"
    f.close()


def test_map_writes_reach_the_file_and_sync(fs, tmp_path):
    path = str(tmp_path / "m")
    f = fs.open(path, create=True)
    f.preallocate(3 * 4096)
    m = fs.map(path, 3 * 4096)
    m.buffer[5000:5005] = b"mmap!"
    m.publish(5000, 5005)
    m.sync(5000, 5005)  # unaligned start: widened to the page internally
    assert f.pread(5, 5000) == b"mmap!"  # shared mapping is the page cache
    f.pwrite(b"fd", 0)
    assert m.buffer[0:2] == b"fd"
    with pytest.raises(ValueError):
        m.sync(0, 3 * 4096 + 1)
    m.close()
    m.close()
    with pytest.raises(DiskIOError):
        fs.map(path, 4 * 4096)  # larger than the file
    f.close()


def test_lock_excludes_a_second_lock_in_process(fs, tmp_path):
    path = str(tmp_path / "LOCK")
    lock = fs.lock(path)
    with pytest.raises(LockedError) as info:
        fs.lock(path)
    assert info.value.path == path
    lock.release()
    fs.lock(path).release()


def _child_lock(path):
    code = textwrap.dedent(f"""
        import sys, diskio
        try:
            diskio.PosixFS().lock({path!r})
        except diskio.LockedError as e:
            print("locked", e.path); sys.exit(3)
        print("got it")
    """)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30)


def test_lock_excludes_a_child_process(fs, tmp_path):
    path = str(tmp_path / "LOCK")
    with fs.lock(path):
        res = _child_lock(path)
        assert res.returncode == 3, res.stderr
        assert res.stdout.strip() == f"locked {path}"
    res = _child_lock(path)
    assert res.returncode == 0 and "got it" in res.stdout, res.stderr


def test_public_names_are_exported():
    for name in diskio.__all__:
        assert hasattr(diskio, name)
    assert issubclass(diskio.SimulatedCrash, BaseException)
    assert not issubclass(diskio.SimulatedCrash, Exception)
