"""The abstract interface of docs/diskio-api.md, shared by PosixFS and SimFS.

The project's code is written against these classes only, so every protocol
(WAL flush, checkpoint, recovery) runs unchanged on the real file system and
on the crash simulator. Helpers that are pure compositions of the primitive
operations (`write_atomic`) live here so both implementations perform the
exact same sequence of operations, which is what the simulator then damages.
"""

from __future__ import annotations

import posixpath
from abc import ABC, abstractmethod

from .crashpoints import CrashPointTable

__all__ = ["FileSystem", "File", "Mapping", "Lock"]


class File(ABC):
    """An open file. Offsets are absolute; there is no file position."""

    path: str

    @abstractmethod
    def pread(self, n: int, offset: int) -> bytes:
        """Up to `n` bytes at `offset` (fewer only at the end of the file)."""

    @abstractmethod
    def pread_into(self, buf, offset: int) -> int:
        """Read into the writable buffer `buf` from `offset`; the number of bytes read."""

    @abstractmethod
    def pwrite(self, data, offset: int) -> int:
        """Write the bytes-like `data` at `offset` (not durable until fsync); bytes written."""

    @abstractmethod
    def fsync(self) -> None:
        """Make the file's data and metadata durable."""

    @abstractmethod
    def fdatasync(self) -> None:
        """Make the file's data durable (and the size, if it changed)."""

    @abstractmethod
    def size(self) -> int:
        """The file's size in bytes."""

    @abstractmethod
    def truncate(self, n: int) -> None:
        """Set the file's size to `n` bytes (cut or zero-extended)."""

    @abstractmethod
    def preallocate(self, n: int) -> None:
        """Make the file at least `n` bytes, blocks allocated; never shrinks it."""

    def allocate(self, offset: int, length: int) -> None:
        """Reserve disk blocks for bytes [offset, offset + length) without
        changing the file's size or any byte of it, so a later write there
        does not fail for space. A hint: nothing where the file system (or
        the simulator) has no such call."""

    def drop_cache(self, *, flush_first: bool = False) -> None:
        """Evict the file's clean pages from the OS page cache (with
        `flush_first`, write its dirty ones back first so they go too). A
        hint that changes no byte: nothing where there is no such cache (the
        simulator)."""

    @abstractmethod
    def close(self) -> None:
        """Release the handle; using it afterwards raises DiskIOError(EBADF)."""

    def __enter__(self) -> "File":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Mapping(ABC):
    """A shared writable view of bytes [0, size) of a file."""

    buffer: object
    size: int

    @abstractmethod
    def publish(self, start: int, end: int) -> None:
        """Bytes [start, end) of the buffer were written: hand them to the file (a no-op where
        the mapping is the page cache; the simulator records an unsynced write)."""

    @abstractmethod
    def sync(self, start: int, end: int) -> None:
        """Make bytes [start, end) durable."""

    @abstractmethod
    def close(self) -> None:
        """Release the handle; using it afterwards raises DiskIOError(EBADF)."""

    def _check_range(self, start: int, end: int) -> None:
        if not 0 <= start <= end <= self.size:
            raise ValueError(f"range [{start},{end}) outside mapping of {self.size} bytes")

    def __enter__(self) -> "Mapping":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Lock(ABC):
    """An exclusive lock held until `release()` (or `close()`)."""

    path: str

    @abstractmethod
    def release(self) -> None:
        """Give the lock up (the lock file stays)."""

    def close(self) -> None:
        """The same as `release()`."""
        self.release()

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class FileSystem(ABC):
    """One file-system layer; see docs/diskio-api.md for the contract."""

    def __init__(self) -> None:
        self._points = CrashPointTable()

    # -- namespace -----------------------------------------------------
    @abstractmethod
    def open(self, path: str, *, create: bool = False, truncate: bool = False, direct: bool = False) -> File:
        """Open `path` for reading and writing (`direct`: O_DIRECT where the file system has it)."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether `path` names a file or directory."""

    @abstractmethod
    def listdir(self, path: str) -> list[str]:
        """The names in directory `path`, sorted."""

    @abstractmethod
    def makedirs(self, path: str) -> None:
        """Create directory `path` and its missing parents (no error if it exists)."""

    @abstractmethod
    def remove(self, path: str) -> None:
        """Remove the file `path` (durable once its directory is fsynced)."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Rename `src` to `dst`, atomically replacing it (durable once the directory is fsynced)."""

    @abstractmethod
    def fsync_dir(self, path: str) -> None:
        """Make directory `path`'s entries (creations, removals, renames) durable."""

    @abstractmethod
    def size(self, path: str) -> int:
        """The size of file `path` in bytes."""

    @abstractmethod
    def map(self, path: str, size: int) -> Mapping:
        """A shared writable `Mapping` of bytes [0, size) of `path`, which must be at least that long."""

    @abstractmethod
    def lock(self, path: str) -> Lock:
        """Take the exclusive lock `path` without blocking; `LockedError` if it is held."""

    # -- crash points --------------------------------------------------
    def crash_point(self, name: str) -> None:
        """Pass the named crash point: a no-op unless armed; ValueError if unknown."""
        self._points.passing(name, self._fire)

    @abstractmethod
    def _fire(self, name: str, action: object) -> None: ...

    def disarm(self, name: str | None = None) -> None:
        """Disarm one crash point, or all of them."""
        self._points.disarm(name)

    @property
    def crash_points_armed(self) -> bool:
        """Whether any crash point is armed (read without a lock): a path that
        can skip its crash points runs its faster way only while none is."""
        return self._points.any_armed()

    @property
    def crash_point_hits(self) -> dict[str, int]:
        """How many times each crash point has been passed (armed or not)."""
        return dict(self._points.hits)

    # -- compositions ---------------------------------------------------
    def write_atomic(self, path: str, data, *, crash_point: str | None = None) -> None:
        """Replace `path` with `data` atomically and durably.

        Temp file, write, fsync, close, rename over `path`, fsync the parent
        directory: after a crash the path holds either the old or the new
        content, never a mixture. `crash_point`, if given, is passed after the
        temp file is durable and before the rename (the gap in which a crash
        leaves only a stray temp file behind).
        """
        tmp = path + ".tmp"
        f = self.open(tmp, create=True, truncate=True)
        try:
            f.pwrite(data, 0)
            f.fsync()
        finally:
            f.close()
        if crash_point is not None:
            self.crash_point(crash_point)
        self.rename(tmp, path)
        self.fsync_dir(posixpath.dirname(path) or ".")
