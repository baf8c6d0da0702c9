"""The typed errors of the public API.

Every failure a user can meet is one of these (or a plain TypeError for a key
or value that is not bytes-like). Lower layers raise their own errors; the
facade re-raises them as these, naming the file involved.
"""

from __future__ import annotations


class Error(Exception):
    """Base of every pagestore error."""


class ClosedError(Error):
    """The store (or the transaction) is closed."""


class CorruptionError(Error):
    """A file failed a checksum, magic or structural check. `path` names it."""

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
    """A wrong key, or a tampered encrypted byte. `path` names the file."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path
