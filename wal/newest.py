"""`wal/NEWEST`: the newest segment the writer has begun to use, so a removed one is noticed.

A segment file removed after the one holding the last checkpoint's pointer
reads, without this file, exactly like the log's clean end: replay would
stop before it and the store would open without the records acknowledged in
it. `Segments.acquire` therefore names the segment it hands the writer here
before it returns the segment's buffer, that is before any record in it can
be acknowledged; recovery refuses to open when the file NEWEST names is gone
and no slot holds that seq or a later one.

Layout (28 bytes, little-endian):

    offset size  field
       0     8   magic b"PSNEWEST"
       8     4   version, 1
      12     4   slot number: the segment is in <wal dir>/seg-<slot:08d>.wal
      16     8   seq of the segment
      24     4   crc32c of bytes 0..24

Validity: exactly 28 bytes, magic and version as above, crc32c matches. A
file that fails any of these is damage (`NewestDamaged`), never ignored: a
check silently skipped is the silent loss it exists to prevent. No file at
all is a store made before this file existed (or a brand-new one): nothing
to check. The file is replaced atomically (temp name, fsync, rename, fsync
of the directory), so a crash leaves the old or the new content.

The slot number is what tells a removed segment from one whose header never
reached its file: the writer may be killed after `acquire` and before the
header it writes into the buffer is in the file (the pwrite path writes it
at the next commit); the slot file then still exists, with zeros or an older
seq, and nothing acknowledged can be in it. Only a slot file that is gone
is a removal.

Recovery sets aside slots off the log's chain; before it renames any, it
rewrites NEWEST to the last segment of the chain it keeps (`Wal._cut`), so
the next open never misses a file recovery itself moved.
"""

from __future__ import annotations

import posixpath
import struct

from crc32c import crc32c

from pagestore.diskio.layout import NEWEST, slot_name

from .reader import SegmentMissing

__all__ = ["Newest", "NewestDamaged", "NewestSegmentMissing", "read_newest", "write_newest",
           "newest_missing", "encode_newest", "decode_newest",
           "check_newest", "keep_chain"]

MAGIC = b"PSNEWEST"
VERSION = 1
_BODY = struct.Struct("<8sIIQ")
SIZE = _BODY.size + 4


class Newest:
    """What NEWEST names: segment `seq`, held by slot file number `slot`."""

    __slots__ = ("seq", "slot")

    def __init__(self, seq: int, slot: int):
        self.seq, self.slot = seq, slot

    def __eq__(self, other) -> bool:
        return isinstance(other, Newest) and (self.seq, self.slot) == (other.seq, other.slot)

    def __repr__(self) -> str:
        return f"Newest(seq={self.seq}, slot={self.slot})"


class NewestDamaged(SegmentMissing):
    """`wal/NEWEST` fails its validity rule: whether a segment was removed
    cannot be told. `path` names the file."""

    def __init__(self, path: str, why: str):
        Exception.__init__(self, f"{path}: the WAL's newest-segment file is damaged ({why}); "
                                 "whether a WAL segment was removed cannot be told")
        self.path, self.seq, self.lsn = path, None, None


class NewestSegmentMissing(SegmentMissing):
    """The segment NEWEST names is gone (its slot file removed) and no slot
    holds that seq or a later one: records acknowledged in it are lost.
    `path` names the missing slot file."""

    def __init__(self, wal_dir: str, newest: Newest):
        path = posixpath.join(wal_dir, slot_name(newest.slot))
        Exception.__init__(self, f"{path}: WAL segment seq {newest.seq} is missing from {wal_dir} "
                                 "(the file was removed); the records written to it are lost, "
                                 "so the store is not opened")
        self.path, self.seq, self.lsn = path, newest.seq, None


def encode_newest(newest: Newest) -> bytes:
    """The 28 bytes of a NEWEST file naming `newest`."""
    body = _BODY.pack(MAGIC, VERSION, newest.slot, newest.seq)
    return body + struct.pack("<I", crc32c(body))


def decode_newest(data: bytes, path: str) -> Newest:
    """The content of a NEWEST file; NewestDamaged when it fails the validity rule."""
    if len(data) != SIZE:
        raise NewestDamaged(path, f"{len(data)} bytes, not {SIZE}")
    magic, version, slot, seq = _BODY.unpack_from(data)
    if magic != MAGIC:
        raise NewestDamaged(path, "bad magic")
    if struct.unpack_from("<I", data, _BODY.size)[0] != crc32c(data[:_BODY.size]):
        raise NewestDamaged(path, "checksum mismatch")
    if version != VERSION:
        raise NewestDamaged(path, f"unknown version {version}")
    return Newest(seq, slot)


def read_newest(fs, wal_dir: str) -> Newest | None:
    """What `<wal_dir>/NEWEST` names, or None when there is no such file."""
    path = posixpath.join(wal_dir, NEWEST)
    if not fs.exists(path):
        return None
    f = fs.open(path)
    try:
        data = f.pread(SIZE + 1, 0)
    finally:
        f.close()
    return decode_newest(bytes(data), path)


def write_newest(fs, wal_dir: str, newest: Newest) -> None:
    """Replace `<wal_dir>/NEWEST` atomically and durably."""
    fs.write_atomic(posixpath.join(wal_dir, NEWEST), encode_newest(newest),
                    crash_point="wal.newest_tmp_written")
    fs.crash_point("wal.newest_written")


def newest_missing(newest: Newest | None, slot_files, seqs) -> bool:
    """Whether the segment `newest` names was removed: its slot file is not
    among `slot_files` (numbers) and no valid header in `seqs` holds its
    seq or a later one."""
    if newest is None:
        return False
    return newest.slot not in slot_files and not any(s >= newest.seq for s in seqs)


def check_newest(segs) -> None:
    """At recovery, after `segs.scan()` and `segs.remove_unfinished()`: load
    what NEWEST names into `segs.newest`; NewestSegmentMissing when that
    segment was removed."""
    segs.newest = newest = read_newest(segs.fs, segs.dir)
    seqs = [s.seq for s in segs.slots.values() if s.header is not None]
    if newest_missing(newest, set(segs.slots), seqs):
        raise NewestSegmentMissing(segs.dir, newest)


def keep_chain(segs, chain) -> None:
    """Before recovery sets slots aside: make NEWEST name the last segment of
    the chain it keeps (the file is removed when it keeps none), so the next
    open never takes a slot recovery moved for a removed one."""
    if segs.newest is None:
        return
    keep = Newest(chain[-1].seq, chain[-1].number) if chain else None
    if keep == segs.newest:
        return
    if keep is None:
        segs.fs.remove(posixpath.join(segs.dir, NEWEST))
        segs.fs.fsync_dir(segs.dir)
    else:
        write_newest(segs.fs, segs.dir, keep)
    segs.newest = keep
