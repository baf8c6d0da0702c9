"""The WAL archive: copies of trimmed segments, compacted in the background, bounded in size.

Option `wal_archive` (docs/options.md) names a directory that receives each
segment a checkpoint trims, before its slot is reused: `seg-<seq, 16
digits>.wal`, the slot file's bytes as they were. Copies are durable (file
fsync, then directory fsync) before the slot is handed back for reuse. Once
`compact_after` plain copies have accumulated, a background thread compacts
them (wal/compact.py) into `seg-<first seq>.walc` files: logical records
only, zstd-compressed, in rounds bounded by `memory_budget`. The archive is
bounded by `archive_size`, counting plain and compacted files; the oldest
(lowest first seq) are removed first, but the newest is always kept.
docs/wal-archive.md has the whole picture.

`iter_archive` reads the logical records back in LSN order from plain and
compacted files (and, optionally, a store's live WAL directory after them),
stopping at the first gap. Recovery of the store never reads the archive;
`rebuild` uses it to bring an older copy of a store up to date.

Encryption: a copy is the slot file's bytes, so an encrypted store's archived
segments stay sealed (wal/recseal.py); the compactor and the readers here
open their records with the store's cipher, and compacted files of an encrypted store
have sealed chunks (wal/compact.py).
"""

from __future__ import annotations

import posixpath
import threading

from pagestore.diskio import PosixFS
from pagestore.diskio.layout import TMP_SUFFIX, WAL_DIR, archive_name, parse_slot

from .compact import DEFAULT_MEMORY_BUDGET, KEPT, CompactedFile, bound_archive, compact, dir_lock, \
    list_archive, read_file, segment_records
from .format import DELETE, PUT, SEG_HDR_LEN, decode_segment_header
from .reader import committed_records

__all__ = ["Archive", "iter_archive", "rebuild", "wal_end"]

_CHUNK = 1 << 20
_RANK = {"wal": 0, "slot": 1, "walc": 2}   # which copy of a segment a reader prefers


class Archive:
    """The archive directory of one store (see the module docstring)."""

    def __init__(self, fs, dirpath: str, max_bytes: int, *, compact_after: int = 4,
                 memory_budget: int = DEFAULT_MEMORY_BUDGET, cipher=None):
        self.fs = fs
        self.cipher = cipher
        self.dir = dirpath
        self.max_bytes = max_bytes
        self.compact_after = compact_after      # 0: never compact in the background
        self.memory_budget = memory_budget
        if not fs.exists(dirpath):
            fs.makedirs(dirpath)
        self.archived = 0
        self.lock = dir_lock(dirpath)           # listing, publishing rounds and the bound
        self.compactions = 0
        self.compact_stats: dict = {}
        self.compact_error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def path_of(self, seq: int) -> str:
        """The path of the plain archived copy of segment `seq`."""
        return posixpath.join(self.dir, archive_name(seq))

    def add(self, seq: int, src_path: str) -> str:
        """Copy the slot file `src_path`, which holds segment `seq`, into the archive."""
        fs, dst = self.fs, self.path_of(seq)
        src = fs.open(src_path)
        out = fs.open(dst + TMP_SUFFIX, create=True, truncate=True)
        try:
            size = src.size()
            for at in range(0, size, _CHUNK):
                out.pwrite(src.pread(min(_CHUNK, size - at), at), at)
            out.fsync()
        finally:
            out.close()
            src.close()
        with self.lock:
            fs.rename(dst + TMP_SUFFIX, dst)
            fs.fsync_dir(self.dir)
            self.archived += 1
            bound_archive(fs, self.dir, self.max_bytes)
        self._maybe_compact()
        return dst

    # -- background compaction -------------------------------------------------------
    def _maybe_compact(self) -> None:
        if not self.compact_after or (self._thread is not None and self._thread.is_alive()):
            return
        with self.lock:
            plain = sum(1 for p in list_archive(self.fs, self.dir) if p[2] == "wal")
        if plain >= self.compact_after:
            self._thread = threading.Thread(target=self._compact, name="wal-archive-compactor", daemon=True)
            self._thread.start()

    def _compact(self) -> None:
        try:
            st = compact(self.dir, self.memory_budget, fs=self.fs, max_bytes=self.max_bytes,
                         cipher=self.cipher)
        except BaseException as exc:  # kept for the owner; the next add tries again
            self.compact_error = exc
            return
        self.compactions += st["rounds"]
        for key, value in st.items():
            if isinstance(value, int):
                self.compact_stats[key] = self.compact_stats.get(key, 0) + value

    def compact_now(self) -> dict:
        """Wait for a background round, then compact synchronously; returns the figures."""
        self.join()
        st = compact(self.dir, self.memory_budget, fs=self.fs, max_bytes=self.max_bytes,
                     cipher=self.cipher)
        self.compactions += st["rounds"]
        return st

    def join(self) -> None:
        """Wait for the background compactor, if one runs."""
        thread = self._thread
        if thread is not None:
            thread.join()

    close = join


