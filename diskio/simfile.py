"""Open-file, mapping and lock handles of the crash simulator, and its inode.

An `_Inode` is one file's state in SimFS: the durable image, the operations
pending since its last fsync, and the current view that reads see (plus the
overlay of a live mapping). The handles here only translate the File /
Mapping / Lock interface into inode operations under the owning SimFS's lock;
the SimFS decides when an operation crashes or counts as I/O.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from .aligned import ALIGNMENT
from .base import File, Lock, Mapping
from .errors import DiskIOError
from .simcrash import apply_op

if TYPE_CHECKING:
    from .sim import SimFS

__all__ = ["SimFile", "SimMapping", "SimLock"]


class _Inode:
    __slots__ = ("durable", "data", "pending", "mapbuf", "maprefs")

    def __init__(self) -> None:
        self.durable = bytearray()
        self.data = bytearray()  # current view, except the mapped overlay
        self.pending: list[tuple] = []
        self.mapbuf: bytearray | None = None
        self.maprefs = 0

    def read(self, offset: int, n: int) -> bytes:
        out = bytearray(self.data[offset : offset + n])
        if self.mapbuf is not None and offset < len(self.mapbuf):
            hi = min(offset + len(out), len(self.mapbuf))
            out[: hi - offset] = self.mapbuf[offset:hi]
        return bytes(out)

    def do(self, op: tuple) -> None:
        apply_op(self.data, op)
        self.pending.append(op)
        if op[0] == "write" and self.mapbuf is not None:
            lo, hi = op[1], min(op[1] + len(op[2]), len(self.mapbuf))
            if lo < hi:  # a write through the fd is visible in the mapping
                self.mapbuf[lo:hi] = op[2][: hi - lo]

    def sync(self) -> None:
        for op in self.pending:
            apply_op(self.durable, op)
        self.pending.clear()

    def materialized(self) -> bytearray:
        img = bytearray(self.data)
        if self.mapbuf is not None:
            img[: len(self.mapbuf)] = self.mapbuf
        return img


class SimFile(File):
    """A `File` of the crash simulator: reads see every write, durability waits for fsync."""

    def __init__(self, fs: "SimFS", path: str, inode: _Inode, direct: bool):
        self.path = path
        self.direct = direct
        self._fs = fs
        self._inode = inode
        self._epoch = fs._epoch
        self._closed = False

    def _enter(self, mutating: bool, offset: int = 0, length: int = 0) -> _Inode:
        fs = self._fs
        fs._check()
        if self._closed or self._epoch != fs._epoch:
            raise DiskIOError(errno.EBADF, "file closed or opened before a crash", self.path)
        if self.direct and fs.direct and (offset % ALIGNMENT or length % ALIGNMENT):
            # Mirror the kernel's O_DIRECT EINVAL so alignment bugs show up
            # in simulation, not only on the real disk.
            raise DiskIOError(errno.EINVAL, f"O_DIRECT needs {ALIGNMENT}-aligned offset and length", self.path)
        if mutating:
            fs._count_io(self.path)
        return self._inode

    def pread(self, n: int, offset: int) -> bytes:
        with self._fs._lock:
            # Reads only need an aligned offset: PosixFile.pread bounces an
            # unaligned length through an aligned buffer.
            return self._enter(False, offset, 0).read(offset, n)

    def pread_into(self, buf, offset: int) -> int:
        view = memoryview(buf).cast("B")
        with self._fs._lock:
            got = self._enter(False, offset, len(view)).read(offset, len(view))
        view[: len(got)] = got
        return len(got)

    def pwrite(self, data, offset: int) -> int:
        payload = bytes(data)
        with self._fs._lock:
            self._enter(True, offset, len(payload)).do(("write", offset, payload))
        return len(payload)

    def fsync(self) -> None:
        with self._fs._lock:
            self._enter(True).sync()

    def fdatasync(self) -> None:
        # Treated as fsync: ext4's fdatasync also persists the size changes
        # the data needs, which is all the difference could matter for here.
        self.fsync()

    def size(self) -> int:
        with self._fs._lock:
            return len(self._enter(False).data)

    def truncate(self, n: int) -> None:
        with self._fs._lock:
            inode = self._enter(False)
            if inode.mapbuf is not None and n < len(inode.mapbuf):
                raise DiskIOError(errno.EBUSY, "cannot truncate below a live mapping", self.path)
            self._fs._count_io(self.path)
            inode.do(("truncate", n, None))

    def preallocate(self, n: int) -> None:
        with self._fs._lock:
            self._enter(True).do(("extend", n, None))

    def close(self) -> None:
        # Closing is not I/O: it never raises, even after SimulatedCrash,
        # so cleanup in `finally` blocks does not mask the original crash.
        self._closed = True


class SimMapping(Mapping):
    """A `Mapping` of the crash simulator: bytes written reach the file model at `publish`."""

    def __init__(self, fs: "SimFS", path: str, inode: _Inode, size: int):
        self.path = path
        self.size = size
        self.buffer = inode.mapbuf
        self._fs = fs
        self._inode = inode
        self._epoch = fs._epoch
        self._closed = False

    def _enter(self, start: int, end: int) -> _Inode:
        self._check_range(start, end)
        fs = self._fs
        fs._check()
        if self._closed or self._epoch != fs._epoch:
            raise DiskIOError(errno.EBADF, "mapping closed or made before a crash", self.path)
        fs._count_io(self.path)
        return self._inode

    def publish(self, start: int, end: int) -> None:
        with self._fs._lock:
            inode = self._enter(start, end)
            if start < end:
                # The bytes already sit in the shared buffer; record them as
                # the write the page cache would eventually flush.
                op = ("write", start, bytes(inode.mapbuf[start:end]))
                apply_op(inode.data, op)
                inode.pending.append(op)

    def sync(self, start: int, end: int) -> None:
        with self._fs._lock:
            self._enter(start, end).sync()

    def close(self) -> None:
        with self._fs._lock:
            if self._closed:
                return
            self._closed = True
            inode = self._inode
            if self._epoch != self._fs._epoch or inode.mapbuf is None:
                return
            inode.maprefs -= 1
            if inode.maprefs == 0:
                # Unpublished stores stay visible (they are in the "page
                # cache") but are still absent from the pending writes.
                inode.data = inode.materialized()
                inode.mapbuf = None


class SimLock(Lock):
    """A `Lock` of the crash simulator, exclusive within its `SimFS`."""

    def __init__(self, fs: "SimFS", path: str):
        self.path = path
        self._fs = fs
        self._epoch = fs._epoch

    def release(self) -> None:
        with self._fs._lock:
            if self._epoch == self._fs._epoch and self._fs._locks.get(self.path) is self:
                del self._fs._locks[self.path]
