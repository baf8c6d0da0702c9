"""AES-256-GCM of pages and recovery-file records in bulk (pageseal.c).

The formats are pagestore/cipher.py's (sealed page) and checkpoint/format.py's
(ENCRYPTED record); cipher.py stays the reference, and tests open what these
seal with it. Every call runs without the GIL and needs libcrypto
(`CAPABILITIES.gcm`); the key, nonce source and formats are the caller's.
"""

from __future__ import annotations

from . import PS_E_CORRUPT, PS_E_NEED_SPACE, ffi, lib
from .buffers import u64_array

__all__ = ["seal_pages", "open_pages", "seal_records"]


def seal_pages(key: bytes, key_id: int, ad_prefix: bytes, page_ids, images, out, page_size: int) -> None:
    """AES-256-GCM sealed images (pagestore/cipher.py's page format) of the plain
    pages `images` into `out`, without the GIL (pageseal.c). ValueError names the
    first page whose last 32 bytes are not zero. Needs CAPABILITIES.gcm."""
    ids, n = u64_array(page_ids)
    bad = ffi.new("uint64_t *")
    with ids, ffi.from_buffer(images) as src, \
            ffi.from_buffer("uint8_t[]", out, require_writable=True) as dst:
        if len(src) < n * page_size or len(dst) < n * page_size:
            raise ValueError(f"{n} pages need {n * page_size} bytes in and out, "
                             f"got {len(src)} and {len(dst)}")
        rc = lib.ps_seal_pages(key, key_id, ad_prefix, len(ad_prefix), ids, n, src, dst, page_size, bad)
    if rc == PS_E_CORRUPT:
        raise ValueError(f"page {page_ids[bad[0]]}: the last 32 bytes of a plain page must be zero "
                         "(they are not encrypted)")
    if rc < 0:
        raise RuntimeError(f"sealing pages failed (code {rc}): libcrypto or getrandom")


def open_pages(keytab: bytes, ad_prefix: bytes, first_id: int, buf, page_size: int,
               zero_bad: bool) -> tuple[int, int | None]:
    """Open the sealed pages first_id.. of `buf` in place, without the GIL
    (pageseal.c). Returns (pages opened, index of the first page that does not
    authenticate or None); with `zero_bad` such pages are zeroed and skipped."""
    bad = ffi.new("uint64_t *")
    with ffi.from_buffer("uint8_t[]", buf, require_writable=True) as p:
        got = lib.ps_open_pages(keytab, ad_prefix, len(ad_prefix), first_id, len(p) // page_size, p,
                                page_size, 1 if zero_bad else 0, bad)
    if got == PS_E_CORRUPT:
        return int(bad[0]), int(bad[0])
    if got < 0:
        raise RuntimeError(f"opening pages failed (code {got}): libcrypto")
    return int(got), None


def seal_records(key: bytes, key_id: int, checkpoint_id: int, writer: int, offset: int, buf,
                 start: int, end: int) -> int:
    """Seal, in place and without the GIL, the plain recovery-file records in
    buf[start:end] (checkpoint/format.py's ENCRYPTED form; `offset` is the file
    offset of buf[start]); returns the new end. ValueError when buf is too short
    (nothing changed) or the records are malformed."""
    with ffi.from_buffer("uint8_t[]", buf, require_writable=True) as p:
        size = len(p)
        if not 0 <= start <= end <= size:
            raise ValueError(f"records [{start}, {end}) outside a buffer of {size} bytes")
        got = lib.ps_seal_records(key, key_id, checkpoint_id, writer, offset, p + start, end - start,
                                  size - start)
    if got == PS_E_NEED_SPACE:
        raise ValueError(f"buffer of {size} bytes too short for the sealed records")
    if got == PS_E_CORRUPT:
        raise ValueError("malformed or already sealed recovery-file records")
    if got < 0:
        raise RuntimeError(f"sealing records failed (code {got}): libcrypto or getrandom")
    return start + int(got)
