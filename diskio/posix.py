"""PosixFS: the real file system through os-level file descriptors.

No Python file objects: every read and write is a positional os.pread /
os.preadv / os.pwrite on a raw fd, so there is no user-space buffering that
could make "written" mean anything other than "handed to the kernel". With
`PosixFS(direct=True)`, files opened with `direct=True` bypass the page cache
(O_DIRECT); their buffers, offsets and lengths must be 4096-aligned
(`diskio.aligned_buffer`). Crash points armed here SIGKILL the process, so a
parent test process can observe exactly what a kill -9 leaves on disk.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import signal
import weakref

from .aligned import aligned_buffer, is_aligned, round_up
from .base import File, FileSystem, Lock, Mapping
from .crashpoints import check_crash_point, parse_crash_spec
from .errors import DiskIOError, LockedError, SimulatedCrash, make_error, wrap_os_error

__all__ = ["PosixFS", "PosixFile", "PosixMapping", "PosixLock", "CRASH_ENV"]

CRASH_ENV = "PAGESTORE_CRASH_POINT"

_FALLOC_FL_KEEP_SIZE = 1


def _libc_fallocate():
    """libc's fallocate(int, int, off_t, off_t), or None (not Linux/glibc)."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    fn.restype = ctypes.c_int
    return fn


_fallocate = _libc_fallocate()
_ACTIONS = ("kill", "raise")


class _errors:
    """Re-raise any OSError from the block as a DiskIOError naming `path`.

    A class, not a @contextmanager: a generator-based one cost ~1.5 us per
    use, twice per commit on the fsync path (pwrite, fdatasync)."""

    __slots__ = ("path",)

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        return None

    def __exit__(self, _type, exc, _tb):
        if exc is None or isinstance(exc, DiskIOError) or not isinstance(exc, OSError):
            return False
        raise wrap_os_error(exc, self.path) from exc


class PosixFile(File):
    """A `File` over a raw file descriptor (`direct`: opened O_DIRECT)."""

    def __init__(self, path: str, fd: int, direct: bool):
        self.path = path
        self.direct = direct
        self._fd = fd

    def _live_fd(self) -> int:
        if self._fd < 0:
            raise DiskIOError(errno.EBADF, "file is closed", self.path)
        return self._fd

    def fileno(self) -> int:
        """The file descriptor; DiskIOError(EBADF) once closed."""
        return self._live_fd()

    def pread(self, n: int, offset: int) -> bytes:
        if self.direct:
            # O_DIRECT needs an aligned destination; bounce through one.
            buf = aligned_buffer(round_up(n))
            got = self.pread_into(buf, offset)
            return bytes(buf[: min(got, n)])
        fd = self._live_fd()
        parts = []
        with _errors(self.path):
            while n > 0:
                chunk = os.pread(fd, n, offset)
                if not chunk:
                    break  # end of file: short read is the answer
                parts.append(chunk)
                n -= len(chunk)
                offset += len(chunk)
        return b"".join(parts)

    def pread_into(self, buf, offset: int) -> int:
        fd = self._live_fd()
        view = memoryview(buf).cast("B")
        total = 0
        with _errors(self.path):
            while total < len(view):
                got = os.preadv(fd, [view[total:]], offset + total)
                if got == 0:
                    break
                total += got
        return total

    def pwrite(self, data, offset: int) -> int:
        fd = self._live_fd()
        view = memoryview(data).cast("B")
        if self.direct and len(view) and not is_aligned(view):
            # A bytes object is never page aligned; copy it rather than make
            # every caller allocate. Offset and length alignment remain the
            # caller's job (the kernel reports EINVAL, wrapped below).
            bounce = aligned_buffer(len(view))
            bounce[:] = view
            view = bounce
        total = 0
        with _errors(self.path):
            while total < len(view):
                total += os.pwrite(fd, view[total:], offset + total)
        return total

    def fsync(self) -> None:
        with _errors(self.path):
            os.fsync(self._live_fd())

    def fdatasync(self) -> None:
        with _errors(self.path):
            os.fdatasync(self._live_fd())

    def size(self) -> int:
        with _errors(self.path):
            return os.fstat(self._live_fd()).st_size

    def truncate(self, n: int) -> None:
        with _errors(self.path):
            os.ftruncate(self._live_fd(), n)

    def allocate(self, offset: int, length: int) -> None:
        """fallocate(FALLOC_FL_KEEP_SIZE) through libc: glibc's posix_fallocate
        emulates an unsupported call by writing bytes, which could race a
        writer of the range; fallocate(2) itself never changes a byte."""
        if _fallocate is None or length <= 0:
            return
        fd = self._live_fd()
        if _fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) != 0:
            err = ctypes.get_errno()
            if err not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise make_error(err, f"cannot allocate {length} bytes at {offset}", self.path)

    def preallocate(self, n: int) -> None:
        """Ensure the file is at least `n` bytes with its blocks allocated."""
        fd = self._live_fd()
        with _errors(self.path):
            if n <= os.fstat(fd).st_size:
                return
            try:
                os.posix_fallocate(fd, 0, n)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                # File systems without fallocate: extend with a sparse tail.
                os.ftruncate(fd, n)

    def drop_cache(self, *, flush_first: bool = False) -> None:
        if flush_first:
            self.fdatasync()   # DONTNEED only drops clean pages
        try:
            os.posix_fadvise(self._live_fd(), 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass               # only a hint

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with _errors(self.path):
                os.close(fd)


class PosixMapping(Mapping):
    """MAP_SHARED mapping: `buffer` is the mmap object itself (the page cache)."""

    def __init__(self, path: str, fd: int, size: int):
        self.path = path
        self.size = size
        self._fd = fd
        with _errors(path):
            self.buffer = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)

    def publish(self, start: int, end: int) -> None:
        # Stores into a shared mapping already are in the page cache, which
        # is what survives a process kill; nothing to record.
        self._check_range(start, end)

    def sync(self, start: int, end: int) -> None:
        self._check_range(start, end)
        if self._fd < 0:
            raise DiskIOError(errno.EBADF, "mapping is closed", self.path)
        if start == end:
            return
        # msync(MS_SYNC) wants a page-aligned start; widen the range down.
        lo = start - start % mmap.PAGESIZE
        with _errors(self.path):
            self.buffer.flush(lo, end - lo)

    def close(self) -> None:
        """Unmap and close; raises BufferError while views of `buffer` exist."""
        if self._fd < 0:
            return
        self.buffer.close()
        fd, self._fd = self._fd, -1
        with _errors(self.path):
            os.close(fd)


