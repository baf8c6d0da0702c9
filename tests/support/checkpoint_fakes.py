"""Test doubles for the checkpoint protocol (tests of checkpoint/ and recovery/).

* `FakePageSource`: page images in a dict, a dirty set, and a copy-on-write
  map that behaves like the C core's checkpoint buffer: modifying a page of
  the running checkpoint that has not been released yet first copies it, so
  `copy_pages` always returns the image as of `begin`. Like the core's
  ckpt_begin, `begin` stamps the checkpoint's id into the header of every
  page it snapshots (checkpoint/page_header.py), so restored images, whether
  from recovery files or rebuilt from WAL page records, carry the same id.
* `FileSink`: writes pages in place at `page_id * page_size` of one page file
  through `diskio`, so the crash simulator can tear them.
* `FakeWal`: records `flush`/`trim` calls.
* `RecordingFS`: a pass-through file system that logs (op, path), to check
  the order of durable steps.
* `make_page` / `page_ok`: pages with the common header and a zero gap, so
  "not torn" can be checked; a page's `version` sits in the first body bytes.
"""

from __future__ import annotations

import random
import struct
import threading
import time
from array import array
from dataclasses import dataclass

from crc32c import crc32c

from pagestore import diskio
from pagestore.checkpoint import page_header as ph
from pagestore.checkpoint.checkpointer import Checkpointer
from pagestore.checkpoint.compression import PageCodec
from pagestore.checkpoint.pagerecords import (CHECKPOINT, PAGE_DELTA, PAGE_SNAPSHOT, pack_page_delta,
                                              pack_page_snapshot)

__all__ = ["Snapshot", "WalRecord", "Harness", "FakePageSource", "FileSink", "FakeWal", "RecordingFS", "make_page",
           "page_ok", "seal", "stamped"]

_CRC = struct.Struct("<I")
_VERSION = struct.Struct("<Q")         # make_page's version, at the start of the body


@dataclass
class WalRecord:
    type: int
    payload: bytes
    lsn: int


@dataclass
class Snapshot:
    page_ids: array
    wal_lsn: int
    lock_seconds: float


def seal(buf, page_id: int, page_size: int | None = None) -> None:
    """Stamp the page CRC (over the page with the CRC field zeroed)."""
    view = memoryview(buf)
    _CRC.pack_into(view, ph.CRC_AT, 0)
    _CRC.pack_into(view, ph.CRC_AT, crc32c(view))


def page_ok(img, page_id: int) -> bool:
    """CRC and page-id check, as the store does on every read."""
    if len(img) < ph.HEADER_SIZE:
        return False
    page = bytearray(img)
    (crc,) = _CRC.unpack_from(page, ph.CRC_AT)
    _CRC.pack_into(page, ph.CRC_AT, 0)
    return crc == crc32c(page) and ph.page_id_of(page) == page_id


def stamped(img, checkpoint_id: int) -> bytearray:
    """`img` as a checkpoint writes it: its checkpoint_id field set, its CRC restamped."""
    out = bytearray(img)
    ph.stamp_checkpoint_id(out, checkpoint_id)
    seal(out, ph.page_id_of(out))
    return out


