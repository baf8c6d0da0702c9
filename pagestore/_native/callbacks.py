"""The Python callbacks the C core makes, and the exceptions they keep.

Each runs on the calling thread inside a C call that holds the core's tree
WRITE lock (csrc/ps_api.h, "Lock order"). So each may do I/O and may take
the WAL segment lock (which comes after the tree lock), but must never call
into the core (the tree lock is not recursive: it would deadlock) nor wait
for another thread that needs the tree lock. An exception raised in one is
kept here and re-raised by the binding once C has unwound (`take_error`).
"""

from __future__ import annotations

import threading
import traceback

from .. import errors as _errors
from . import ffi
from .buffers import pin

__all__ = ["Callbacks", "take_error"]


class Callbacks:
    """What the C callbacks reach through the core's handle (no link back to Core).

    `read_page(page_id, buf)` fills a memoryview of page_size bytes with the
    page as on disk (decrypted) and raises to fail the operation;
    `wal_segment(seq)` returns the writable buffer of segment `seq` (or None:
    no segment, the operation rolls back with PS_E_WAL_FULL).
    `wal_grow(seq, need)` makes bytes [0, need) of segment `seq` allocated on
    disk and returns the allocated end (>= need), or raises (a full disk):
    the encoder writes no record past it, since a shared mapping's write to
    an unallocated page is a SIGBUS on a full disk. None: segments are whole.
    `wal_keep` holds the pinned buffers of the attached segment and the one
    before it, which the encoder may still be finishing."""

    __slots__ = ("read_page", "wal_segment", "wal_grow", "page_size", "tls", "wal_keep", "seg_size")

    def __init__(self, read_page, wal_segment, page_size, wal_grow=None):
        self.read_page = read_page
        self.wal_segment = wal_segment
        self.wal_grow = wal_grow
        self.page_size = page_size
        self.tls = threading.local()
        self.wal_keep = []
        self.seg_size = 0


# An exception that escapes a callback before its `try` (a signal handler's
# KeyboardInterrupt runs at any bytecode) is caught by cffi: `error=-1` makes
# the callback fail instead of "succeed" with nothing done (a stale page slot
# then failed its page-id check), and `onerror` keeps the exception for the
# caller to raise, per thread, since it has no handle to reach the core by.
_late = threading.local()


def _late_error(_exc_type, exc, _tb):
    _late.exc = kept(exc)


def kept(e: BaseException) -> BaseException:
    """`e`, to re-raise once C has unwound, without the locals of the frames it
    passed through: a buffer a frame had exported (a signal lands between any
    two bytecodes) would sit in a garbage cycle with its memoryview, which
    CPython 3.11's collector crashes on (buffers.py). Line numbers stay."""
    traceback.clear_frames(e.__traceback__)
    return e


def take_error(cb: Callbacks):
    """The exception a callback kept for this thread (its own, else a late one), or None."""
    exc = getattr(cb.tls, "exc", None)
    if exc is not None:
        cb.tls.exc = None
        return exc
    exc = getattr(_late, "exc", None)
    if exc is not None:
        _late.exc = None
    return exc


@ffi.def_extern(error=-1, onerror=_late_error)
def ps_py_read_page(handle, page_id, buf):
    """A page miss (tree write lock held): fill `buf` through `read_page`.

    May read and decrypt the page file; must not call into the core. 0, or
    -1 with the exception kept for the caller (the op fails with PS_E_IO)."""
    cb = ffi.from_handle(handle)
    try:
        if cb.read_page is None:
            raise _errors.CorruptionError(f"page {page_id} is not in memory and there is no page file")
        cb.read_page(page_id, memoryview(ffi.buffer(buf, cb.page_size)))
        return 0
    except BaseException as e:  # noqa: BLE001 - re-raised by the caller after C unwinds
        cb.tls.exc = kept(e)
        return -1


@ffi.def_extern(error=-1, onerror=_late_error)
def ps_py_wal_segment(handle, seq, base_out):
    """The WAL segment is full (tree write lock held): hand C segment `seq`.

    May take the WAL segment lock and create or map a segment file when no
    spare one is ready; must not call into the core. 0 with *base_out set,
    or -1 (no segment: PS_E_WAL_FULL, or the exception kept: PS_E_IO)."""
    cb = ffi.from_handle(handle)
    try:
        buf = None if cb.wal_segment is None else cb.wal_segment(seq)
        if buf is None:
            return -1
        keep, ptr, n = pin(buf)
        if n < cb.seg_size:
            raise ValueError(f"WAL segment {seq}: buffer of {n} bytes, need {cb.seg_size}")
        cb.wal_keep = [cb.wal_keep[-1], keep] if cb.wal_keep else [keep]
        base_out[0] = ptr
        return 0
    except BaseException as e:  # noqa: BLE001 - re-raised by the caller after C unwinds
        cb.tls.exc = kept(e)
        return -1


@ffi.def_extern(error=-1, onerror=_late_error)
def ps_py_wal_grow(handle, seq, need, alloc_out):
    """A record would end at `need`, past the allocated end of segment `seq`
    (tree write lock held): have it allocated. 0 with *alloc_out set to the
    new allocated end, or -1 with the exception kept (the operation rolls
    back with nothing written)."""
    cb = ffi.from_handle(handle)
    try:
        alloc_out[0] = cb.seg_size if cb.wal_grow is None else cb.wal_grow(seq, need)
        return 0
    except BaseException as e:  # noqa: BLE001 - re-raised by the caller after C unwinds
        cb.tls.exc = kept(e)
        return -1
