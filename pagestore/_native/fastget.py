"""Point gets without leaving C: `reader(core)` over the extension `pagestore._fastget`.

cffi cannot make a get as cheap as a C extension method: each call releases
and retakes the GIL, converts its arguments, and the value comes back through
a buffer Python then copies into bytes. `pagestore._fastget` (csrc/fastget.c)
is a small CPython extension that serves a get in one call with the GIL held:
key check, one hold of the tree read lock, the bytes built from the value.
It reaches the core only through the function table the core exports
(csrc/ps_fastget.h), whose address this module takes from cffi and hands it.

Holding the GIL, it must never wait for the tree lock nor load a page (both
could need another thread to get the GIL), so it serves hits and known-absent
keys in pages in memory (or in a leaf the core reads in place from the map of
the page file) only; everything else comes back as `SLOW` from `get`,
or goes through `get_many`'s fallback: the ordinary cffi path, which waits,
loads and raises the typed errors. Answers are the same on either path.
"""

from __future__ import annotations

from . import ffi, lib
from .. import _fastget

__all__ = ["SLOW", "get_method", "reader"]

SLOW = _fastget.SLOW
"""What `Reader.get` returns when only the ordinary path can answer."""

_TABLE = int(ffi.cast("uintptr_t", lib.ps_fastget_table()))


def reader(core) -> "_fastget.Reader":
    """The fast point reads of `core` (a `Core`): `get(key, default)` → value,
    `default` or `SLOW`; `get_many(keys: list, default, fallback)` → list, with
    `fallback(key, default)` for the keys it cannot serve. It keeps the core's
    pointer (and so the C core) alive."""
    pointer = core.pointer
    return _fastget.Reader(_TABLE, int(ffi.cast("uintptr_t", pointer)), pointer)


def get_method(func, open_states: tuple) -> "_fastget.GetMethod":
    """`func` (a store class's Python `get(self, key, default=None)`) as a
    method served in C: called with (store, key[, default]) while
    `store._state` is one of `open_states` it answers from `store._reader` (a
    `reader`) in one C call; for anything that reader cannot answer, another
    state or keyword arguments it calls `func`. Both attributes are read at
    every call, so a reader swapped in or a state changed is seen at once.
    It holds no store: a bound `store.get` is an ordinary bound method."""
    return _fastget.GetMethod(func, open_states)