def make_page(page_id: int, page_size: int, rng: random.Random, version: int = 0, zero_gap: bool = True) -> bytearray:
    page = bytearray(page_size)
    body = ph.BODY_AT + _VERSION.size
    lo = rng.randrange(body, page_size // 2)
    hi = rng.randrange(lo + 1, page_size)
    ph.HEADER.pack_into(page, 0, 0, ph.LEAF, 1, page_id, 0, lo, hi, 0)
    _VERSION.pack_into(page, ph.BODY_AT, version)
    page[body:lo] = rng.randbytes(lo - body)
    page[hi:] = rng.randbytes(page_size - hi)
    if not zero_gap:
        page[lo:hi] = rng.randbytes(hi - lo)
    seal(page, page_id)
    return page


class FakePageSource:
    """PageSource over a dict of images (docs/architecture.md)."""

    def __init__(self, page_size: int, pages: dict, *, cow_capacity: int = 1 << 30, lsn: int = 0,
                 page_records: bool = False, codec: str = "skip_garbage"):
        self.page_size = page_size
        # Legacy mode: log PAGE_SNAPSHOT on a page's first change after a
        # begin, PAGE_DELTA after that, and CHECKPOINT at each begin.
        self.page_records = page_records
        self.codec = PageCodec(codec, page_size=page_size)
        self.records: list[WalRecord] = []
        self.logged: set[int] = set()
        self.pages = {pid: bytearray(img) for pid, img in pages.items()}
        self.dirty: set[int] = set()
        self.cow: dict[int, bytes] = {}
        self.in_checkpoint: set[int] = set()
        self.cow_capacity, self.cow_peak = cow_capacity, 0
        self.lsn = lsn
        self.lock = threading.Lock()
        self.events: list[tuple] = []
        self.on_copy = None      # hook(page_ids) called inside copy_pages, for tests

    def put(self, page_id: int, image) -> None:
        """A writer modifies a page: copy-on-write if the checkpoint still needs it."""
        with self.lock:
            if page_id in self.in_checkpoint and page_id not in self.cow:
                if len(self.cow) >= self.cow_capacity:
                    raise RuntimeError("checkpoint buffer full")
                self.cow[page_id] = bytes(self.pages[page_id])
                self.cow_peak = max(self.cow_peak, len(self.cow))
            old, self.pages[page_id] = self.pages[page_id], bytearray(image)
            self.dirty.add(page_id)
            self.lsn += 1
            if self.page_records:
                self._log_page(page_id, old, self.pages[page_id])

    def _log_page(self, page_id: int, old, new) -> None:
        if page_id not in self.logged:
            self.logged.add(page_id)
            self.records.append(WalRecord(PAGE_SNAPSHOT, pack_page_snapshot(page_id, new, self.codec), self.lsn))
            return
        diff = [i for i in range(len(new)) if old[i] != new[i]]
        ranges = [(diff[0], bytes(new[diff[0]:diff[-1] + 1]))] if diff else []
        self.records.append(WalRecord(PAGE_DELTA, pack_page_delta(page_id, ranges), self.lsn))

    def begin(self, checkpoint_id: int) -> Snapshot:
        t = time.perf_counter()
        with self.lock:
            ids = sorted(self.dirty)
            self.dirty.clear()
            self.in_checkpoint = set(ids)
            for pid in ids:          # the core stamps the copy headed to disk; the fake, the page
                self.pages[pid] = stamped(self.pages[pid], checkpoint_id)
            self.lsn += 10
            snap = Snapshot(array("Q", ids), self.lsn, 0.0)
            if self.page_records:
                self.logged.clear()
                self.records.append(WalRecord(CHECKPOINT, _VERSION.pack(checkpoint_id), self.lsn))
        snap.lock_seconds = time.perf_counter() - t
        self.events.append(("begin", checkpoint_id, snap.wal_lsn))
        return snap

    def images_after(self, checkpoint_id: int) -> dict:
        """{page_id: bytes} as a checkpoint `checkpoint_id` begun now leaves the page
        file: the dirty pages stamped with its id, every other page as it is."""
        with self.lock:
            return {i: bytes(stamped(p, checkpoint_id)) if i in self.dirty else bytes(p)
                    for i, p in self.pages.items()}

    def copy_pages(self, page_ids, out) -> None:
        if self.on_copy is not None:
            self.on_copy(page_ids)
        ps = self.page_size
        with self.lock:
            for i, pid in enumerate(page_ids):
                src = self.cow.get(pid)
                out[i * ps:(i + 1) * ps] = src if src is not None else self.pages[pid]

    def release(self, page_ids) -> None:
        with self.lock:
            for pid in page_ids:
                self.in_checkpoint.discard(pid)
                self.cow.pop(pid, None)

    def finish(self) -> None:
        with self.lock:
            self.in_checkpoint.clear()
            self.cow.clear()
        self.events.append(("finish",))

    def checkpoint_buffer(self):
        with self.lock:
            return len(self.cow), self.cow_capacity, self.cow_peak

    def pages_with_copy(self):
        with self.lock:
            return sorted(self.cow)


class FileSink:
    """PageSink writing page i at offset i * page_size of `path`."""

    def __init__(self, fs, path: str, page_size: int):
        self.fs, self.path, self.page_size = fs, path, page_size
        self.file = fs.open(path, create=True)
        self.writes: list[int] = []      # page ids in write order
        self.on_write = None             # hook(page_ids) before writing, for tests
        self.syncs = 0

    def missing(self) -> str | None:
        return None if self.fs.exists(self.path) else self.path

    def write_pages(self, page_ids, images) -> None:
        if self.on_write is not None:
            self.on_write(page_ids)
        ps = self.page_size
        for i, pid in enumerate(page_ids):
            self.file.pwrite(images[i * ps:(i + 1) * ps], pid * ps)
        self.writes.extend(page_ids)

    def sync(self) -> None:
        self.file.fsync()
        self.syncs += 1

    def read_all(self, count: int) -> dict:
        ps = self.page_size
        return {pid: self.file.pread(ps, pid * ps) for pid in range(count)}

    def close(self) -> None:
        self.file.close()


class FakeWal:
    def __init__(self) -> None:
        self.flushed: list[int] = []
        self.trimmed: list[int] = []

    def flush(self, lsn: int) -> None:
        self.flushed.append(lsn)

    def trim(self, lsn: int) -> None:
        self.trimmed.append(lsn)

    def missing(self) -> str | None:
        return None


class RecordingFS:
    """Delegates to a FileSystem and logs (op, path) of every durable-relevant call."""

    def __init__(self, fs):
        self._fs = fs
        self.log: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def _note(self, op: str, path: str) -> None:
        with self._lock:
            self.log.append((op, path))

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def open(self, path, **kw):
        self._note("open", path)
        return _RecordingFile(self, self._fs.open(path, **kw))

    def remove(self, path):
        self._note("remove", path)
        self._fs.remove(path)

    def rename(self, src, dst):
        self._note("rename", dst)
        self._fs.rename(src, dst)

    def fsync_dir(self, path):
        self._note("fsync_dir", path)
        self._fs.fsync_dir(path)

    def write_atomic(self, path, data, *, crash_point=None):
        # Re-run the base composition through this wrapper so its steps are logged.
        type(self._fs).write_atomic(self, path, data, crash_point=crash_point)

    def crash_point(self, name):
        self._note("crash_point", name)
        self._fs.crash_point(name)


class _RecordingFile:
    def __init__(self, rfs: RecordingFS, f):
        self._rfs, self._f = rfs, f
        self.path = f.path

    def __getattr__(self, name):
        return getattr(self._f, name)

    def pwrite(self, data, offset):
        self._rfs._note("pwrite", self.path)
        return self._f.pwrite(data, offset)

    def fsync(self):
        self._rfs._note("fsync", self.path)
        self._f.fsync()


class Harness:
    """A store on a SimFS: page file of `n` pages, fake source, fake WAL, checkpointer.

    `images[k]` holds every page's image as of checkpoint k (`images[0]`:
    the initial page file), which is what recovery must reproduce exactly.
    """

    def __init__(self, n: int = 64, page_size: int = 4096, seed: int = 0, *, recovery_data: str = "checkpoint",
                 **cp_kw):
        self.fs = diskio.SimFS()
        self.fs.makedirs("/db")
        self.n, self.page_size, self.rng = n, page_size, random.Random(seed)
        pages = {i: make_page(i, page_size, self.rng) for i in range(n)}
        self.sink = FileSink(self.fs, "/db/pages.dat", page_size)
        for i, p in pages.items():
            self.sink.file.pwrite(p, i * page_size)
        self.sink.sync()
        self.fs.fsync_dir("/db")
        self.src = FakePageSource(page_size, pages, page_records=recovery_data == "wal")
        self.wal = FakeWal()
        self.images = {0: {i: bytes(p) for i, p in pages.items()}}
        self.cp_kw = dict(threads=2, chunk_pages=4, interval=None, recovery_data=recovery_data, **cp_kw)
        self.cp = None
        self.version = 0

    def modify(self, ids) -> None:
        self.version += 1
        for i in ids:
            self.src.put(i, make_page(i, self.page_size, self.rng, self.version))

    def checkpoint(self, crash_at: str | None = None, hit: int = 1, io: int | None = None):
        """Run one checkpoint; returns its stats, or None if the armed crash fired."""
        if self.cp is None:
            self.cp = Checkpointer(self.fs, "/db", self.src, self.sink, self.wal, **self.cp_kw)
        cid = self.cp._next_id
        self.images[cid] = self.src.images_after(cid)
        if crash_at is not None:
            self.fs.arm(crash_at, hit)
        if io is not None:
            self.fs.arm_io(io)
        try:
            return self.cp.checkpoint()
        except diskio.SimulatedCrash:
            self.cp.close(final_checkpoint=False)
            self.cp = None
            return None
        finally:
            self.fs.disarm()

    def power_loss(self, seed=0, mode: str = "random"):
        """Crash the SimFS; the restarted process reopens its page file."""
        if self.cp is not None:
            self.cp.close(final_checkpoint=False)
            self.cp = None
        report = self.fs.crash(random.Random(seed), mode)
        self.sink = FileSink(self.fs, "/db/pages.dat", self.page_size)
        return report

    def restart(self, pages: dict) -> None:
        """A new process over the recovered page file (WAL records are kept)."""
        records, lsn = self.src.records, self.src.lsn
        self.src = FakePageSource(self.page_size, pages, lsn=lsn, page_records=self.src.page_records)
        self.src.records = records

    def wal_records(self, start_lsn: int):
        return iter([r for r in self.src.records if r.lsn >= start_lsn])

    def disk(self) -> dict:
        return self.sink.read_all(self.n)

    def close(self) -> None:
        if self.cp is not None:
            self.cp.close(final_checkpoint=False)
            self.cp = None
