"""WAL archive compaction: archived segments rewritten as compressed logical-only files.

A compaction *round* reads plain archived segments `seg-<seq>.wal` (oldest
first, a chain in which each segment's header `prev_end_lsn` equals the end of
the previous one's records) until their logical records would exceed
`memory_budget` bytes, and writes them as one file `seg-<first seq>.walc`:
PUT, DELETE, COMMIT and ROLLBACK records, byte for byte with their LSNs;
PAGE_SNAPSHOT, PAGE_DELTA and CHECKPOINT records are dropped. A segment whose
logical records alone exceed the budget forms a round by itself and is
streamed chunk by chunk, so a round never holds more than the budget.

Compacted file, version 1 (integers little-endian)
  header, 80 bytes at offset 0
     0  8  magic b"PSWALCMP"         10  1  codec = 1 (zstd)   12  4  chunks n
     8  2  version = 1              11  1  flags: 1 = chunks sealed
    16  8  first_seq     24  8  last_seq: the file stands for segments first..last
    32  8  segment_size  40  8  prev_end_lsn: the header field of segment first_seq
    48  8  end_lsn: end of the last valid record of last_seq (dropped ones too)
    56  8  table_offset  64  8  source_bytes (size of the source files)
    72  4  record count  76  4  crc32c of bytes 0..76
  chunks: chunk i = zstd(whole records, concatenated as Record.raw); with flag 1
          (an encrypted store) the zstd bytes are a sealed record of
          pagestore/cipher.py, context b"walc\\0" | u64 first_seq | u32 i
          (compressed length and crc below count the sealed bytes)
  offset table at table_offset, n entries of 32 bytes, then crc32c of the table (4)
     0  8  chunk offset in the file      16  8  lsn of the chunk's first record
     8  4  compressed length             24  4  records in the chunk
    12  4  raw length                    28  4  crc32c of the compressed bytes
Validity rule: the header checks (magic, version, codec, crc) and its
first_seq is the seq in the file name; the table crc checks; chunk 0 starts
at 80, each chunk starts where the previous one ends, the last ends at
table_offset, and the file is exactly table_offset + 32 n + 4 bytes. A chunk
is valid iff its crc32c matches, it decompresses to exactly raw length
bytes, and those bytes split into exactly `records` whole records, each
valid by the WAL record rule (crc32c, length, known type with a well-formed
payload) and of a kept type, the first at the table's lsn, lsns increasing,
all within [prev_end_lsn, end_lsn). A reader yields chunks in order and stops
at the first invalid one; the file chains to what follows only when all of it
was read. `.walc.tmp` files are never read. A sealed chunk whose crc
matches but which does not authenticate raises the cipher's EncryptionError
(wrong key); without a key, a sealed file raises NoKeyError.

Crash safety. Each round writes `seg-<first>.walc.tmp`, fsyncs it, renames it
to `.walc`, fsyncs the directory, then removes the source segments and fsyncs
the directory again. A crash leaves the sources, or the complete file (with
some or all sources): `finish_interrupted` (run before every compaction)
removes temp files and the sources a fully valid compacted file covers. The
archive reader prefers a plain segment to a compacted file, so either state
reads the same records. Memory: besides the budget, the compactor holds the
one source segment it is parsing and one compressed chunk.
"""

from __future__ import annotations

import contextlib
import posixpath
import struct
import threading

import cramjam

from pagestore.diskio import PosixFS
from pagestore.diskio.layout import TMP_SUFFIX, compacted_name, parse_archive_name

from .format import BLOCK, COMMIT, DELETE, FIRST_RECORD, PUT, REC_HDR, REC_HDR_LEN, \
    ROLLBACK, crc32c, decode_segment_header, payload_well_formed, physical_end
from .reader import Record, segment_records as records_of
from .recseal import NoKeyError, record_opener, refuse_block_sealed

__all__ = ["CompactedFile", "DEFAULT_MEMORY_BUDGET", "KEPT", "bound_archive",
           "compact", "dir_lock", "finish_interrupted", "list_archive", "read_file", "segment_records"]

KEPT = frozenset((PUT, DELETE, COMMIT, ROLLBACK))
DEFAULT_MEMORY_BUDGET = 64 << 20
CHUNK = 256 << 10
MAGIC, VERSION, ZSTD = b"PSWALCMP", 1, 1
SEALED_CHUNKS = 1
_hdr = struct.Struct("<8sHBBIQQQQQQQII")
_ent = struct.Struct("<QIIQII")
_rec = struct.Struct(REC_HDR)
HDR_LEN = _hdr.size
assert HDR_LEN == 80 and _ent.size == 32


_LOCKS: dict = {}
_LOCKS_MU = threading.Lock()


