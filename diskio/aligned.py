"""Page-aligned buffers for O_DIRECT I/O.

O_DIRECT requires the user buffer, the file offset and the length to be
aligned to the device's logical block size; 4096 covers every block size this
project meets (512 B logical / 4 KiB physical here). An anonymous mmap is
always page aligned, so it is the allocator: no numpy or ctypes tricks are
needed to get the alignment, only to *check* it for arbitrary buffers.
"""

from __future__ import annotations

import mmap

__all__ = ["ALIGNMENT", "aligned_buffer", "buffer_address", "is_aligned", "round_up"]

ALIGNMENT = 4096


def round_up(n: int, align: int = ALIGNMENT) -> int:
    """`n` rounded up to a multiple of `align`."""
    return (n + align - 1) // align * align


def aligned_buffer(n: int) -> memoryview:
    """A zero-filled writable buffer of `n` bytes whose address is 4096-aligned.

    Returned as a flat unsigned-byte memoryview so slices stay views (an mmap
    object's slices are copies); the view keeps its anonymous mmap alive.
    Slices starting at multiples of 4096 are themselves aligned.
    """
    if n < 0:
        raise ValueError(f"buffer size must be >= 0, got {n}")
    # mmap refuses length 0; allocate one page and hand out an empty view.
    backing = mmap.mmap(-1, max(round_up(n), ALIGNMENT), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return memoryview(backing)[:n]


def buffer_address(buf) -> int:
    """Address of the first byte of a contiguous buffer (read-only allowed)."""
    mv = memoryview(buf)
    if mv.nbytes == 0:
        return 0
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return int(_ffi().cast("uintptr_t", _ffi().from_buffer(mv)))


_FFI = None


def _ffi():
    # cffi's ABI mode reads any buffer's address, read-only ones included
    # (ctypes cannot), without building or loading anything.
    global _FFI
    if _FFI is None:
        import cffi
        _FFI = cffi.FFI()
    return _FFI


def is_aligned(buf, align: int = ALIGNMENT) -> bool:
    """Whether `buf`'s first byte sits at a multiple of `align`."""
    return buffer_address(buf) % align == 0
