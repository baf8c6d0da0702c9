"""Reading a sparse WAL segment without touching its holes through a mapping.

A new store's segments are sparse (wal/segments.py, Sizing). On tmpfs (and
any shmem-backed file system) a read through a shared mapping allocates a
page for every hole it touches: a recovery scan reading to a segment's end
would grow each segment to its full size, and on a small or full tmpfs the
reader is killed by SIGBUS. `sparse_copy` reads only the file's data
extents (SEEK_DATA / SEEK_HOLE, plain pread, which never allocates) into
anonymous memory whose untouched pages cost nothing.
"""

from __future__ import annotations

import mmap
import os

__all__ = ["sparse_copy"]


def sparse_copy(fd: int, size: int):
    """An anonymous `mmap` of `size` bytes holding the file's bytes [0, size),
    or None when the file behind `fd` has no holes below `size` (map it)."""
    st = os.fstat(fd)
    if st.st_blocks * 512 >= min(size, st.st_size) or not hasattr(os, "SEEK_DATA"):
        return None
    out = mmap.mmap(-1, size)
    view = memoryview(out)
    try:
        at, end = 0, min(size, st.st_size)
        while at < end:
            try:
                data = os.lseek(fd, at, os.SEEK_DATA)
            except OSError:        # ENXIO: no data after `at`
                break
            if data >= end:
                break
            hole = min(os.lseek(fd, data, os.SEEK_HOLE), end)
            while data < hole:
                got = os.preadv(fd, [view[data:hole]], data)
                if got <= 0:
                    break
                data += got
            at = hole
    finally:
        view.release()
    return out
