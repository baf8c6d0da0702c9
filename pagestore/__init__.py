"""pagestore: an embedded, durable, ordered key-value store.

    import pagestore
    with pagestore.open("data/") as db:
        db[b"k"] = b"v"

This file is the whole public surface, re-exported explicitly. The layers
behind it (DESIGN.md §2): `pagestore.database` is the facade, and the
`Engine` behind it (`pagestore.engine`) holds the C core (`pagestore._native`,
the only importer of the cffi extension), the logical WAL (`wal`), the
checkpointer (`checkpoint`), throttling (`throttling`) and the file-system
layer (`diskio`); opening runs crash recovery (`recovery.open_store`). Those are
imported on first use, so `import pagestore` stays cheap and a tool that only
needs the errors does not load the engine.
"""

from __future__ import annotations

from ._version import __version__ as __version__
from .config import Config as Config
from .errors import ClosedError as ClosedError
from .errors import ConfigError as ConfigError
from .errors import ConflictError as ConflictError
from .errors import CorruptionError as CorruptionError
from .errors import EncryptionError as EncryptionError
from .errors import DiskFullError as DiskFullError
from .errors import DiskIOError as DiskIOError
from .errors import Error as Error
from .errors import KeyTooLargeError as KeyTooLargeError
from .errors import NotAStoreError as NotAStoreError
from .errors import ReadOnlyError as ReadOnlyError
from .errors import RecoveryNeededError as RecoveryNeededError
from .errors import SnapshotTooOldError as SnapshotTooOldError
from .errors import StoreLockedError as StoreLockedError
from .errors import StoreNotFoundError as StoreNotFoundError
from .errors import TransactionTooLargeError as TransactionTooLargeError
from .errors import ValueTooLargeError as ValueTooLargeError

__all__ = [
    "__version__", "open", "run_transaction", "Database", "Transaction", "Snapshot", "Config", "Cursor", "State",
    "Error", "ClosedError", "ConfigError", "ConflictError", "SnapshotTooOldError", "CorruptionError",
    "EncryptionError", "KeyTooLargeError", "StoreLockedError", "TransactionTooLargeError",
    "ValueTooLargeError", "NotAStoreError", "ReadOnlyError", "RecoveryNeededError", "StoreNotFoundError",
    "DiskIOError", "DiskFullError",
]


def open(path, **options):  # noqa: A001 - the public name
    """Open the store in directory `path`, creating it unless `create=False`;
    `read_only=True` reads without writing a file. Options: docs/options.md."""
    from .database import open as _open
    return _open(path, **options)


def __dir__():
    """The module's names, with those `__getattr__` imports on first use."""
    return sorted(set(globals()) | set(__all__) | {"aio"})


# Names imported on first use, and the module that has them: `import
# pagestore` stays cheap (no C core loaded until a store is opened).
_LAZY = {"Database": "database", "State": "database", "Transaction": "transaction",
         "run_transaction": "transaction", "Snapshot": "snapshot", "Cursor": "cursor"}


def __getattr__(name):
    import importlib
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    if name == "aio":                   # the asyncio surface, `pagestore.aio.open`
        return importlib.import_module(__name__ + ".aio")
    raise AttributeError(f"module 'pagestore' has no attribute {name!r}")
