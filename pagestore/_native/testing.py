"""Bindings of the C entry points only tests call (csrc/ps_test.h).

They are compiled into the same extension as the product API but declared
apart, so csrc/ps_api.h is the product surface; nothing in the library
imports this module.
"""

from __future__ import annotations

from . import PS_OK, ffi, lib

__all__ = ["crc32c", "crc32c_software", "crc32c_hardware_available", "end_image", "page_image",
           "set_readahead", "batch_failpoints", "batch_held", "batch_go"]


def crc32c(data, crc: int = 0) -> int:
    """CRC32C of data (hardware when available), chained from crc: the core's own CRC."""
    with ffi.from_buffer(data) as buf:
        return lib.ps_crc32c(crc, buf, len(buf))


def crc32c_software(data, crc: int = 0) -> int:
    """CRC32C of data through the table version, chained from crc."""
    with ffi.from_buffer(data) as buf:
        return lib.ps_crc32c_sw(crc, buf, len(buf))


def crc32c_hardware_available() -> bool:
    """True when the CPU computes CRC32C (SSE4.2)."""
    return bool(lib.ps_crc32c_hw_available())


def end_image(end_lsn: int) -> bytes:
    """The C encoder's END trailer after a record ending at `end_lsn`: the
    bytes of LSNs [end_lsn, end_lsn + n), block headers included."""
    out = ffi.new("uint8_t[]", lib.PS_WAL_END_MAX)
    n = lib.ps_wal_end_image(end_lsn, out)
    return bytes(ffi.buffer(out, n))


def page_image(core, page_id: int):
    """The page `page_id` of `core` (a `Core`) as it is in page memory (crc
    field 0), or None if it is not resident."""
    out = bytearray(core.page_size)
    rc = lib.ps_read_live_page(core.pointer, page_id, ffi.from_buffer(out))
    return bytes(out) if rc == PS_OK else None


def set_readahead(core, pages: int) -> None:
    """The leaves `core`'s scans load at once when they cross into one not in
    memory (0 or 1: no readahead; at most the core's default, 16)."""
    lib.ps_set_readahead(core.pointer, int(pages))


def batch_failpoints(core, hold_at: int = 0, fail_at: int = 0) -> None:
    """Failpoints of the core's next batches (0: off): after write `hold_at` a
    batch lets the checkpoint in and waits, its gate closed, until `batch_go`
    (once); after write `fail_at` it fails as when page memory is full."""
    lib.ps_test_batch_failpoints(core.pointer, int(hold_at), int(fail_at))


def batch_held(core) -> bool:
    """A batch waits at its `hold_at` failpoint."""
    return bool(lib.ps_test_batch_held(core.pointer))


def batch_go(core) -> None:
    """Let the batch waiting at its `hold_at` failpoint go on."""
    lib.ps_test_batch_go(core.pointer)
