"""The simulator's I/O-fault injector (SQLite's I/O-error loop, RocksDB's
FaultInjectionTestFS): an injected failure raises a DiskIOError naming the file,
changes nothing, and -- when persistent -- keeps failing until cleared."""

import errno

import pytest

from pagestore.diskio import SimFS
from pagestore.diskio.errors import DiskIOError


def test_an_injected_write_fault_raises_names_the_file_and_changes_nothing():
    fs = SimFS()
    f = fs.open("a", create=True)
    f.pwrite(b"old!", 0)
    fs.arm_fault(1, errno.ENOSPC)
    with pytest.raises(DiskIOError) as info:
        f.pwrite(b"new!", 0)
    assert info.value.errno == errno.ENOSPC and info.value.path == "a"
    assert f.pread(4, 0) == b"old!"
    f.pwrite(b"new!", 0)                   # a one-shot fault is gone
    assert f.pread(4, 0) == b"new!" and fs.faults_injected == 1


def test_the_nth_operation_fails_not_an_earlier_one():
    fs = SimFS()
    f = fs.open("a", create=True)
    fs.arm_fault(3, errno.EIO)
    f.pwrite(b"1", 0)
    f.fdatasync()
    with pytest.raises(DiskIOError) as info:
        f.pwrite(b"2", 1)
    assert info.value.errno == errno.EIO
    assert f.pread(2, 0) == b"1"


def test_a_persistent_fault_fails_every_later_operation_until_cleared():
    fs = SimFS()
    fs.makedirs("d")
    fs.arm_fault(1, errno.EROFS, persistent=True)
    for op in (lambda: fs.open("d/x", create=True), lambda: fs.makedirs("e"),
               lambda: fs.fsync_dir("d")):
        with pytest.raises(DiskIOError) as info:
            op()
        assert info.value.errno == errno.EROFS
    assert not fs.exists("d/x") and not fs.exists("e")
    fs.clear_fault()
    fs.open("d/x", create=True).pwrite(b"ok", 0)
    assert fs.exists("d/x") and fs.faults_injected == 3


def test_a_fault_is_not_a_crash():
    fs = SimFS()
    f = fs.open("a", create=True)
    fs.arm_fault(1, errno.EIO)
    with pytest.raises(DiskIOError):
        f.fsync()
    assert not fs.crashed
    f.pwrite(b"x", 0)                      # the process goes on
