"""`OrderedReads`: the ordered-read surface a store and its snapshots share.

Built on the class's own `scan()`, so each read keeps that scan's
consistency: a `Database` reads a snapshot taken at the first item, a
`Snapshot` its own instant.
"""

from __future__ import annotations

from typing import Iterator

__all__ = ["OrderedReads"]


class OrderedReads:
    """Mixed into `Database` and `Snapshot`: iteration, keys, items and values over
    the class's `scan()`."""

    def __iter__(self) -> Iterator[bytes]:
        return (k for k, _ in self.scan())

    def keys(self) -> Iterator[bytes]:
        """The keys in order."""
        return iter(self)

    def items(self):
        """(key, value) pairs in key order."""
        return self.scan()

    def values(self) -> Iterator[bytes]:
        """The values in key order."""
        return (v for _, v in self.scan())