# -- reading the archive ------------------------------------------------------------
class _Piece:
    __slots__ = ("first", "last", "kind", "path", "prev_end", "segment_size")

    def __init__(self, first, last, kind, path, prev_end, segment_size):
        self.first, self.last, self.kind, self.path = first, last, kind, path
        self.prev_end, self.segment_size = prev_end, segment_size


def _pieces(fs, archive_dir: str, wal_dir: str | None, cache: dict, cipher=None) -> list:
    """Every readable piece (archive plain/compacted files, live slots), headers cached by path and size."""
    found = list_archive(fs, archive_dir)     # a new list: the slots are added to it
    if wal_dir is not None and fs.exists(wal_dir):
        found += [(None, None, "slot", posixpath.join(wal_dir, n)) for n in fs.listdir(wal_dir)
                  if parse_slot(n) is not None]
    out = []
    for first, last, kind, path in found:
        try:
            key = (path, fs.size(path))
            if key not in cache:
                cache[key] = _header(fs, path, kind, first, last, cipher)
        except FileNotFoundError:
            continue
        if cache[key] is not None:
            out.append(cache[key])
    out.sort(key=lambda pc: (pc.first, _RANK[pc.kind]))
    return out


def _header(fs, path, kind, first, last, cipher=None):
    if kind == "walc":
        try:
            cf = CompactedFile(read_file(fs, path), first, cipher, path)
        except ValueError:
            return None
        return _Piece(cf.first_seq, cf.last_seq, kind, path, cf.prev_end_lsn, cf.segment_size)
    h = decode_segment_header(read_file(fs, path, SEG_HDR_LEN))
    if h is None or (first is not None and h.seq != first):
        return None
    return _Piece(h.seq, h.seq, kind, path, h.prev_end_lsn, h.segment_size)


def _choose(pieces, p: int, last_seq):
    if last_seq is None:                   # the start: the piece holding p's segment
        S = pieces[0].segment_size
        s = p // S
        hold = [pc for pc in pieces if pc.first <= s <= pc.last]
        if hold:
            return min(hold, key=lambda pc: (_RANK[pc.kind], pc.first))
        nxt = [pc for pc in pieces if pc.first > s and pc.prev_end == p]
        return nxt[0] if nxt else None
    chained = [pc for pc in pieces if pc.first > last_seq and pc.prev_end == p]
    if chained:
        return min(chained, key=lambda pc: (_RANK[pc.kind], pc.first))
    inside = [pc for pc in pieces if pc.kind == "walc" and pc.first <= last_seq < pc.last]
    return inside[0] if inside else None


