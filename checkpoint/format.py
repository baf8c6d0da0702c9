"""Recovery-file and checkpoint-marker formats, shared by reader and writer.

Both live in `<store>/cp/`. All integers are little-endian; every checksum is
CRC32C (Castagnoli). `docs/recovery-files.md` carries the same tables.

File names (built and parsed by pagestore.diskio.layout, the one grammar of
the store's names):

    cp/<checkpoint_id:016d>-RECOVERY-<writer:03d>.bin    one per writer thread
    cp/<checkpoint_id:016d>-START.bin                    step 4 of DESIGN.md §3
    cp/<checkpoint_id:016d>-END.bin                      step 6

Recovery file header (32 bytes, offset 0):

    off size field
      0    8 magic b"PSRECOVR"
      8    2 format version = 1
     10    2 writer index (equals the <writer> of the file name)
     12    4 page size
     16    8 checkpoint id (equals the <checkpoint_id> of the file name)
     24    1 configured codec (informational; each record names its own)
     25    3 reserved = 0
     28    4 crc32c of bytes 0..28

Record (18-byte header, then `stored length` payload bytes), packed back to
back from offset 32 to the end of the file:

    off size field
      0    8 page id
      8    1 codec actually applied to this payload (CODEC_* below)
      9    1 flags: bit 0 GAP_SKIPPED (payload decodes to the page without its
               free gap [free_lo, free_hi)); bit 1 ENCRYPTED (payload is
               cipher.seal(encoded page, record_context(...))); others = 0
     10    4 stored length (payload bytes)
     14    4 crc32c of header bytes 0..14 followed by the payload
     18    n payload

The record CRC also covers the page id, codec, flags and length: a CRC of the
payload alone would let a flipped page-id bit write a good image over the
wrong page. An ENCRYPTED record's payload is AES-256-GCM sealed (compressed
first: ciphertext does not compress) with associated data binding it to its
checkpoint, writer, offset, page id, codec and flags, so a record cannot be
moved, reordered or re-labelled without failing authentication. The CRC is
kept for those records too: it separates damage (RecoveryFileCorrupt) from
tampering or a wrong key (the cipher's error).

Validity rule. A recovery file is valid iff its header is valid (magic,
version, crc, checkpoint id and writer index equal to those in its name, page
size equal to the store's), and from offset 32 to the end of the file it
parses as whole records, each with a known codec, no reserved flag bits, a
stored length <= page size + 64, a matching crc, ENCRYPTED set exactly when
the store is encrypted, and a payload that decodes to exactly one page. Anything else is corruption: the file was fsynced before
the START marker was written, so nothing short of damage can make it short.

Marker (52 bytes), written only with `fs.write_atomic` (temp, fsync, rename,
fsync dir), so a marker either exists whole or does not exist:

    off size field
      0    8 magic b"PSCPMARK"
      8    2 format version = 1
     10    1 kind: 1 START, 2 END
     11    1 recovery data: 0 "checkpoint" (recovery files), 1 "wal" (page records)
     12    2 recovery files written by this checkpoint (0 in "wal" mode)
     14    2 reserved = 0
     16    8 checkpoint id (equals the name's)
     24    8 wal_lsn: LSN of this checkpoint's CHECKPOINT record (replay from here)
     32    8 pages in the checkpoint
     40    8 prev_wal_lsn: wal_lsn of the checkpoint completed before this one
               (where "wal"-mode physical recovery starts reading)
     48    4 crc32c of bytes 0..48

A marker is valid iff magic, version, kind, crc and id all match; an invalid
marker is corruption (it cannot arise from a crash) and recovery refuses it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from pagestore.diskio import layout
from pagestore.diskio.layout import CP_DIR, recovery_file_name

__all__ = [
    "FILE_MAGIC", "FORMAT_VERSION", "FILE_HEADER", "FILE_HEADER_SIZE", "RECORD_HEADER",
    "RECORD_HEADER_SIZE", "MARKER", "MARKER_SIZE", "MARKER_MAGIC", "START", "END",
    "RECOVERY_DATA_CODES", "GAP_SKIPPED", "ENCRYPTED", "record_context", "MAX_PAYLOAD_OVER_PAGE", "CP_DIR",
    "RecoveryFileCorrupt", "MarkerCorrupt", "Marker", "RecoveryFileHeader",
    "recovery_file_name", "marker_name", "parse_name", "pack_file_header",
    "unpack_file_header", "pack_record_header", "record_crc", "pack_marker", "unpack_marker",
]


# DO NOT CHANGE THESE VALUES: they are embedded in files on disk.
FILE_MAGIC = b"PSRECOVR"
MARKER_MAGIC = b"PSCPMARK"
FORMAT_VERSION = 1
START, END = 1, 2
RECOVERY_DATA_CODES = {"checkpoint": 0, "wal": 1}
GAP_SKIPPED = 0x01
ENCRYPTED = 0x02
_CONTEXT = struct.Struct("<8sQHQQBB")
# Incompressible pages are stored raw, so a payload is never much over a page;
# the slack only admits codec framing and catches a garbage length early.
MAX_PAYLOAD_OVER_PAGE = 64

FILE_HEADER = struct.Struct("<8sHHIQB3x")         # without the trailing crc
FILE_HEADER_SIZE = FILE_HEADER.size + 4
assert FILE_HEADER_SIZE == 32

RECORD_HEADER = struct.Struct("<QBBII")           # page_id, codec, flags, length, crc
RECORD_HEADER_SIZE = RECORD_HEADER.size
_RECORD_CRC_SPAN = 14                             # bytes of the header the crc covers
assert RECORD_HEADER_SIZE == 18

MARKER = struct.Struct("<8sHBBHHQQQQ")            # without the trailing crc
MARKER_SIZE = MARKER.size + 4
assert MARKER_SIZE == 52


class RecoveryFileCorrupt(Exception):
    """A recovery file (named by `.path`) is short, fails a CRC, or is malformed."""

    def __init__(self, path: str, reason: str, offset: int | None = None):
        where = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"recovery file {path} is corrupt{where}: {reason}")
        self.path, self.reason, self.offset = path, reason, offset


class MarkerCorrupt(Exception):
    """A checkpoint marker (named by `.path`) fails its checks."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"checkpoint marker {path} is corrupt: {reason}")
        self.path, self.reason = path, reason