def _locks(archive_dir: str):
    with _LOCKS_MU:
        return _LOCKS.setdefault(posixpath.normpath(archive_dir), (threading.Lock(), threading.Lock()))


def dir_lock(archive_dir: str) -> threading.Lock:
    """The in-process lock over an archive directory's listing, publishing and bound."""
    return _locks(archive_dir)[0]


def read_file(fs, path: str, n: int | None = None) -> bytes:
    """The first `n` bytes of a file (all of it by default)."""
    f = fs.open(path)
    try:
        return f.pread(f.size() if n is None else n, 0)
    finally:
        f.close()


# -- plain segments ------------------------------------------------------------
def segment_records(buf, cipher=None, path=None):
    """(header, generator of the valid records of a plain segment), header None if invalid.

    `buf` is the segment file's bytes; a record-sealed one has its records
    opened as they are read (wal/recseal.py), which needs `cipher`; a
    block-sealed one (retired) raises BlockSealedSegment naming `path`.

    Records are read from the segment's first record to the first invalid one
    (the rule of wal/reader.py, without the lookahead: a segment that follows
    chains only to the end reached here).
    """
    h = decode_segment_header(buf)
    if h is None or h.segment_size % BLOCK or h.segment_size < FIRST_RECORD:
        return None, iter(())
    refuse_block_sealed(h, path)
    opener = record_opener(h, buf, cipher, path)
    size = min(h.segment_size, len(buf) - len(buf) % BLOCK)
    return h, records_of(buf, h.seq * h.segment_size, size, opener)


# -- compacted files -------------------------------------------------------------
class CompactedFile:
    """A decoded compacted file; `records()` yields its valid records, `damage` says why it stopped."""

    def __init__(self, buf, seq_from_name: int | None = None, cipher=None, path=None):
        self.buf, self.damage, self.complete = buf, None, False
        self.cipher, self.path = cipher, path
        if len(buf) < HDR_LEN:
            raise ValueError("shorter than a header")
        (magic, version, codec, self.flags, n, self.first_seq, self.last_seq, self.segment_size, self.prev_end_lsn,
         self.end_lsn, table_off, self.source_bytes, self.count, crc) = _hdr.unpack_from(buf, 0)
        if magic != MAGIC or version != VERSION or codec != ZSTD or crc32c(bytes(buf[:76])) != crc:
            raise ValueError("bad header")
        if seq_from_name is not None and seq_from_name != self.first_seq:
            raise ValueError("first_seq differs from the file name")
        if self.last_seq < self.first_seq or not self.segment_size:
            raise ValueError("bad segment range")
        if self.flags & SEALED_CHUNKS and cipher is None:
            raise NoKeyError(f"{path}: compacted WAL file is encrypted and no encryption_key "
                             "was given", path=path)
        end = table_off + n * 32
        if len(buf) != end + 4 or struct.unpack_from("<I", buf, end)[0] != crc32c(bytes(buf[table_off:end])):
            raise ValueError("bad offset table")
        self.table = [_ent.unpack_from(buf, table_off + 32 * i) for i in range(n)]
        at = HDR_LEN
        for off, clen, _raw, _lsn, _cnt, _crc in self.table:
            if off != at:
                raise ValueError("chunks are not contiguous")
            at += clen
        if at != table_off:
            raise ValueError("chunks do not end at the table")

    def records(self):
        """Yield the file's valid records in LSN order; on a bad chunk stop and say why in
        `damage`."""
        lo, hi, S = self.prev_end_lsn, self.end_lsn, self.segment_size
        last, total = lo - 1, 0
        for i, (off, clen, rlen, first, cnt, crc) in enumerate(self.table):
            data = bytes(self.buf[off:off + clen])
            if crc32c(data) != crc:
                self.damage = f"chunk {i}: crc mismatch"
                return
            if self.flags & SEALED_CHUNKS:
                data = self.cipher.open(data, _chunk_context(self.first_seq, i), self.path)
            try:
                raw = bytes(cramjam.zstd.decompress(data, output_len=rlen))
            except Exception:  # noqa: BLE001 - any codec failure is damage
                raw = b""
            if len(raw) != rlen:
                self.damage = f"chunk {i}: does not decompress to {rlen} bytes"
                return
            out, pos = [], 0
            while pos < rlen:
                if pos + REC_HDR_LEN > rlen:
                    break
                rcrc, length, lsn, rtype = _rec.unpack_from(raw, pos)
                rec = raw[pos:pos + length]
                if (length < REC_HDR_LEN or pos + length > rlen or crc32c(rec[4:]) != rcrc
                        or rtype not in KEPT or not payload_well_formed(rtype, rec)
                        or not last < lsn < hi or lsn < lo or (not out and lsn != first)):
                    break
                o = lsn % S
                out.append(Record(lsn, lsn - o + physical_end(o, length), rtype, rec))
                last, pos = lsn, pos + length
            if pos != rlen or len(out) != cnt:
                self.damage = f"chunk {i}: invalid record at byte {pos}"
                return
            total += cnt
            yield from out
        if total != self.count:
            self.damage = "record count differs from the header"
            return
        self.complete = True


