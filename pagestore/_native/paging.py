"""Pages as they are on disk: CRC stamps, the meta page, in-place writes
(crc32c.c, pagemem.c; the page format is docs/page-format.md's and
csrc/ps_api.h's table).
"""

from __future__ import annotations

import os
import struct

from . import MH_END, MH_MAGIC, PAGE_HEADER_SIZE, PH_CHECKPOINT_ID, ffi, lib
from .buffers import u64_array

__all__ = ["seal_page", "check_page", "file_header_info", "pwrite_pages"]


def seal_page(buf, page_id: int, page_size: int | None = None) -> None:
    """Stamp the page id and CRC into a page image (writable buffer)."""
    with ffi.from_buffer("uint8_t[]", buf, require_writable=True) as p:
        ps = len(p) if page_size is None else page_size
        if ps > len(p) or ps < PAGE_HEADER_SIZE:
            raise ValueError("buffer shorter than the page")
        lib.ps_seal_page(p, ps, page_id)


def check_page(buf, page_id: int) -> bool:
    """True if the on-disk image passes its CRC and page-id checks."""
    with ffi.from_buffer("uint8_t[]", buf) as p:
        return len(p) >= PAGE_HEADER_SIZE and bool(lib.ps_check_page(p, len(p), page_id))


# the meta page's fields from MH_MAGIC to MH_END (csrc/ps_api.h)
_META = struct.Struct("<8sII QQQQ II")
assert MH_MAGIC + _META.size == MH_END
_CHECKPOINT_ID = struct.Struct("<Q")


def file_header_info(head):
    """Fields of the meta page (page 0) from its first bytes, or None if the
    magic is not ours. Does not check the CRC (head may be a partial page)."""
    head = bytes(head[:MH_END])
    if len(head) < MH_END:
        return None
    magic, version, page_size, root, page_count, free_head, key_count, height, reserve = \
        _META.unpack_from(head, MH_MAGIC)
    if magic != b"PAGESTOR":
        return None
    return {"format_version": version, "page_size": page_size, "root": root,
            "page_count": page_count, "freelist_head": free_head, "key_count": key_count,
            "height": height, "page_reserve": reserve,
            "checkpoint_id": _CHECKPOINT_ID.unpack_from(head, PH_CHECKPOINT_ID)[0]}


def pwrite_pages(fd: int, page_ids, images, page_size: int, path: str | None = None) -> int:
    """Write page images in place through `fd`, without the GIL (pagemem.c); bytes
    written. Raises OSError (with errno, and `path` as its filename: the file
    `fd` writes) on a failed write; ids must ascend."""
    ids, n = u64_array(page_ids)
    with ids, ffi.from_buffer(images) as src:
        if len(src) < n * page_size:
            raise ValueError(f"images hold {len(src)} bytes, {n} pages need {n * page_size}")
        got = lib.ps_pwrite_pages(int(fd), ids, n, src, page_size)
    if got < 0:
        raise OSError(int(-got), os.strerror(int(-got)), path)
    return int(got)
