"""pagestore: an embedded, durable, ordered key-value store.

    import pagestore
    with pagestore.open("data/") as db:
        db[b"k"] = b"v"

This file is the whole public surface, re-exported explicitly. The layers
behind it (DESIGN.md §2): `pagestore.database` orchestrates the C core
(`pagestore._native`, the only importer of the cffi extension), the logical
WAL (`wal`), the checkpointer (`checkpoint`), crash recovery (`recovery`),
throttling (`throttling`) and the file-system layer (`diskio`). Those are
imported on first use, so `import pagestore` stays cheap and a tool that only
needs the errors does not load the engine.
"""

from __future__ import annotations

from ._version import __version__ as __version__
from .config import Config as Config
from .errors import ClosedError as ClosedError
from .errors import ConfigError as ConfigError
from .errors import CorruptionError as CorruptionError
from .errors import EncryptionError as EncryptionError
from .errors import Error as Error
from .errors import KeyTooLargeError as KeyTooLargeError
from .errors import StoreLockedError as StoreLockedError
from .errors import TransactionTooLargeError as TransactionTooLargeError
from .errors import ValueTooLargeError as ValueTooLargeError

__all__ = [
    "__version__", "open", "Database", "Transaction", "Config",
    "Error", "ClosedError", "ConfigError", "CorruptionError", "EncryptionError",
    "KeyTooLargeError", "StoreLockedError", "TransactionTooLargeError", "ValueTooLargeError",
]


def open(path, **options):  # noqa: A001 - the public name
    """Open or create the store in directory `path`; see docs/options.md for options."""
    from .database import open as _open
    return _open(path, **options)


def __getattr__(name):
    if name == "Database":
        from .database import Database
        return Database
    if name == "Transaction":
        from .transaction import Transaction
        return Transaction
    raise AttributeError(f"module 'pagestore' has no attribute {name!r}")