def _chunk_context(first_seq: int, index: int) -> bytes:
    return b"walc\0" + struct.pack("<QI", first_seq, index)


class _Writer:
    """Streams records into `<path>.tmp` as compressed chunks; `finish` adds table and header."""

    def __init__(self, fs, path: str, level: int, chunk: int, cipher=None, first_seq: int = 0):
        self.fs, self.path, self.level, self.chunk = fs, path, level, chunk
        self.cipher, self.first_seq = cipher, first_seq
        self.f = fs.open(path + TMP_SUFFIX, create=True, truncate=True)
        self.at, self.table, self.pending, self.size, self.count = HDR_LEN, [], [], 0, 0

    def add(self, rec: Record) -> None:
        if self.size + len(rec.raw) > self.chunk and self.pending:
            self._flush()
        self.pending.append(rec)
        self.size += len(rec.raw)

    def _flush(self) -> None:
        raw = b"".join(r.raw for r in self.pending)
        data = bytes(cramjam.zstd.compress(raw, level=self.level))
        if self.cipher is not None:
            data = self.cipher.seal(data, _chunk_context(self.first_seq, len(self.table)))
        self.f.pwrite(data, self.at)
        self.table.append((self.at, len(data), len(raw), self.pending[0].lsn, len(self.pending), crc32c(data)))
        self.at += len(data)
        self.count += len(self.pending)
        self.pending, self.size = [], 0

    def finish(self, first_seq, last_seq, S, prev_end, end, source_bytes) -> int:
        if self.pending:
            self._flush()
        table = b"".join(_ent.pack(*e) for e in self.table)
        self.f.pwrite(table + struct.pack("<I", crc32c(table)), self.at)
        flags = SEALED_CHUNKS if self.cipher is not None else 0
        head = _hdr.pack(MAGIC, VERSION, ZSTD, flags, len(self.table), first_seq, last_seq, S, prev_end, end,
                         self.at, source_bytes, self.count, 0)[:76]
        self.f.pwrite(head + struct.pack("<I", crc32c(head)), 0)
        self.f.fsync()
        self.f.close()
        return self.at + len(table) + 4

    def abandon(self) -> None:
        self.f.close()
        with contextlib.suppress(FileNotFoundError):
            self.fs.remove(self.path + TMP_SUFFIX)


# -- the archive directory ---------------------------------------------------------
def list_archive(fs, archive_dir: str):
    """[(first_seq, last_seq, kind "wal"/"walc", path)] by first_seq; last_seq from a valid header."""
    out = []
    for name in fs.listdir(archive_dir):
        path = posixpath.join(archive_dir, name)
        parsed = parse_archive_name(name)
        if parsed is None:
            continue
        seq, kind = parsed
        if kind == "wal":
            out.append((seq, seq, "wal", path))
        else:
            last = seq
            with contextlib.suppress(Exception):
                head = _hdr.unpack(read_file(fs, path, HDR_LEN))
                if head[0] == MAGIC and crc32c(_hdr.pack(*head)[:76]) == head[-1] and head[5] == seq:
                    last = head[6]
            out.append((seq, last, "walc", path))
    out.sort(key=lambda p: (p[0], p[2]))
    return out


def _complete(fs, path: str, first: int, cipher=None) -> bool:
    """True if the compacted file is valid from end to end."""
    try:
        cf = CompactedFile(read_file(fs, path), first, cipher, path)
    except (ValueError, FileNotFoundError):
        return False
    for _ in cf.records():
        pass
    return cf.complete


def finish_interrupted(fs, archive_dir: str, cipher=None) -> int:
    """Complete what a crash interrupted: drop temp files and covered sources. Returns removals."""
    doomed = [posixpath.join(archive_dir, n) for n in fs.listdir(archive_dir)
              if n.endswith(TMP_SUFFIX) and (parse_archive_name(n[:-len(TMP_SUFFIX)]) or (0, ""))[1] == "walc"]
    pieces = list_archive(fs, archive_dir)
    for first, last, kind, path in pieces:
        covered = [p for s, _l, k, p in pieces if k == "wal" and first <= s <= last]
        if kind == "walc" and covered and _complete(fs, path, first, cipher):
            doomed += covered
    for path in doomed:
        fs.remove(path)
    removed = len(doomed)
    if removed:
        fs.fsync_dir(archive_dir)
    return removed


