"""Recovery-file records in bulk, no cipher (recframe.c).

The format is checkpoint/format.py's (docs/recovery-files.md); the Python
framing of checkpoint/recovery_file.py is the reference these are tested
against byte for byte. Every call runs without the GIL, so a checkpoint's
writer threads frame their chunks in parallel.

`frame_recovery_records` is handed to the recovery-file writers as an
explicit object: a `RecordFramer`, callable, whose `codecs` names the codecs
it frames on this machine.
"""

from __future__ import annotations

from . import RECORD_HEADER_SIZE, ffi, lib
from .buffers import u64_array
from .capabilities import CAPABILITIES

__all__ = ["RecordFramer", "frame_recovery_records", "compact_pages", "frame_record_heads",
           "parse_recovery_records"]


def _frame(page_ids, images, page_size: int, codec: int, out) -> tuple[int, int]:
    """Recovery-file records of `page_ids` (images back to back) into `out`, no cipher.

    `codec`: one of `CAPABILITIES.framed_codecs` (0 disabled, 1 skip_garbage,
    and 4 lz4 in its fast mode when the system's liblz4.so.1 loads), for lz4
    with LZ4's acceleration in bits 8-23 (`PageCodec.frame_code`). Returns
    (bytes written, gap fallbacks). Byte-identical to the Python framing of
    checkpoint/recovery_file.py at acceleration 1 (above it, lz4's blocks are
    liblz4's at that acceleration, which cramjam cannot make); runs without
    the GIL.
    """
    if codec & 0xFF not in CAPABILITIES.framed_codecs:
        raise ValueError(f"codec {codec & 0xFF} is not framed in C")
    ids, n = u64_array(page_ids)
    fallbacks = ffi.new("uint64_t *")
    with ids, ffi.from_buffer(images) as src, \
            ffi.from_buffer("uint8_t[]", out, require_writable=True) as dst:
        if len(src) < n * page_size:
            raise ValueError(f"images hold {len(src)} bytes, {n} pages need {n * page_size}")
        got = lib.ps_recframe(src, ids, n, page_size, int(codec), dst, len(dst), fallbacks)
    if got < 0:
        raise ValueError(f"out holds {len(out)} bytes, {n} records may need "
                         f"{n * (page_size + RECORD_HEADER_SIZE)}, or codec argument {codec:#x} is not one"
                         " the C framing takes")
    return got, fallbacks[0]


class RecordFramer:
    """The C framing of plain recovery-file records: `framer(page_ids, images,
    page_size, codec, out) -> (bytes written, gap fallbacks)` (see `_frame`).
    `codecs` are the codec ids it takes here (CAPABILITIES.framed_codecs); a
    writer frames the other codecs in Python."""

    def __init__(self, codecs: tuple[int, ...]):
        self.codecs = codecs

    def __call__(self, page_ids, images, page_size: int, codec: int, out) -> tuple[int, int]:
        if codec & 0xFF not in self.codecs:
            raise ValueError(f"codec {codec} is not framed in C here (framed: {self.codecs})")
        return _frame(page_ids, images, page_size, codec, out)

    def __repr__(self) -> str:
        return f"<RecordFramer codecs={self.codecs}>"


#: the framer of this process (callable like a function)
frame_recovery_records = RecordFramer(CAPABILITIES.framed_codecs)


def compact_pages(images, n: int, page_size: int, out, lens, flags) -> int:
    """The skip_garbage form of `n` pages (images back to back) into `out` at a
    stride of page_size: lens (array('I')) and flags (bytearray: RECORD_GAP_SKIPPED or
    0) per page. Returns the gap fallbacks (pages stored whole). For the
    compressing codecs' framing in checkpoint/recovery_file.py."""
    with ffi.from_buffer(images) as src, ffi.from_buffer("uint8_t[]", out, require_writable=True) as dst:
        if len(src) < n * page_size or len(dst) < n * page_size or len(lens) < n or len(flags) < n:
            raise ValueError(f"buffers too small for {n} pages")
        got = lib.ps_compact_pages(src, n, page_size, dst,
                                   ffi.from_buffer("uint32_t[]", lens, require_writable=True),
                                   ffi.from_buffer("uint8_t[]", flags, require_writable=True))
    if got < 0:
        raise ValueError(f"bad page size {page_size}")
    return got


def frame_record_heads(buf, page_ids, codecs, flags, lens) -> int:
    """Fill in the header and CRC of each recovery-file record laid out in `buf`
    (a RECORD_HEADER_SIZE gap, then lens[i] payload bytes, per page). Returns the bytes
    the records span."""
    ids, n = u64_array(page_ids)
    with ids, ffi.from_buffer("uint8_t[]", buf, require_writable=True) as dst:
        got = lib.ps_frame_heads(dst, len(dst), n, ids, ffi.from_buffer("uint8_t[]", codecs),
                                 ffi.from_buffer("uint8_t[]", flags), ffi.from_buffer("uint32_t[]", lens))
    if got < 0:
        raise ValueError("records do not fit in buf")
    return got


def parse_recovery_records(buf, page_size: int, images, ids) -> tuple[int, int]:
    """Decode the leading valid records of `buf` that C decodes (disabled,
    skip_garbage, and lz4 where `lz4_available()`) into `images` / `ids`.

    `ids` is a writable uint64 buffer (array('Q')); as many records as it has
    room for are taken. Returns (records, bytes consumed); it stops at the
    first record that is incomplete in `buf`, of another codec, encrypted or in
    any way invalid, which the caller's Python reader then takes.
    """
    used = ffi.new("size_t *")
    with ffi.from_buffer(buf) as src, ffi.from_buffer("uint8_t[]", images, require_writable=True) as out, \
            ffi.from_buffer("uint64_t[]", ids, require_writable=True) as idv:
        cap = min(len(idv), len(out) // page_size)
        got = lib.ps_recparse(src, len(src), page_size, out, idv, cap, used)
    if got < 0:
        raise ValueError(f"bad page size {page_size}")
    return got, used[0]
