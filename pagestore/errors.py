"""The typed errors of the public API: the error model (docs/errors.md).

Every failure a user can meet from a public call is an `Error` subclass (or
a plain TypeError for a key or value that is not bytes-like); no OSError and
no error of an inner layer escapes. Lower layers raise their own errors;
pagestore/faults.py translates them, in one place, at the public boundary.

A failed file operation is a `DiskIOError`, which says what the store was
doing (`operation`: "put", "checkpoint", "close", ...), which file
(`path`) and the OS error number (`errno`):

    Error
      DiskIOError          EIO and every other errno: the disk failed
        DiskFullError      ENOSPC, EDQUOT: no space (recoverable once space returns)
        ReadOnlyError      EROFS: the file system is (or was remounted) read-only
      CorruptionError      a checksum, magic or structural check failed
      ...                  the others below

What the store does after one (docs/errors.md): a write whose log record
could not be written or synced raises, is not acknowledged, and puts the
store in the failed state -- every later write raises the same error
(`Database.failure`), reads keep working, `close()` releases everything
without writing, and reopening recovers what is durable. A checkpoint that
fails raises from `checkpoint()` and leaves the previous one intact.
"""

from __future__ import annotations


class Error(Exception):
    """Base of every pagestore error."""


class ClosedError(Error):
    """The store (or the transaction) is closed."""


class CorruptionError(Error):
    """A file failed a checksum, magic or structural check. `path` names it;
    `page` is the page id at fault when the C core reported one (else None)."""

    page: int | None = None

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path


class ConfigError(Error, ValueError):
    """An option has a bad value or does not match the store on disk. `option` names it."""

    def __init__(self, message: str, option: str | None = None):
        super().__init__(message)
        self.option = option


class StoreLockedError(Error):
    """Another process has the store open."""


class KeyTooLargeError(Error, ValueError):
    """A key longer than MAX_KEY bytes."""


class ValueTooLargeError(Error, ValueError):
    """A value longer than MAX_VALUE bytes."""


class TransactionTooLargeError(Error):
    """A transaction needs more page memory or checkpoint buffer than the store has."""


class EncryptionError(Error):
    """A wrong key, or a tampered encrypted byte. `path` names the file; `page`
    is the page id at fault when the C core reported one (else None)."""

    page: int | None = None

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path


class ConflictError(Error):
    """A transaction's commit found that a key it read (or a range it scanned)
    was changed by another commit after it read it. Nothing of the transaction
    was applied: run it again (docs/transactions.md)."""


class SnapshotTooOldError(Error):
    """A snapshot was dropped because the writes made since it was taken
    outgrew the `snapshot_memory` option, or compact() replaced the store's
    files after it was taken; take a new one."""


class DiskIOError(Error):
    """A file operation failed (EIO, or any errno without a class of its own).

    `operation` is what the store was doing ("put", "checkpoint", "close",
    ...), `path` the file or directory, `errno` the OS error number (None
    when the failure was not an OS error). `in_doubt` is True for a write
    whose log record had reached the operating system when its sync failed
    and the disk then refused to have it blanked, or that the store could
    not take back from memory: until reopen and after a crash it may or
    may not be there (PostgreSQL's "commit status unknown"); every other
    write that raised is not applied."""

    in_doubt: bool = False

    def __init__(self, message: str, path: str | None = None, operation: str | None = None,
                 errno: int | None = None):
        super().__init__(message)
        self.path, self.operation, self.errno = path, operation, errno


class DiskFullError(DiskIOError):
    """No space left (ENOSPC) or the quota is exhausted (EDQUOT). Writes fail
    cleanly; once space returns the store takes writes again (after a
    reopen when the log could not be written, docs/errors.md)."""


class ReadOnlyError(DiskIOError):
    """The file system is read-only (EROFS), e.g. remounted so after an error."""


class StoreNotFoundError(Error):
    """`open(path, create=False)` (or `read_only=True`) found no store at `path`
    (it names it); nothing was created."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path


class NotAStoreError(Error):
    """The directory holds files that are not a pagestore store's (another
    database's, or anyone's); `found` lists them. Nothing was changed."""

    def __init__(self, message: str, path: str | None = None, found: tuple = ()):
        super().__init__(message)
        self.path, self.found = path, tuple(found)


class RecoveryNeededError(Error):
    """A `read_only=True` open found a store that was not closed cleanly:
    recovering it writes files, so it needs one writable open first."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path