def bound_archive(fs, archive_dir: str, max_bytes: int) -> int:
    """Remove the oldest pieces (plain or compacted) until the archive fits; the newest stays."""
    pieces = list_archive(fs, archive_dir)
    sizes = [fs.size(p[3]) for p in pieces]
    total, removed = sum(sizes), 0
    for piece, size in zip(pieces[:-1], sizes[:-1]):
        if total <= max_bytes:
            break
        fs.remove(piece[3])
        total -= size
        removed += 1
    if removed:
        fs.fsync_dir(archive_dir)
    return removed


# -- compaction ----------------------------------------------------------------------
def compact(archive_dir: str, memory_budget: int = DEFAULT_MEMORY_BUDGET, *, fs=None,
            max_bytes: int | None = None, level: int = 3, chunk_size: int = CHUNK, cipher=None) -> dict:
    """Compact every plain segment of `archive_dir` in memory-bounded rounds; returns figures.

    One compaction runs at a time per directory in a process (a second call
    waits). `dir_lock(archive_dir)`, which `Archive` shares, is held while
    listing and while a round's file is published and its sources removed;
    `max_bytes` applies the archive bound after each round. Figures: rounds,
    segments, records_in, records_kept, bytes_in, bytes_out, peak_held (the
    most record bytes a round held), aborted, files. With `cipher` (the
    store's), sealed segments are read and the output chunks are sealed.
    """
    if memory_budget < 1:
        raise ValueError("memory_budget must be >= 1")
    fs = fs or PosixFS()
    lock, run = _locks(archive_dir)
    with run:
        return _compact(fs, archive_dir, memory_budget, lock, max_bytes, level, chunk_size, cipher)


def _compact(fs, archive_dir, memory_budget, lock, max_bytes, level, chunk_size, cipher) -> dict:
    chunk_size = max(1, min(chunk_size, memory_budget))
    st = {"rounds": 0, "segments": 0, "records_in": 0, "records_kept": 0, "bytes_in": 0, "bytes_out": 0,
          "peak_held": 0, "aborted": 0, "files": []}
    with lock:
        finish_interrupted(fs, archive_dir, cipher)
        plain = [(s, p) for s, _l, k, p in list_archive(fs, archive_dir) if k == "wal"]
    rnd: dict = {}
    held: list = []

    def flush(records=None, peak=None):
        """Write the round's file (from `held`, or `records` streamed), publish it, remove its sources."""
        if not rnd:
            return
        path = posixpath.join(archive_dir, compacted_name(rnd['first']))
        w = _Writer(fs, path, level, chunk_size, cipher, rnd["first"])
        try:
            for rec in held if records is None else records:
                w.add(rec)
            out = w.finish(rnd["first"], rnd["last"], rnd["S"], rnd["prev"], rnd["end"], rnd["bytes"])
        except Exception:
            w.abandon()
            raise
        held.clear()
        with lock:
            if not all(fs.exists(p) for p in rnd["paths"]):     # the bound removed a source meanwhile
                fs.remove(path + TMP_SUFFIX)
                st["aborted"] += 1
            else:
                fs.rename(path + TMP_SUFFIX, path)
                fs.fsync_dir(archive_dir)
                for p in rnd["paths"]:
                    fs.remove(p)
                fs.fsync_dir(archive_dir)
                for key, value in (("rounds", 1), ("segments", len(rnd["paths"])), ("records_kept", w.count),
                                   ("bytes_in", rnd["bytes"]), ("bytes_out", out)):
                    st[key] += value
                st["peak_held"] = max(st["peak_held"], rnd["held"] if peak is None else peak)
                st["files"].append(path)
                if max_bytes is not None:
                    bound_archive(fs, archive_dir, max_bytes)
        rnd.clear()

    for seq, path in plain:
        try:
            buf = read_file(fs, path)
        except FileNotFoundError:
            flush()
            continue
        h, recs = segment_records(buf, cipher, path)
        if h is None or h.seq != seq:                              # left in place, not compacted
            flush()
            continue
        size = n_all = 0
        end = h.prev_end_lsn
        for rec in recs:
            n_all += 1
            end = rec.end_lsn
            size += len(rec.raw) if rec.type in KEPT else 0
        chained = rnd and h.prev_end_lsn == rnd["end"] and h.segment_size == rnd["S"]
        if rnd and (not chained or rnd["held"] + size > memory_budget):
            flush()
        if not rnd:
            rnd.update(first=seq, prev=h.prev_end_lsn, S=h.segment_size, paths=[], bytes=0, held=0)
        rnd.update(last=seq, end=end, held=rnd["held"] + size, bytes=rnd["bytes"] + len(buf))
        rnd["paths"].append(path)
        st["records_in"] += n_all
        kept = (r for r in segment_records(buf, cipher, path)[1] if r.type in KEPT)
        if size > memory_budget:                                   # a round by itself, streamed
            flush(kept, min(size, chunk_size))
        else:
            held.extend(kept)
    flush()
    return st