@dataclass(frozen=True)
class Marker:
    kind: int                   # START or END
    checkpoint_id: int
    wal_lsn: int
    pages: int = 0
    prev_wal_lsn: int = 0
    recovery_files: int = 0
    recovery_data: str = "checkpoint"


@dataclass(frozen=True)
class RecoveryFileHeader:
    checkpoint_id: int
    writer: int
    page_size: int
    codec: int


def marker_name(checkpoint_id: int, kind: int) -> str:
    """File name of the START or END marker (`kind`) of a checkpoint."""
    return layout.marker_name(checkpoint_id, "START" if kind == START else "END")


def parse_name(name: str):
    """(checkpoint_id, "START" | "END" | "RECOVERY", writer or None), or None.

    Anything else in cp/ (write_atomic temp files, tail copies) is not ours to
    interpret and is skipped by every scan.
    """
    return layout.parse_cp_name(name)


def pack_file_header(checkpoint_id: int, writer: int, page_size: int, codec: int) -> bytes:
    """A recovery file's header (the table above), crc included."""
    head = FILE_HEADER.pack(FILE_MAGIC, FORMAT_VERSION, writer, page_size, checkpoint_id, codec)
    return head + struct.pack("<I", crc32c(head))


def unpack_file_header(data: bytes, path: str) -> RecoveryFileHeader:
    """The header at the start of `data`; RecoveryFileCorrupt naming `path` if short, of another
    magic or version, or its crc fails."""
    if len(data) < FILE_HEADER_SIZE:
        raise RecoveryFileCorrupt(path, f"short header ({len(data)} of {FILE_HEADER_SIZE} bytes)", 0)
    magic, version, writer, page_size, cid, codec = FILE_HEADER.unpack_from(data, 0)
    (crc,) = struct.unpack_from("<I", data, FILE_HEADER.size)
    if magic != FILE_MAGIC:
        raise RecoveryFileCorrupt(path, f"bad magic {magic!r}", 0)
    if crc != crc32c(data[: FILE_HEADER.size]):
        raise RecoveryFileCorrupt(path, "header crc mismatch", 0)
    if version != FORMAT_VERSION:
        raise RecoveryFileCorrupt(path, f"unknown format version {version}", 0)
    return RecoveryFileHeader(cid, writer, page_size, codec)


def record_crc(header14, payload) -> int:
    """CRC of a record: the first 14 header bytes, then the payload."""
    return crc32c(payload, crc32c(header14))


def pack_record_header(page_id: int, codec: int, flags: int, payload) -> bytes:
    """A recovery-file record's header for `payload`, its crc over header and payload included."""
    head = RECORD_HEADER.pack(page_id, codec, flags, len(payload), 0)[:_RECORD_CRC_SPAN]
    return head + struct.pack("<I", record_crc(head, payload))


def record_context(checkpoint_id: int, writer: int, offset: int, page_id: int, codec: int, flags: int) -> bytes:
    """Associated data sealing an ENCRYPTED record to its place and header."""
    return _CONTEXT.pack(FILE_MAGIC, checkpoint_id, writer, offset, page_id, codec, flags)


def pack_marker(m: Marker) -> bytes:
    """The bytes of a START or END marker file, crc included."""
    body = MARKER.pack(MARKER_MAGIC, FORMAT_VERSION, m.kind, RECOVERY_DATA_CODES[m.recovery_data],
                       m.recovery_files, 0, m.checkpoint_id, m.wal_lsn, m.pages, m.prev_wal_lsn)
    return body + struct.pack("<I", crc32c(body))


def unpack_marker(data: bytes, path: str, checkpoint_id: int, kind: int) -> Marker:
    """The marker in `data`; MarkerCorrupt naming `path` unless it is whole, valid and the one
    expected (`checkpoint_id`, `kind`)."""
    if len(data) != MARKER_SIZE:
        raise MarkerCorrupt(path, f"size {len(data)}, expected {MARKER_SIZE}")
    magic, version, k, rd, nfiles, _r, cid, lsn, pages, prev = MARKER.unpack_from(data, 0)
    (crc,) = struct.unpack_from("<I", data, MARKER.size)
    if magic != MARKER_MAGIC:
        raise MarkerCorrupt(path, f"bad magic {magic!r}")
    if crc != crc32c(data[: MARKER.size]):
        raise MarkerCorrupt(path, "crc mismatch")
    if version != FORMAT_VERSION:
        raise MarkerCorrupt(path, f"unknown format version {version}")
    if k != kind or cid != checkpoint_id:
        raise MarkerCorrupt(path, f"holds kind {k} of checkpoint {cid}, name says kind {kind} of {checkpoint_id}")
    modes = {v: n for n, v in RECOVERY_DATA_CODES.items()}
    if rd not in modes:
        raise MarkerCorrupt(path, f"unknown recovery-data code {rd}")
    return Marker(k, cid, lsn, pages, prev, nfiles, modes[rd])
