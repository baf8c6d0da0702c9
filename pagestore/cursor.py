"""`Cursor`: walk the store's keys by hand — seek, next, prev.

A cursor is a position (a key) plus the scan it moves on. `first`, `last`,
`seek` and `seek_before` start a new scan, and so does turning around
(`prev` after `next`), from the current key; moving on in one direction
takes the next item of that scan.

Consistency, under concurrent writes: a scan is a snapshot as of its start
(`Database.scan`), so the items of one run in one direction are the store
as it was when that run began; a turn or a seek sees the store as it is
then. The keys a cursor returns in one direction are strictly increasing
(decreasing for `prev`), so a walk never repeats or skips back. A deleted
current key stays the cursor's position: `next` goes to the first key
after it. A run holds its snapshot until the cursor moves off it, is closed
or collected; if writes meanwhile outgrow the `snapshot_memory` option and
the snapshot is dropped, the cursor goes on from its key in a new scan
(seeing the newer store) instead of failing.
"""

from __future__ import annotations

from .errors import SnapshotTooOldError

__all__ = ["Cursor"]


def _after(key: bytes) -> bytes:
    """The smallest key greater than `key`."""
    return key + b"\x00"


class Cursor:
    """A position in a store's key order; made by `Database.cursor()`.

    Each move returns True when the cursor is on an item afterwards, False
    when it ran off the end (then `key`, `value` and `item` are None and
    `valid` is False). Not thread-safe: one cursor per thread.
    """

    __slots__ = ("_db", "_it", "_forward", "_item")

    def __init__(self, db):
        self._db = db
        self._it = None          # the scan the cursor moves on, or None
        self._forward = True
        self._item = None        # (key, value) at the position, or None

    # -- where it is -----------------------------------------------------------
    @property
    def valid(self) -> bool:
        """True when the cursor is on an item."""
        return self._item is not None

    @property
    def key(self):
        """The key at the position, or None."""
        return None if self._item is None else self._item[0]

    @property
    def value(self):
        """The value at the position, or None."""
        return None if self._item is None else self._item[1]

    def item(self):
        """(key, value) at the position, or None."""
        return self._item

    # -- moves -----------------------------------------------------------------
    def first(self) -> bool:
        """Go to the smallest key."""
        return self._start(self._db.scan(), True)

    def last(self) -> bool:
        """Go to the largest key."""
        return self._start(self._db.scan(reverse=True), False)

    def seek(self, key) -> bool:
        """Go to the smallest key >= `key`."""
        return self._start(self._db.scan(key), True)

    def seek_before(self, key) -> bool:
        """Go to the largest key < `key`."""
        return self._start(self._db.scan(None, key, reverse=True), False)

    def next(self) -> bool:
        """Go to the next larger key. Not positioned: the first key, unless the
        cursor ran off the end forward (then it stays there: False)."""
        if self._item is None:
            return False if self._it is not None and self._forward else self.first()
        if not self._forward:
            return self._start(self._db.scan(_after(self._item[0])), True)
        return self._step()

    def prev(self) -> bool:
        """Go to the next smaller key. Not positioned: the last key, unless the
        cursor ran off the start backward (then it stays there: False)."""
        if self._item is None:
            return False if self._it is not None and not self._forward else self.last()
        if self._forward:
            return self._start(self._db.scan(None, self._item[0], reverse=True), False)
        return self._step()

    def __iter__(self):
        """(key, value) pairs from the position on, forward (from the first
        key when not positioned); the cursor moves along."""
        if self._item is None and not self.next():
            return
        while self._item is not None:
            yield self._item
            self.next()

    def close(self) -> None:
        """Drop the scan (and release its snapshot); the cursor is unpositioned afterwards."""
        self._it, self._item = None, None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self) -> str:
        return f"<pagestore.Cursor at {self.key!r}>"

    # -- internals ---------------------------------------------------------------
    def _start(self, it, forward: bool) -> bool:
        self._it, self._forward = it, forward
        return self._step()

    def _step(self) -> bool:
        try:
            self._item = next(self._it, None)
        except SnapshotTooOldError:
            if self._item is None:
                raise
            key = self._item[0]    # go on past the position, in a scan of the store as it is
            self._it = self._db.scan(_after(key)) if self._forward else \
                self._db.scan(None, key, reverse=True)
            self._item = next(self._it, None)
        return self._item is not None
