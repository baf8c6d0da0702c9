"""Exception types of the diskio layer.

Every failure of a real or simulated file operation surfaces as a
`DiskIOError`, an `OSError` that names the path it concerns, so a caller
higher up can report *which* file failed without threading paths through its
own error handling. `SimulatedCrash` is deliberately a `BaseException`: code
under test that writes `except Exception:` to tolerate I/O errors must not be
able to swallow the simulated death of its process.
"""

from __future__ import annotations

import errno as _errno

__all__ = [
    "DiskIOError",
    "NotFoundError",
    "FileExistsDiskError",
    "LockedError",
    "SimulatedCrash",
    "wrap_os_error",
]


class DiskIOError(OSError):
    """An I/O failure on `path` (also available as the OSError `filename`)."""

    def __init__(self, err: int, message: str, path: str | None = None):
        super().__init__(err, message, path)

    @property
    def path(self) -> str | None:
        """The file the failed operation was on (the same as `filename`)."""
        return self.filename


class NotFoundError(DiskIOError, FileNotFoundError):
    """The path does not exist (ENOENT); also catchable as FileNotFoundError."""


class FileExistsDiskError(DiskIOError, FileExistsError):
    """The path already exists (EEXIST); also catchable as FileExistsError."""


class LockedError(DiskIOError):
    """Another holder already has the exclusive lock on `path`."""

    def __init__(self, path: str, message: str = "already locked by another holder"):
        super().__init__(_errno.EWOULDBLOCK, message, path)


class SimulatedCrash(BaseException):
    """Raised by SimFS at an armed crash point or armed I/O operation.

    After it has been raised once, the SimFS raises it again from every
    operation until `SimFS.crash()` turns the state into a post-crash disk.
    """


def _classify(err: int) -> type[DiskIOError]:
    # Keep the standard OSError subclass hierarchy usable by callers
    # (`except FileNotFoundError`) while still carrying the DiskIOError type.
    if err == _errno.ENOENT:
        return NotFoundError
    if err == _errno.EEXIST:
        return FileExistsDiskError
    return DiskIOError


def make_error(err: int, message: str, path: str | None) -> DiskIOError:
    """Build the DiskIOError subclass matching `err`."""
    return _classify(err)(err, message, path)


def wrap_os_error(exc: OSError, path: str | None) -> DiskIOError:
    """Convert an OSError raised by the os module into a DiskIOError.

    An exception that already is a DiskIOError is returned unchanged so that
    nested helpers do not re-wrap (and lose) the original path.
    """
    if isinstance(exc, DiskIOError):
        return exc
    err = exc.errno if exc.errno is not None else _errno.EIO
    message = exc.strerror or str(exc)
    return make_error(err, message, path if path is not None else exc.filename)
