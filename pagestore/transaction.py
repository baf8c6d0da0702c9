"""Transactions: buffered writes applied as one atomic batch at commit.

A transaction keeps its writes in Python until it commits; reads through the
transaction see them first (read-your-writes), and its scans merge them with
the store's. Commit packs the writes into one C call, which applies them under
the tree lock (no reader sees half of them) and logs them with one txid and a
COMMIT record (a crash keeps all or none of them), so one commit costs one
WAL flush. Leaving the `with` block by an exception rolls back: nothing was
applied, so nothing needs undoing.

Threads may share a transaction: a write that returned is in the commit, and
one that comes at or after the commit raises ClosedError (a lock orders them;
without it a put racing commit() could return and be dropped).
"""

from __future__ import annotations

import threading

from .errors import ClosedError

_DELETED = object()


class Transaction:
    def __init__(self, db):
        self._db = db
        self._writes: dict[bytes, object] = {}
        self._open = True
        self._lock = threading.Lock()

    # -- the dict-like surface ---------------------------------------------
    def put(self, key, value) -> None:
        self._check_open()
        key, value = self._db._key(key), self._db._value(value)
        with self._lock:
            self._check_open()
            self._writes[key] = value

    def get(self, key, default=None):
        self._check_open()
        key = self._db._key(key)
        v = self._writes.get(key)
        if v is None:
            return self._db.get(key, default)
        return default if v is _DELETED else v

    def delete(self, key) -> bool:
        self._check_open()
        key = self._db._key(key)
        existed = self.get(key, _DELETED) is not _DELETED
        with self._lock:
            self._check_open()
            self._writes[key] = _DELETED
        return existed

    def __setitem__(self, key, value):
        self.put(key, value)

    def __getitem__(self, key):
        v = self.get(key, _DELETED)
        if v is _DELETED:
            raise KeyError(key)
        return v

    def __delitem__(self, key):
        if not self.delete(key):
            raise KeyError(key)

    def __contains__(self, key) -> bool:
        return self.get(key, _DELETED) is not _DELETED

    def scan(self, start=None, stop=None, *, prefix=None, reverse=False):
        """The store's scan with this transaction's writes merged in."""
        self._check_open()
        lo, hi = self._db._bounds(start, stop, prefix)
        mine = sorted(k for k in self._writes
                      if (lo is None or k >= lo) and (hi is None or k < hi))
        if reverse:
            mine.reverse()
        base = self._db.scan(start, stop, prefix=prefix, reverse=reverse)
        i = 0
        for k, v in base:
            while i < len(mine) and ((mine[i] > k) if reverse else (mine[i] < k)):
                w = self._writes[mine[i]]
                if w is not _DELETED:
                    yield mine[i], w
                i += 1
            if i < len(mine) and mine[i] == k:
                w = self._writes[k]
                i += 1
                if w is not _DELETED:
                    yield k, w
                continue
            yield k, v
        for k in mine[i:]:
            w = self._writes[k]
            if w is not _DELETED:
                yield k, w

    # -- ending ---------------------------------------------------------------
    def commit(self) -> None:
        with self._lock:
            self._check_open()
            self._open = False
            ops = [(2, k, b"") if v is _DELETED else (1, k, v) for k, v in self._writes.items()]
        if ops:
            self._db._apply_ops(ops)

    def rollback(self) -> None:
        with self._lock:
            self._open = False
            self._writes.clear()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None and self._open:
            self.commit()
        else:
            self.rollback()
        return False

    def _check_open(self):
        if not self._open:
            raise ClosedError("transaction already committed or rolled back")
        if self._db._closed:
            raise ClosedError("store is closed")

