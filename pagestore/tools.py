"""Read-only readers of a store directory, shared by `verify` and `inspect`.

Nothing here writes, creates, renames or locks anything: every file is
opened O_RDONLY (through `ReadOnlyFS`, which offers the part of the diskio
interface the checkpoint readers call), WAL segments are mapped read-only,
and the WAL is read with `wal.reader.segment_records` / `wal.reader.scan` over
a view of the slot files, never through `Wal.recover` (which cuts the tail).
`docs/tools.md` describes the commands built on these readers.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import posixpath
import struct
import warnings

from pagestore.checkpoint.compression import CODEC_NAMES
from pagestore.diskio import layout
from pagestore.diskio.layout import PAGE_FILE
from pagestore.diskio.posix import PosixFile
from pagestore.checkpoint.page_header import BODY_AT, FREELIST, PAGE_SIZES, page_id_of, type_of
from pagestore.checkpoint.format import (END, FILE_HEADER_SIZE, RECORD_HEADER, RECORD_HEADER_SIZE, START,
                               MarkerCorrupt, RecoveryFileCorrupt, unpack_file_header)
from pagestore.checkpoint.markers import cp_dir, read_marker, scan as scan_cp
from pagestore.wal.format import END as WAL_END, TYPE_NAMES
from pagestore.wal.newest import SIZE as NEWEST_SIZE, NewestDamaged, NewestSegmentMissing, decode_newest, newest_missing
from pagestore.wal.record import read_record
from pagestore.wal.reader import RecoveryReport, WalRecoveryWarning, scan as scan_wal_chain, segment_records
from pagestore.wal.recseal import BlockSealedSegment, record_opener
from pagestore.wal.segments import read_slot
from pagestore.wal.sparse import sparse_copy

from . import _native
from .errors import EncryptionError, ReadOnlyError
from .pagefile import looks_sealed

__all__ = ["ToolError", "ReadOnlyFS", "lock_holder", "page_file", "bad_pages", "free_pages",
           "checkpoint_dir", "recovery_file_summary", "wal_slots", "SegmentView", "walk_segment",
           "scan_wal", "check_store_path", "open_page", "ReadOnlyFile"]

_CHUNK_PAGES = 256
_FREELIST_HEAD = struct.Struct("<QI")   # a freelist page's body: next page id, ids held (docs/page-format.md)


class ToolError(Exception):
    """A usage error (exit status 2): bad path, not a store, a key needed."""


# -- read-only file access ------------------------------------------------------------
class ReadOnlyFile(PosixFile):
    """A diskio `PosixFile` opened O_RDONLY: reads (`pread`, `pread_into`,
    `size`) work, and a write fails as on a read-only descriptor (EBADF)."""

    def __init__(self, path: str):
        super().__init__(path, os.open(path, os.O_RDONLY | os.O_CLOEXEC), False)


class ReadOnlyFS:
    """The one read-only file system: the part of the diskio interface that
    `PageFile`, `checkpoint.markers` and `checkpoint.recovery_file` call,
    opening every file O_RDONLY and creating, truncating or renaming nothing.
    The tools read through it, and so does a store opened `read_only=True`
    (pagestore/readonly.py)."""

    def open(self, path, *, create=False, truncate=False, direct=False):
        """`path` opened read-only (`ReadOnlyFile`); ReadOnlyError (EROFS) if
        asked to create or truncate it."""
        if create or truncate:
            raise ReadOnlyError(f"{path}: opened read-only; not creating or truncating it",
                                path, "open", errno.EROFS)
        return ReadOnlyFile(path)

    def listdir(self, path) -> list:
        """The names in directory `path`, sorted; empty if it does not exist."""
        return sorted(os.listdir(path)) if os.path.isdir(path) else []

    def exists(self, path) -> bool:
        """Whether `path` exists."""
        return os.path.exists(path)

    def makedirs(self, path) -> None:
        """`markers.scan` asks for cp/; a read-only reader creates nothing (listdir of a missing dir is empty)."""

    def size(self, path) -> int:
        """The size of file `path` in bytes."""
        return os.path.getsize(path)


def check_store_path(path: str) -> None:
    """ToolError unless `path` is a directory that looks like a store."""
    if not os.path.exists(path):
        raise ToolError(f"{path}: no such directory")
    if not os.path.isdir(path):
        raise ToolError(f"{path}: not a directory")
    if not any(os.path.exists(os.path.join(path, n)) for n in (PAGE_FILE, layout.WAL_DIR, layout.CP_DIR)):
        raise ToolError(f"{path}: not a pagestore store (no {PAGE_FILE}, wal/ or cp/)")


def lock_holder(store: str):
    """The pid holding the store's LOCK (flock), 0 if held by an unknown pid, None if free."""
    path = os.path.join(store, layout.LOCK)
    try:
        st = os.stat(path)
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            for line in f:
                parts = line.split()
                if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK":
                    continue
                if parts[5] == dev:
                    return int(parts[4])
        return None
    except OSError:
        pass
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)   # no /proc: a momentary shared probe
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    except BlockingIOError:
        return 0
    finally:
        os.close(fd)


