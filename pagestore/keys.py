"""Argument checks shared by the store and its transactions: keys, values, ranges."""

from __future__ import annotations

__all__ = ["as_key", "as_value", "bounds", "prefix_end"]


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
