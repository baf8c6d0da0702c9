"""Translation of the inner layers' failures into the typed errors of `pagestore.errors`.

The one place where an OSError (the diskio layer's `DiskIOError` included)
or a `checkpoint.CheckpointerError` becomes a `pagestore.Error`: the facade
calls `translate` in the `except` clause of each public call, so the hot
paths pay nothing (a `try` costs nothing until it catches).

    OSError errno           becomes
    ENOSPC, EDQUOT          DiskFullError
    EROFS                   ReadOnlyError
    anything else           DiskIOError
    CheckpointerError       what caused it, translated; "closed" -> ClosedError
    the core's refusal      `refusal`: the failure that made the store refuse writes

The message names the operation, what the file is (the WAL, the page file,
checkpoint files, ...) and its path, then the OS's words.
"""

from __future__ import annotations

import errno as _errno
import posixpath

from pagestore import checkpoint as _checkpoint
from pagestore.diskio import layout

from . import _native
from .errors import ClosedError, DiskFullError, DiskIOError, Error, ReadOnlyError

__all__ = ["translate", "typed_class", "describe", "reraise", "refusal", "background_failure"]

_FULL = frozenset({_errno.ENOSPC, getattr(_errno, "EDQUOT", _errno.ENOSPC)})


def typed_class(err: int | None) -> type[DiskIOError]:
    """The `DiskIOError` class for OS error number `err`."""
    if err in _FULL:
        return DiskFullError
    if err == _errno.EROFS:
        return ReadOnlyError
    return DiskIOError


def describe(path: str | None) -> str:
    """What the file at `path` is to the store, in words ("the WAL segment ...")."""
    if not path:
        return "a store file"
    name = posixpath.basename(path.rstrip("/"))
    parent = posixpath.basename(posixpath.dirname(path.rstrip("/")))
    if name == layout.PAGE_FILE:
        return f"the page file {path}"
    if name == layout.LOCK:
        return f"the lock file {path}"
    if name in (layout.NEWEST, layout.NEWEST + layout.TMP_SUFFIX) and parent == layout.WAL_DIR:
        return f"the WAL's NEWEST file {path}"
    if parent == layout.WAL_DIR or name == layout.WAL_DIR:
        return f"the WAL {'directory' if name == layout.WAL_DIR else 'segment'} {path}"
    if parent == layout.CP_DIR or name == layout.CP_DIR:
        return f"the checkpoint {'directory' if name == layout.CP_DIR else 'file'} {path}"
    return path


def _from_os_error(exc: OSError, operation: str) -> DiskIOError:
    path = exc.filename
    words = exc.strerror or str(exc)
    cls = typed_class(exc.errno)
    code = f"[Errno {exc.errno}] " if exc.errno is not None else ""
    return cls(f"{operation}: {describe(path)}: {code}{words}", path=path, operation=operation,
               errno=exc.errno)


def translate(exc: BaseException, operation: str, wal=None, lsn: int = -1,
              failure: Error | None = None) -> BaseException:
    """The `pagestore.Error` to raise (from `exc`) for `exc` met during `operation`.

    A `pagestore.Error` is returned unchanged, as is anything that is not a
    failure of the store (a BaseException such as KeyboardInterrupt, a
    TypeError of the caller's argument). With `wal` (a `wal.Wal`) and the
    end `lsn` of the write's record: when the log had handed that record to
    the OS before it failed and could not blank it, the error says the
    write is in doubt. `failure`: the store's own (a checkpoint's), for a
    write the core refused when the log has none.
    """
    if isinstance(exc, _native.NativeError) and exc.code == _native.PS_E_IO and "refused" in str(exc):
        # the core refused the write (its fence: the log or a checkpoint failed), nothing applied
        cause = wal.failure if wal is not None else None
        return refusal(translate(cause, operation) if cause is not None else failure, operation)
    if isinstance(exc, Error):
        return exc
    if isinstance(exc, OSError):
        err = _from_os_error(exc, operation)
        if wal is not None and lsn >= 0 and wal.in_doubt(lsn):
            err.in_doubt = True
            why = ("the store could not take the write back from memory: until it is reopened "
                   "and after a crash" if getattr(wal, "undo_failed", False) else
                   "the disk refused to take the record back too: after a crash")
            err.args = (f"{err}; {why} this write may or may not be there",)
        return err
    if isinstance(exc, _checkpoint.CheckpointerError):
        cause = exc.__cause__
        if cause is not None and cause is not exc:
            inner = translate(cause, operation)
            if isinstance(inner, Error):
                return inner
        if "closed" in str(exc):
            return ClosedError(f"{operation}: the store is closed")
        return Error(f"{operation}: {exc}")
    return exc


def reraise(exc: BaseException, operation: str, wal=None, lsn: int = -1, failure: Error | None = None):
    """Raise `translate(exc, operation, wal, lsn, failure)`, chained to `exc` when it is a new error."""
    err = translate(exc, operation, wal, lsn, failure)
    if err is exc:
        raise exc
    raise err from exc


def refusal(failure: Error | None, operation: str) -> Error:
    """The error a write meets in the FAILED state: the failure's type and file,
    saying the store refuses writes since then."""
    text = f"{operation}: refused: the store failed earlier and takes no writes until it is reopened " \
           f"({failure})"
    if isinstance(failure, DiskIOError):
        return type(failure)(text, path=failure.path, operation=operation, errno=failure.errno)
    return Error(text)


def background_failure(exc: BaseException | None, operation: str) -> Error:
    """The error a write meets once after a background checkpoint failed: the
    checkpoint's type and file, saying this write was not applied."""
    err = translate(exc, "checkpoint") if exc is not None else Error("checkpoint failed")
    text = f"{operation}: not applied: a background checkpoint failed ({err}); the store retries " \
           f"it with backoff and takes writes again from the next call"
    if isinstance(err, DiskIOError):
        return type(err)(text, path=err.path, operation=operation, errno=err.errno)
    return Error(text)
