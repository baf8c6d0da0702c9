"""Argument checks shared by the store and its transactions: keys, values, ranges,
and the largest write a store takes (`WriteLimits`)."""

from __future__ import annotations

import functools

from pagestore.wal.format import FIRST_RECORD, REC_HDR_LEN, end_after, payload_put, physical_end
from pagestore.wal.recseal import TAG

from ._native import MAX_KEY, MAX_VALUE
from ._native.core import too_large

__all__ = ["as_key", "as_value", "bounds", "prefix_end", "WriteLimits", "KEY_FLOOR", "PAIR_FLOOR"]

# Every store takes a key of KEY_FLOOR bytes (the smallest `max_key` is 220:
# 1 KiB pages with the largest page reserve) and a key and value of
# PAIR_FLOOR bytes together (the smallest WAL segment, 1 MiB, takes ~1 MB
# sealed): a write under both needs no look-up of its store's own limits.
# tests/pagestore/test_transaction_write_limits.py pins both.
KEY_FLOOR = 200
PAIR_FLOOR = 1 << 19

_PUT_HEAD = len(payload_put(b"", b""))   # a PUT payload's txid, key and value lengths


def _bytes_like(x, what: str) -> bytes:
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    try:        # any other object with the buffer protocol (array.array, numpy arrays, mmap)
        return bytes(memoryview(x))
    except TypeError:
        raise TypeError(f"{what} are bytes-like, not {type(x).__name__}") from None


# Plain bytes, the common case, return before any call (these run on every
# operation); the rest shares one conversion and one message.
def as_key(key) -> bytes:
    """`key` as bytes; TypeError unless it is bytes-like."""
    return key if type(key) is bytes else _bytes_like(key, "keys")


def as_value(value) -> bytes:
    """`value` as bytes; TypeError unless it is bytes-like."""
    return value if type(value) is bytes else _bytes_like(value, "values")


class WriteLimits:
    """The largest write one store takes, as its C core checks it: a key of
    `max_key` bytes (set by the page size), a value of MAX_VALUE, and a PUT
    record that fits one WAL segment with the END trailer after it
    (docs/wal-format.md). A transaction buffers its writes until commit;
    these checks refuse at the call what the commit would refuse, as the
    store's own put and delete do."""

    __slots__ = ("max_key", "page_size", "max_pair")

    def __init__(self, max_key: int, page_size: int, segment_size: int, sealed: bool):
        self.max_key, self.page_size = max_key, page_size
        # key + value bytes of the largest PUT record: less its header, its
        # payload's head and, sealed, its tag
        self.max_pair = _largest_record(segment_size) - REC_HDR_LEN - _PUT_HEAD - (TAG if sealed else 0)

    def check_put(self, key: bytes, value: bytes) -> None:
        """KeyTooLargeError or ValueTooLargeError, as `Database.put` raises them,
        when the store cannot take `value` under `key`."""
        if len(key) > self.max_key or len(value) > MAX_VALUE or len(key) + len(value) > self.max_pair:
            raise too_large(len(key), len(value), self.max_key, self.page_size)

    def check_delete(self, key: bytes) -> None:
        """KeyTooLargeError, as `Database.delete` raises it, for a key longer
        than MAX_KEY; a shorter key the store cannot hold is merely absent."""
        if len(key) > MAX_KEY:
            raise too_large(len(key), 0, self.max_key, self.page_size)


@functools.lru_cache(maxsize=None)
def _largest_record(segment_size: int) -> int:
    """The length of the largest record a segment of `segment_size` bytes takes
    at its first record's place, the END trailer after it (walenc.c's rule)."""
    lo, hi = 0, segment_size          # fits(lo); not fits(hi): a record never fills a segment
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if end_after(physical_end(FIRST_RECORD, mid)) <= segment_size:
            lo = mid
        else:
            hi = mid
    return lo


def prefix_end(prefix: bytes):
    """The smallest key greater than every key starting with `prefix` (None: no bound)."""
    b = bytearray(prefix)
    while b and b[-1] == 0xFF:
        b.pop()
    if not b:
        return None
    b[-1] += 1
    return bytes(b)


def bounds(start, stop, prefix):
    """(lo, hi) of a scan over [start, stop) narrowed to `prefix`; None: unbounded."""
    lo = None if start is None else as_key(start)
    hi = None if stop is None else as_key(stop)
    if prefix is not None:
        prefix = as_key(prefix)
        plo, phi = prefix, prefix_end(prefix)
        lo = plo if lo is None or plo > lo else lo
        if phi is not None:
            hi = phi if hi is None or phi < hi else hi
    return lo, hi
