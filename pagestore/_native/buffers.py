"""Caller buffers handed to C, without leaving a memoryview exported behind.

CPython 3.11's collector, breaking a garbage cycle that holds a memoryview
still exported to a live cdata, drops the view's buffer and then crashes
releasing the export (gh-77894, fixed in 3.12). A store that failed to open,
or was dropped without close(), is such a cycle: the exception's frames, the
store, its core, the WAL segment's view. So long-lived pointers go through
the object under a view (`pin`), and per-call exports sit in `with` blocks.
"""

from __future__ import annotations

from array import array

from . import ffi

__all__ = ["pin", "u64_array"]


def pin(buf):
    """(keep, ptr, n): a writable uint8_t * over `buf`'s n bytes, valid while
    `keep` lives; a memoryview is pinned through the object under it, never
    exported to cffi itself (see the module's docstring)."""
    if not isinstance(buf, memoryview):
        keep = ffi.from_buffer("uint8_t[]", buf, require_writable=True)
        return keep, keep, len(keep)
    view = ffi.from_buffer("uint8_t[]", buf, require_writable=True)
    try:
        keep = ffi.from_buffer("uint8_t[]", buf.obj, require_writable=True)
    except (TypeError, ValueError, BufferError):   # no contiguous object under it
        return view, view, len(view)
    try:
        off = int(ffi.cast("uintptr_t", view)) - int(ffi.cast("uintptr_t", keep))
        n = len(view)
    finally:
        ffi.release(view)
    if off < 0 or off + n > len(keep):
        raise ValueError("the buffer's view lies outside the object it views")
    return keep, keep + off, n


def u64_array(page_ids):
    """(cdata, n): a uint64_t[] over page_ids (array('Q'), numpy uint64, or any iterable)."""
    if isinstance(page_ids, array) and page_ids.typecode == "Q":
        return ffi.from_buffer("uint64_t[]", page_ids), len(page_ids)
    try:
        mv = memoryview(page_ids)
        if mv.format in ("Q", "<Q", "=Q", "L") and mv.itemsize == 8 and mv.c_contiguous:
            return ffi.from_buffer("uint64_t[]", mv), len(mv)
    except TypeError:
        pass
    a = array("Q", page_ids)
    return ffi.from_buffer("uint64_t[]", a), len(a)