class PosixLock(Lock):
    """An flock on a file, held until `release()`; a forked child never holds it.

    An flock belongs to the open file description, which fork shares: while a
    child keeps its copy of the descriptor, the lock outlives the parent's
    release, and nobody can take it until every such child exits. So a child
    closes its copies right after fork (never flock(LOCK_UN), which would
    release the parent's lock too); O_CLOEXEC does the same across exec. And
    `release()` unlocks before it closes, because a child that has not yet
    been scheduled to run its fork hook still shares the description.
    """

    def __init__(self, path: str, fd: int):
        self.path = path
        self._fd = fd
        _HELD.add(self)

    def release(self) -> None:
        fd, self._fd = self._fd, -1
        _HELD.discard(self)
        if fd >= 0:
            # The file stays as a harmless marker (removing it would race a
            # concurrent locker).
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def _drop_in_child(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


# Locks held by this process, for the fork hook below.
_HELD: "weakref.WeakSet[PosixLock]" = weakref.WeakSet()


def _drop_locks_in_child() -> None:
    """After fork, in the child: close every inherited lock descriptor, so the
    parent's release (or exit) frees the lock whatever the child does."""
    for lock in list(_HELD):
        lock._drop_in_child()
    _HELD.clear()


os.register_at_fork(after_in_child=_drop_locks_in_child)


class PosixFS(FileSystem):
    """The real file system. `direct=True` enables O_DIRECT for files opened direct."""

    def __init__(self, direct: bool = False):
        super().__init__()
        self.direct = direct
        # A parent process tells a child where to die through the
        # environment, since it cannot call arm() inside the child.
        spec = os.environ.get(CRASH_ENV)
        if spec:
            name, hit = parse_crash_spec(spec)
            self._points.arm(name, hit, "kill")

    def arm(self, name: str, action: str = "kill", hit: int = 1) -> None:
        """Arm crash point `name` to fire on its `hit`-th pass from now.

        action "kill" SIGKILLs this process (a kill -9 test); "raise" raises
        SimulatedCrash (for in-process tests of the arming itself).
        """
        check_crash_point(name)
        if action not in _ACTIONS:
            raise ValueError(f"unknown crash action {action!r}; expected one of {_ACTIONS}")
        self._points.arm(name, hit, action)

    def _fire(self, name: str, action: object) -> None:
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise SimulatedCrash(f"crash point {name}")

    def open(self, path: str, *, create: bool = False, truncate: bool = False, direct: bool = False) -> PosixFile:
        flags = os.O_RDWR | os.O_CLOEXEC
        if create:
            flags |= os.O_CREAT
        if truncate:
            flags |= os.O_TRUNC
        use_direct = bool(direct and self.direct)
        if use_direct:
            flags |= os.O_DIRECT
        with _errors(path):
            fd = os.open(path, flags, 0o644)
        return PosixFile(path, fd, use_direct)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        with _errors(path):
            return sorted(os.listdir(path))

    def makedirs(self, path: str) -> None:
        with _errors(path):
            os.makedirs(path, exist_ok=True)

    def remove(self, path: str) -> None:
        with _errors(path):
            os.remove(path)

    def rename(self, src: str, dst: str) -> None:
        with _errors(src):
            os.rename(src, dst)

    def fsync_dir(self, path: str) -> None:
        # A directory's entries (creations, renames) are made durable by
        # fsyncing the directory itself, which needs a read-only fd.
        with _errors(path):
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def size(self, path: str) -> int:
        with _errors(path):
            return os.stat(path).st_size

    def map(self, path: str, size: int) -> PosixMapping:
        if size <= 0:
            raise ValueError(f"mapping size must be > 0, got {size}")
        with _errors(path):
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            actual = os.fstat(fd).st_size
            if actual < size:
                raise make_error(errno.EINVAL, f"file is {actual} bytes, cannot map {size}", path)
            return PosixMapping(path, fd, size)
        except BaseException:
            os.close(fd)
            raise

    def lock(self, path: str) -> PosixLock:
        with _errors(path):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            # flock locks belong to the open file description, so a second
            # lock() in this same process conflicts too, as it should.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockedError(path) from None
        except OSError as exc:
            os.close(fd)
            raise wrap_os_error(exc, path) from exc
        return PosixLock(path, fd)