def iter_archive(fs, archive_dir: str, from_lsn: int, *, wal_dir: str | None = None, report: dict | None = None,
                 types=KEPT, cipher=None):
    """Yield the logical records (wal.reader.Record) from `from_lsn` on, in LSN order.

    Reads plain and compacted archived segments (a plain copy is preferred
    where both exist) and, with `wal_dir`, a store's WAL slot files after
    them. Each next piece must chain: its `prev_end_lsn` equals the end of
    the records read so far, or it is a compacted file that also covers the
    segment just read. The walk stops at the first gap or damaged piece.
    `report` (a dict) receives `from_lsn`, `end_lsn`, `records`, `pieces`,
    and `stop`: "end" (nothing later), "gap" (later pieces do not chain),
    "damage" (a piece is unreadable; `damage` names it), or "missing" (the
    archive does not reach back to `from_lsn`). `cipher` reads an encrypted
    store's files.
    """
    report = {} if report is None else report
    report.update(from_lsn=from_lsn, end_lsn=from_lsn, records=0, pieces=0, stop="end", damage=None)
    p, last_seq, cache, retries = from_lsn, None, {}, 0
    while True:
        pieces = _pieces(fs, archive_dir, wal_dir, cache, cipher)
        if not pieces:
            return
        pc = _choose(pieces, p, last_seq)
        if pc is None:
            if last_seq is None:
                if any(x.first > p // x.segment_size for x in pieces):
                    report["stop"] = "missing"
            elif any(x.first > last_seq for x in pieces):
                report["stop"] = "gap"
            return
        try:
            buf = read_file(fs, pc.path)
        except FileNotFoundError:          # a compaction round replaced it meanwhile
            retries += 1
            if retries > 100:
                raise
            continue
        start, end = p, None
        if pc.kind == "walc":
            try:
                cf = CompactedFile(buf, pc.first, cipher, pc.path)
            except ValueError as exc:      # rewritten since its header was read: damage now
                report.update(stop="damage", damage={"file": pc.path, "reason": str(exc)})
                return
            recs = cf.records()
        else:
            _h, recs = segment_records(buf, cipher, pc.path)
        for rec in recs:
            if rec.lsn < start:
                continue
            end = rec.end_lsn
            if rec.type in types:
                report["records"] += 1
                yield rec
        report["pieces"] += 1
        if pc.kind == "walc":
            if not cf.complete:
                report.update(stop="damage", damage={"file": pc.path, "reason": cf.damage},
                              end_lsn=max(p, end or p))
                return
            end = cf.end_lsn
        p = max(p, end if end is not None else pc.prev_end)
        last_seq = pc.last
        report["end_lsn"] = p


def wal_end(fs, wal_dir: str, cipher=None) -> int:
    """The end LSN of the log in a store's WAL directory (its newest segment), 0 if it has none.

    Meant for a copy of a closed store: its newest segment holds the end of
    its log.
    """
    best = None
    if fs.exists(wal_dir):
        for name in fs.listdir(wal_dir):
            if parse_slot(name) is not None:
                h = decode_segment_header(read_file(fs, posixpath.join(wal_dir, name), SEG_HDR_LEN))
                if h is not None and (best is None or h.seq > best[0]):
                    best = (h.seq, name)
    if best is None:
        return 0
    path = posixpath.join(wal_dir, best[1])
    h, recs = segment_records(read_file(fs, path), cipher, path)
    end = h.prev_end_lsn
    for rec in recs:
        end = rec.end_lsn
    return end


# -- rebuild ------------------------------------------------------------------------
def rebuild(backup_dir: str, archive_dir: str, *, open_store, fs=None, wal_dir: str | None = None,
            cipher=None, **options) -> dict:
    """Bring a copy of a store up to date from the archive (and optionally a newer WAL directory).

    `open_store` is `pagestore.open` (passed in: `wal` does not import
    `pagestore`). The copy is opened, which recovers it from its own WAL up
    to that WAL's end; then every committed logical record the archive holds
    from that end on (and, with `wal_dir`, the records of the source store's
    live WAL chained after the archive) is applied through the store's API
    in log order: single operations as put/delete, each transaction as one
    transaction. Returns figures including `from_lsn`, `end_lsn`, `stop`.
    An encrypted store's files are read with `cipher` (a
    pagestore.cipher.Cipher made from the same `encryption_key`).
    """
    fs = fs or PosixFS()
    start = wal_end(fs, posixpath.join(backup_dir, WAL_DIR), cipher)
    report: dict = {}
    db = open_store(backup_dir, fs=fs, **options)
    applied = units = 0
    try:
        for unit in committed_records(iter_archive(fs, archive_dir, start, wal_dir=wal_dir, report=report,
                                                             cipher=cipher)):
            ops = [r for r in unit if r.type in (PUT, DELETE)]
            if not ops:
                continue
            units += 1
            applied += len(ops)
            target = db if len(ops) == 1 and ops[0].txid == 0 else db.transaction()
            for r in ops:
                if r.type == PUT:
                    target.put(r.key, r.value)
                else:
                    target.delete(r.key)
            if target is not db:
                target.commit()
    finally:
        db.close()
    return dict(report, from_lsn=start, operations=applied, units=units)
