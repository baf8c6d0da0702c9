"""The dict-like conveniences of a `Database`, built on its public operations.

`MappingMixin` is a base class of `Database`: what py-lmdb, plyvel and
rocksdict users reach for (`get_many`, `values`, `pop`, `update`,
`setdefault`, `cursor`). Everything here goes through `get`, `put_many`,
`scan` and `transaction` (`get_many` reads its keys in one C call,
falling back to `get`), so it keeps their rules: keys and values are
bytes-like, every write is atomic and logged like any other, and a closed
store raises `ClosedError`.

Read-modify-write calls (`pop`, `setdefault`) run as a transaction and
retry on `ConflictError`, so they are exactly as atomic as a transaction:
the value `pop` returns is the one its commit removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .cursor import Cursor
from .errors import ClosedError, ConflictError

__all__ = ["MappingMixin", "pairs_of"]

_MISSING = object()

# A read-modify-write that keeps losing to other commits is retried this many
# times before its ConflictError reaches the caller.
_RMW_ATTEMPTS = 100


def pairs_of(items) -> Iterable:
    """(key, value) pairs of a mapping (anything with `keys()`, as `dict.update`
    takes it) or of an iterable of pairs."""
    if hasattr(items, "keys"):
        return ((k, items[k]) for k in items.keys())
    return items


class MappingMixin:
    """Mapping conveniences for `Database`; see the module docstring."""

    __slots__ = ()

    def get_many(self, keys, default=None) -> list:
        """The values of `keys`, in their order: `default` for a key not stored.

        One pass over `keys`; each read is atomic, the list is not a snapshot
        (use a transaction for reads that must agree with each other).
        """
        # One C call for the whole list, the GIL held (pagestore/_native/fastget.py);
        # a key it cannot serve (a page not in memory, not bytes) goes through `get`.
        self._check_open()
        keys = keys if type(keys) is list else list(keys)
        try:
            return self._fast_get_many(keys, default, self.get)
        except ClosedError as e:      # the reader's core closed under it: compact()'s swap?
            if self._swapped(e):
                return self.get_many(keys, default)
            raise

    def values(self) -> Iterator[bytes]:
        """The values in key order (a scan; see `scan` for its consistency)."""
        return (v for _, v in self.scan())

    def update(self, other=(), /) -> None:
        """Put every pair of `other` (a mapping or an iterable of (key, value)
        pairs) as one atomic batch, like `put_many`."""
        self.put_many(pairs_of(other))

    def pop(self, key, default=_MISSING):
        """Remove `key` and return the value it had; `default` (or KeyError
        when none is given) when it is not stored. Atomic: a transaction."""
        for attempt in range(_RMW_ATTEMPTS):
            try:
                with self.transaction() as tx:
                    value = tx.get(key, _MISSING)
                    if value is _MISSING:
                        break
                    tx.delete(key)
                return value
            except ConflictError:
                if attempt == _RMW_ATTEMPTS - 1:
                    raise
        if default is _MISSING:
            raise KeyError(key)
        return default

    def setdefault(self, key, default):
        """The value of `key`; if it is not stored, store `default` and return
        it. Atomic: a transaction. `default` is required (no None value)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                with self.transaction() as tx:
                    value = tx.get(key, _MISSING)
                    if value is not _MISSING:
                        return value
                    tx.put(key, default)
                return bytes(default)
            except ConflictError:
                if attempt >= _RMW_ATTEMPTS:
                    raise

    def cursor(self) -> Cursor:
        """A `Cursor` over the store, not positioned yet (call `first`, `last` or `seek`)."""
        self.scan()         # a closed store raises here, not at the first move
        return Cursor(self)