# -- the page file ---------------------------------------------------------------------
def page_file(store: str, cipher=None) -> dict:
    """Header facts of pages.dat; `info` is None when page 0 is not ours."""
    path = os.path.join(store, PAGE_FILE)
    out = {"file": path, "exists": os.path.exists(path), "size": 0, "info": None, "page_size": None,
           "pages_on_disk": 0, "looks_encrypted": False, "header_error": None}
    if not out["exists"]:
        return out
    f = ReadOnlyFile(path)
    try:
        out["size"] = size = f.size()
        head = f.pread(16384, 0)
    finally:
        f.close()
    if cipher is not None:
        try:
            head = cipher.open_header(head, path)
        except EncryptionError as e:
            out["header_error"] = str(e)
            return out
    info = _native.file_header_info(head)
    if info is None:
        out["looks_encrypted"] = cipher is None and looks_sealed(head)
        out["header_error"] = "bad magic: page 0 is not a pagestore meta page"
        return out
    ps = info["page_size"]
    out.update(info=info, page_size=ps, pages_on_disk=size // ps)
    if ps not in PAGE_SIZES:
        out["header_error"] = f"page size {ps} in the meta page is not a supported page size"
    elif size % ps:
        out["header_error"] = f"size {size} is not a multiple of the page size {ps}"
    return out


def open_page(cipher, raw, pid, path):
    """`raw`, page `pid` as read from `path`, opened with `cipher` when the store is encrypted."""
    if cipher is None:
        return raw
    return cipher.open_page(raw, pid, path)


def bad_pages(pf: dict, cipher=None):
    """Yield (page_id, offset, reason) for every whole page failing its checksum or page id."""
    ps, n, path = pf["page_size"], pf["pages_on_disk"], pf["file"]
    f = ReadOnlyFile(path)
    try:
        for first in range(0, n, _CHUNK_PAGES):
            count = min(_CHUNK_PAGES, n - first)
            data = f.pread(count * ps, first * ps)
            for i in range(count):
                pid = first + i
                try:
                    page = open_page(cipher, data[i * ps:(i + 1) * ps], pid, path)
                except EncryptionError as e:
                    yield pid, pid * ps, str(e)
                    continue
                if not _native.check_page(page, pid):
                    yield pid, pid * ps, _page_reason(page, pid)
    finally:
        f.close()


def _page_reason(page, pid: int) -> str:
    if not any(page):
        return "all zero bytes (never written)"
    stored = page_id_of(page)
    if stored != pid:
        return f"page id field says {stored}"
    return "checksum mismatch"


def free_pages(pf: dict, cipher=None):
    """(freelist pages, free ids) walked from the meta page's freelist head, or None if unreadable."""
    ps, head = pf["page_size"], pf["info"]["freelist_head"]
    f = ReadOnlyFile(pf["file"])
    try:
        pages = ids = 0
        seen = set()
        while head and head not in seen and head < pf["pages_on_disk"]:
            seen.add(head)
            page = open_page(cipher, f.pread(ps, head * ps), head, pf["file"])
            if not _native.check_page(page, head) or type_of(page) != FREELIST:
                return None
            nxt, count = _FREELIST_HEAD.unpack_from(page, BODY_AT)
            pages, ids, head = pages + 1, ids + count, nxt
        return None if head else (pages, ids)
    except EncryptionError:
        return None
    finally:
        f.close()


# -- cp/: markers and recovery files ---------------------------------------------------------
def checkpoint_dir(store: str, fs=None) -> dict:
    """Every checkpoint id named in cp/: its markers (parsed) and recovery files."""
    fs = fs or ReadOnlyFS()
    path = cp_dir(store)
    cp = scan_cp(fs, path)
    ids = sorted(cp.starts | cp.ends | set(cp.recovery))
    entries, marker_errors = {}, []
    for cid in ids:
        e = {"id": cid, "start": None, "end": None,
             "recovery_files": {w: posixpath.join(path, n) for w, n in sorted(cp.recovery.get(cid, {}).items())}}
        for kind, key, present in ((START, "start", cp.starts), (END, "end", cp.ends)):
            if cid in present:
                try:
                    e[key] = read_marker(fs, path, cid, kind)
                except (MarkerCorrupt, OSError) as exc:
                    where = exc.path if isinstance(exc, MarkerCorrupt) else (exc.filename or path)
                    marker_errors.append({"file": where,
                                          "message": str(exc)})
        entries[cid] = e
    known = set()
    for e in entries.values():
        known.update(posixpath.basename(p) for p in e["recovery_files"].values())
    others = [n for n in fs.listdir(path) if n not in known
              and (layout.parse_cp_name(n) or (0, "", None))[1] not in ("START", "END")]
    return {"dir": path, "state": cp, "checkpoints": entries, "marker_errors": marker_errors,
            "other_files": others}


def recovery_file_summary(path: str) -> dict:
    """Header and record count of a recovery file from its record headers alone (no CRC, no decode)."""
    f = ReadOnlyFile(path)
    try:
        size = f.size()
        out = {"file": path, "size": size, "records": 0, "codec": None, "page_size": None,
               "encrypted": False, "error": None}
        try:
            h = unpack_file_header(f.pread(FILE_HEADER_SIZE, 0), path)
        except RecoveryFileCorrupt as e:
            out["error"] = str(e)
            return out
        out["codec"], out["page_size"] = CODEC_NAMES.get(h.codec, f"codec {h.codec}"), h.page_size
        at = FILE_HEADER_SIZE
        while at < size:
            rh = f.pread(RECORD_HEADER_SIZE, at)
            if len(rh) < RECORD_HEADER_SIZE:
                out["error"] = f"short record header at offset {at}"
                break
            _pid, _codec, flags, length, _crc = RECORD_HEADER.unpack(rh)
            out["encrypted"] |= bool(flags & 2)
            if at + RECORD_HEADER_SIZE + length > size:
                out["error"] = f"short record at offset {at}"
                break
            out["records"] += 1
            at += RECORD_HEADER_SIZE + length
        return out
    finally:
        f.close()


# -- the WAL ---------------------------------------------------------------------------------
def wal_slots(store: str):
    """(slots sorted by number, segment_size or None, segment sizes seen) of <store>/wal."""
    d = os.path.join(store, layout.WAL_DIR)
    slots, sizes = [], set()
    for name in ReadOnlyFS().listdir(d):
        number = layout.parse_slot(name)
        if number is None:
            continue
        slot = read_slot(ReadOnlyFile, posixpath.join(d, name), number)
        if slot.header is not None:
            sizes.add(slot.header.segment_size)
        slots.append(slot)
    seg_size = max(sizes) if len(sizes) == 1 else None
    return slots, seg_size, sorted(sizes)


def wal_newest_fault(store: str, slots) -> tuple[str, str] | None:
    """(file, message) when <store>/wal/NEWEST is damaged or names a segment
    whose file was removed (wal/newest.py: the reopen would refuse), else None."""
    d = os.path.join(store, layout.WAL_DIR)
    path = os.path.join(d, layout.NEWEST)
    if not os.path.exists(path):
        return None
    try:
        with open(path, "rb") as f:
            newest = decode_newest(f.read(NEWEST_SIZE + 1), path)
    except NewestDamaged as e:
        return path, str(e)
    if newest_missing(newest, {s.number for s in slots}, [s.seq for s in slots if s.header is not None]):
        e = NewestSegmentMissing(d, newest)
        return e.path, str(e)
    return None


class SegmentView:
    """The `Segments` surface `wal.reader.scan` reads (slots, segment_size, read_buffer), read-only."""

    def __init__(self, slots, segment_size: int, cipher=None):
        self.slots = {s.number: s for s in slots}
        self.segment_size = segment_size
        self.cipher = cipher        # opens the records of encrypted segments (wal/recseal.py)
        self._maps = []

    def read_buffer(self, slot):
        """`slot`'s segment: mapped read-only, or a zero-padded copy when the file
        is short or sparse (wal/sparse.py: a mapped hole of tmpfs takes space)."""
        S = self.segment_size
        fd = os.open(slot.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if slot.size >= S:
                m = sparse_copy(fd, S) or mmap.mmap(fd, S, access=mmap.ACCESS_READ)
                self._maps.append(m)
                return m
            buf = bytearray(S)
            data = os.pread(fd, slot.size, 0)
            buf[:len(data)] = data
            return buf
        finally:
            os.close(fd)

    def close(self) -> None:
        """Unmap every segment read so far."""
        for m in self._maps:
            try:
                m.close()
            except BufferError:
                pass
        self._maps = []


def walk_segment(view: SegmentView, slot) -> dict:
    """Records of one segment from its first record to the first invalid one."""
    S, seq = view.segment_size, slot.seq
    buf, base = view.read_buffer(slot), seq * S
    out = {"slot": slot.number, "file": slot.path, "seq": seq, "bytes": slot.size,
           "prev_end_lsn": slot.header.prev_end_lsn, "records": 0, "first_lsn": None,
           "last_lsn": None, "end_lsn": None, "types": {}, "checkpoint_ids": []}
    for rec in segment_records(buf, base, S, record_opener(slot.header, buf, view.cipher, slot.path)):
        out["records"] += 1
        if out["first_lsn"] is None:
            out["first_lsn"] = rec.lsn
        out["last_lsn"], out["end_lsn"] = rec.lsn, rec.end_lsn
        name = TYPE_NAMES.get(rec.type, str(rec.type))
        out["types"][name] = out["types"].get(name, 0) + 1
        if name == "CHECKPOINT":
            out["checkpoint_ids"].append(rec.checkpoint_id)
    return out


def _end_at(view: SegmentView, chain, lsn: int) -> bool:
    """True if a whole END trailer of its own lsn sits at `lsn` in a segment
    of `chain`: the writer's log ended there (an END is never sealed, so no
    cipher is needed)."""
    S = view.segment_size
    for slot in chain:
        if slot.seq == lsn // S:
            buf = view.read_buffer(slot)
            rec = read_record(buf, slot.seq * S, lsn % S, len(buf), set())
            return type(rec) is not str and rec.type == WAL_END and rec.lsn == lsn
    return False


def scan_wal(slots, segment_size: int, from_lsn: int, cipher=None) -> dict:
    """The recovery scan from `from_lsn`, read-only: what replay would read and where it stops.
    Encrypted segments need `cipher`."""
    view = SegmentView(slots, segment_size, cipher)
    report = RecoveryReport(from_lsn)
    types, first = {}, None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", WalRecoveryWarning)
            it = scan_wal_chain(view, from_lsn, report)
            try:
                while True:
                    rec = next(it)
                    if first is None:
                        first = (rec.lsn, rec.type, rec.checkpoint_id)
                    name = TYPE_NAMES.get(rec.type, str(rec.type))
                    types[name] = types.get(name, 0) + 1
            except StopIteration as stop:
                end = stop.value
            end_at_stop = _end_at(view, end.chain, report.stop_lsn)
    except BlockSealedSegment as e:          # a fault to report, not a reason to stop the tool
        return {"from_lsn": from_lsn, "stop_lsn": from_lsn, "records": report.records,
                "types": types, "first": first, "gaps": report.gaps, "chain": [], "off_chain": [],
                "torn_tail": False, "tail_bytes": 0,
                "damage": report.damage + [{"file": e.path, "offset": 0, "lsn": None, "reason": str(e)}],
                "end_at_stop": False}
    finally:
        view.close()
    return {"from_lsn": from_lsn, "stop_lsn": report.stop_lsn, "records": report.records,
            "end_at_stop": end_at_stop,
            "types": types, "first": first, "damage": report.damage, "gaps": report.gaps,
            "chain": [{"slot": s.number, "seq": s.seq, "file": s.path} for s in end.chain],
            "off_chain": [{"slot": s.number, "seq": s.seq, "file": s.path} for s in end.off_chain],
            "torn_tail": end.torn, "tail_bytes": report.tail_bytes}
