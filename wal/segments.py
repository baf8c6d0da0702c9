"""WAL segment slot files: discovery, preallocation, mapping, reuse in rotation.

A slot is a file `<wal dir>/seg-NNNNNNNN.wal` (diskio/layout.py) of exactly
`segment_size` bytes; the number in its name is only a slot number, the segment header
inside says which absolute `seq` the slot currently holds. Slots are created
on demand and reused once the segment they hold lies wholly before the trim
pointer (seq < trim_lsn // segment_size).

Sizing. With `progress` (the writer's end LSN, given by wal/log.py) a slot
is sparse: `segment_size` bytes of apparent size (readers and mappings see a
whole segment, holes read as zeros), its first GROW_FIRST bytes allocated and
zeroed when prepared, and the grower thread allocates the newest live
segment ahead of the writer (`File.allocate`, which changes no byte, so it
may run while the encoder writes). Once the writer has moved past a whole
segment in this process, slots are prepared whole (allocated and zeroed),
the cheapest case for fdatasync. A new store's WAL is then ~2 MiB, not two
whole segments. Without `progress`, every slot is prepared whole.

Invariants:
  (1) A slot is handed to the writer only after its file is preallocated
      (its first GROW_FIRST bytes when sparse; apparent size segment_size),
      fsynced, and (when new) its directory entry is fsynced: a record
      acknowledged as durable never sits in a file that can vanish. A record
      written into a hole is made durable by the same fdatasync, which also
      commits the allocation.
  (2) Each seq is held by at most one slot the reader can reach: recovery
      renames every slot outside the replay chain aside before a fresh
      segment is written (wal/log.py).
  (3) One spare slot is prepared ahead of need (in a background thread), so
      the C encoder's next-segment callback only takes it.
  (4) Write paths. "mmap": the writer's buffer is a shared mapping of the
      slot file. "pwrite" (fsync mode, O_DIRECT): the buffer is anonymous,
      4096-aligned memory of segment_size bytes, and `publish` pwrites
      whole 4 KiB blocks of it to the same offsets of the open slot file.
      Bytes of the file below the published point equal the buffer's.
  (5) With a cipher (encryption_key) every record is sealed (wal/recseal.py)
      and the file is the logical segment, so both write paths work as
      without a cipher. sealer="c": the encoder seals each record as it
      writes it. sealer="python" (the C core has no libcrypto): the encoder
      lays records out with their tags reserved, and `publish` seals each
      new record in the buffer (RecordSealer) before it pwrites; that needs
      the pwrite path, since a shared mapping would put plaintext in the
      file. A segment of the retired block-sealed encoding is refused when
      the replay needs it (wal/reader.py); a free slot holding one is zeroed
      before reuse like any slot of another kind.
  (6) `acquire` names the segment (seq, slot) in wal/NEWEST (wal/newest.py)
      before it returns the buffer: a reopen notices the file removed.

Every file operation goes through the `diskio` file system given.
"""

from __future__ import annotations

import posixpath
import threading

from pagestore.diskio import PosixFS
from pagestore.diskio.layout import NEWEST, TMP_SUFFIX, parse_slot, slot_name

from .format import BLOCK, end_after, end_image
from .growth import Growth
from .newest import Newest, write_newest
from .recseal import RecordSealer
from .slot import LiveSegment, SegmentSizeMismatch, Slot, read_slot
from .spare import SparePreparer
from .sparse import sparse_copy

__all__ = ["Segments", "Slot", "read_slot", "slot_name", "SEALERS", "WRITE_PATHS"]

WRITE_PATHS = ("mmap", "pwrite")
SEALERS = ("c", "python")   # with a cipher: who seals the records (wal/recseal.py)

class Segments(SparePreparer, Growth):
    """The slot files of one WAL directory."""

    def __init__(self, fs, dirpath: str, segment_size: int, archive=None, *,
                 write_path: str = "mmap", direct: bool = False, cipher=None,
                 sealer: str = "c", progress=None):
        if write_path not in WRITE_PATHS:
            raise ValueError(f"write_path must be one of {WRITE_PATHS}, got {write_path!r}")
        if sealer not in SEALERS:
            raise ValueError(f"sealer must be one of {SEALERS}, got {sealer!r}")
        if direct and write_path != "pwrite":
            raise ValueError("direct=True needs write_path='pwrite'")
        self.seal_in_python = cipher is not None and sealer == "python"
        if self.seal_in_python and direct:
            raise ValueError("option 'wal_direct': O_DIRECT cannot write records sealed in Python "
                             "(they are written in unaligned pieces); turn off wal_direct or "
                             "encryption_key")
        if self.seal_in_python and write_path != "pwrite":
            raise ValueError("records sealed in Python are written through write_path='pwrite' "
                             "(a shared mapping would put plaintext in the file)")
        self.cipher = cipher
        self.fs = fs
        self.write_path = write_path
        self.pwrite_path = write_path == "pwrite"
        self.direct = direct
        # Slot files are opened for writing through `_wfs`. A buffered
        # PosixFS opens direct=True files buffered, so O_DIRECT asked of
        # the WAL alone gets a PosixFS of its own for those opens.
        self._wfs = PosixFS(direct=True) if direct and isinstance(fs, PosixFS) and not fs.direct else fs
        self.pwrites = 0           # pwrite calls of the pwrite path
        self.pwrite_bytes = 0
        self.archive = archive          # wal.archive.Archive or None
        self.dir = dirpath
        self.segment_size = segment_size
        self.file_size = segment_size
        if not fs.exists(dirpath):
            fs.makedirs(dirpath)
        self._lock = threading.Lock()
        self.slots: dict[int, Slot] = {}
        self.free: set[int] = set()
        self.held: dict[int, int] = {}             # slot number -> seq, needed segments not mapped
        self.live: dict[int, LiveSegment] = {}           # seq -> mapped segment
        self._readers: list = []                   # mappings opened for recovery reads
        self._unclosed: list = []                  # mappings whose close hit a live export
        self._spare: LiveSegment | None = None
        self._spare_error: BaseException | None = None
        # Who prepares the spare now: a background thread's ident, _BY_ACQUIRE,
        # or None; claimed and released under the lock, so a spare is never
        # prepared twice at once, whatever interrupts the main thread.
        self._preparer = None
        self._cond = threading.Condition(self._lock)
        self._stopping = False
        self.created = 0
        # Sizing: `progress()` is the writer's end LSN. Without it every slot
        # is prepared whole; with it, sparse until the writer has filled a
        # segment in this process (`_whole`), and grown ahead by `_grow_loop`.
        self._progress = progress
        self._whole = progress is None
        # What wal/NEWEST names (set by recovery from the file, then by acquire):
        # a segment is named there before the writer gets its buffer.
        self.newest: Newest | None = None
        self._grower = None        # the grower thread, started by the first acquire
        self._growing = False      # the grower is allocating (close waits for it)
        self.grow_error: BaseException | None = None   # its last failure (a hint failed)

    # -- discovery -----------------------------------------------------------
    def scan(self) -> list[Slot]:
        """Read every slot file's header; all slots start out free."""
        self.slots.clear()
        for name in self.fs.listdir(self.dir):
            number = parse_slot(name)
            if number is None:
                continue
            slot = read_slot(self.fs.open, posixpath.join(self.dir, name), number)
            if slot.header is not None and slot.header.segment_size != self.segment_size:
                raise SegmentSizeMismatch(f"{slot.path} was written with segment_size "
                                          f"{slot.header.segment_size}, this store uses {self.segment_size}")
            self.slots[slot.number] = slot
        self.free = set(self.slots)
        self.held = {}
        return sorted(self.slots.values(), key=lambda s: s.number)

    def remove_unfinished(self) -> list[str]:
        """Remove the temp files a writer killed mid-write left in the WAL
        directory: `seg-N.wal.tmp` (a segment being made, up to a segment's
        size) and `NEWEST.tmp` (wal/newest.py); returns their paths. A `.tmp`
        is never read: a file exists only once renamed.
        REQUIRES: the store is open for writing and its lock is held."""
        gone = []
        for name in self.fs.listdir(self.dir):
            base = name[:-len(TMP_SUFFIX)]
            if name.endswith(TMP_SUFFIX) and (base == NEWEST or parse_slot(base) is not None):
                path = posixpath.join(self.dir, name)
                self.fs.remove(path)
                gone.append(path)
        return gone

    def expected_size(self, slot: Slot) -> int:
        """The size the slot file should have."""
        return self.segment_size

    def read_buffer(self, slot: Slot):
        """A readable buffer of segment_size bytes with the slot's content (zeros past a short file).

        A record-sealed segment reads as stored; its records open one by one
        (wal/recseal.py's record_opener).
        """
        if slot.size >= self.segment_size:
            if isinstance(self.fs, PosixFS):
                copy = self._sparse_copy(slot)
                if copy is not None:
                    self._readers.append(copy)
                    return copy
            mapping = self.fs.map(slot.path, self.segment_size)
            self._readers.append(mapping)
            return mapping.buffer
        buf = bytearray(self.segment_size)
        f = self.fs.open(slot.path)
        try:
            data = f.pread(slot.size, 0)
        finally:
            f.close()
        buf[:len(data)] = data
        return buf

    def _sparse_copy(self, slot: Slot):
        """A sparse slot's bytes, read without mapping its holes (wal/sparse.py), or None."""
        f = self.fs.open(slot.path)
        try:
            return sparse_copy(f.fileno(), self.segment_size)
        finally:
            f.close()

    def file_bytes(self, slot: Slot, lo: int, hi: int) -> bytes:
        """Bytes [lo, hi) of `slot`'s file as on disk (cut at the file's end)."""
        f = self.fs.open(slot.path)
        try:
            return f.pread(max(0, min(hi, f.size()) - lo), lo)
        finally:
            f.close()

    def close_readers(self) -> None:
        """Unmap the segments mapped for recovery's reads."""
        readers, self._readers = self._readers, []
        for mapping in readers:
            self._close_mapping(mapping)

    # -- recovery side effects -------------------------------------------------
    def write_side_file(self, path: str, data: bytes) -> None:
        """Write `data` as file `path` (created or replaced) and fsync it."""
        f = self.fs.open(path, create=True, truncate=True)
        try:
            f.pwrite(data, 0)
            f.fsync()
        finally:
            f.close()

    def set_aside(self, slot: Slot, suffix: str) -> str:
        """Rename a slot out of the slot namespace; returns the new path."""
        dst = slot.path + suffix
        self.fs.rename(slot.path, dst)
        self.slots.pop(slot.number, None)
        self.free.discard(slot.number)
        self.held.pop(slot.number, None)
        return dst

    def sync_slot(self, slot: Slot) -> None:
        """fdatasync `slot`'s file."""
        f = self.fs.open(slot.path)
        try:
            f.fdatasync()
        finally:
            f.close()

    def hold(self, slot: Slot) -> None:
        """Mark a slot as holding a segment still needed (not reusable until trimmed)."""
        self.free.discard(slot.number)
        self.held[slot.number] = slot.seq

    def sync_dir(self) -> None:
        """fsync the WAL directory (its entries: new, renamed, removed slots)."""
        self.fs.fsync_dir(self.dir)

    # -- writer segments -------------------------------------------------------
    def acquire(self, seq: int):
        """Map a prepared slot as segment `seq` for the writer; returns its buffer.

        The slot is named in wal/NEWEST (wal/newest.py) before the buffer is
        returned, so no record in it is acknowledged before a removal of its
        file can be noticed at reopen."""
        with self._lock:
            live = self.live.get(seq)
            if live is not None:
                if live.buffer is None:
                    raise ValueError(f"segment {seq} was already written, synced and released")
                return live.buffer
            if self.live and seq <= max(self.live):
                raise ValueError(f"segment {seq} requested after segment {max(self.live)}")
        spare = self._take_spare()
        named = Newest(seq, spare.slot.number)
        if self.newest is None or (seq >= self.newest.seq and named != self.newest):
            try:
                write_newest(self.fs, self.dir, named)
            except BaseException:
                with self._cond:           # the spare stays the spare: the next acquire retries
                    if self._spare is None:
                        self._spare = spare
                        spare = None
                if spare is not None:
                    self._close_live(spare)
                    with self._lock:
                        self.free.add(spare.slot.number)
                raise
            self.newest = named
        grower = None
        with self._cond:
            if self.live and not self._whole:
                self._whole = True     # a segment filled: the load wants whole ones
            self.live[seq] = spare
            self._cond.notify_all()    # the grower looks at the new segment
            if self._progress is not None and self._grower is None and not self._stopping:
                grower = self._grower = threading.Thread(target=self._grow_loop, name="wal-grow",
                                                         daemon=True)
        self.prepare_spare()
        if grower is not None:
            grower.start()
        return spare.buffer

    def buffer(self, seq: int):
        """The writable buffer of live segment `seq`; KeyError if it has none."""
        buf = self.live[seq].buffer
        if buf is None:
            raise KeyError(seq)
        return buf

    def publish(self, seq: int, lo: int, hi: int, *, record_end: bool = True) -> None:
        """Hand bytes [lo, hi) of segment seq to the OS (a segment not live has nothing new).

        mmap path: `Mapping.publish` (no-op on posix). pwrite path: pwrite
        [lo, hi) from the buffer to the same file offsets, extended up to
        the next 4 KiB boundary (the bytes past `hi` are whatever the
        encoder has put there so far; a later round writes them again).
        With O_DIRECT, `lo` is rounded down to 4 KiB as well, so the
        partial block at `lo` is rewritten, durable bytes included; a
        buffered write starts at `lo` itself and the kernel writes the
        whole page back. A buffered write makes page-cache folios as large
        as itself, so the last block, if partial, goes in a pwrite of its
        own: the block the next round writes into again must sit in a
        4 KiB folio, or that write dirties, and the next fdatasync writes
        back, the whole large folio.

        `hi` is a record's end (unless `record_end` is False), and the END
        trailer after it (wal/format.py) goes too: it is what proves that
        record complete. The pwrite path writes that END from `end_image`,
        not from the buffer, where another writer may already be half over
        it with the next record.
        """
        live = self.live.get(seq)
        if live is None:
            return
        rec_end = hi
        if hi > BLOCK:
            hi = min(end_after(hi), self.segment_size)
        if live.mapping is not None:
            live.mapping.publish(lo, hi)
            return
        buf = live.buffer
        if buf is None or hi <= lo:
            return
        f = live.file
        if hi > live.zeroing_from - BLOCK:
            self.await_zeros(live, hi + BLOCK)   # the grower is writing zeros there (wal/growth.py)
        if self.seal_in_python:
            # Callers serialise publishes (Wal._pub_lock) and publish up to a
            # record boundary, so each record is sealed once, before any byte
            # of it is written.
            # Bytes past `hi` may hold records not sealed yet: only [lo, hi) goes.
            if live.sealer is None:
                live.sealer = RecordSealer(self.cipher)
            live.sealer.seal_to(buf, rec_end)
            top = cut = hi
        else:
            if f.direct:
                lo -= lo % BLOCK
            top = -(-hi // BLOCK) * BLOCK
            last = top - BLOCK
            cut = last if top != hi and lo < last and not f.direct else top
        # [start, top) goes from a copy with the END laid over; [cut, top) alone.
        start = top
        if record_end and BLOCK < rec_end < self.segment_size:
            start = max(rec_end - rec_end % BLOCK, lo)
            tail = bytearray(buf[start:top])
            img = end_image(seq * self.segment_size + rec_end)
            tail[rec_end - start:rec_end - start + len(img)] = img
        x = lo
        while x < top:
            y = start if x < start < cut else cut if x < cut else top
            f.pwrite(buf[x:y] if x < start else tail[x - start:y - start], x)
            self.pwrites += 1
            x = y
        self.pwrite_bytes += top - lo

    def release(self, before_seq: int) -> None:
        """pwrite path: drop the buffers of segments with seq < before_seq.

        The caller guarantees that their bytes are written and synced and
        that the encoder has moved past them. The memory is freed once the
        encoder lets go of its reference too. The files stay open until
        trim, since a leader that started earlier may still fdatasync them.
        """
        if not self.pwrite_path:
            return
        with self._lock:
            for seq, live in self.live.items():
                if seq < before_seq:
                    live.buffer = None

    def sync(self, seq: int) -> None:
        """Make everything written to segment `seq` durable (releases the GIL on posix)."""
        with self._lock:
            live = self.live.get(seq)
            if live is None:
                return
            live.busy += 1
        try:
            live.file.fdatasync()
        finally:
            with self._lock:
                live.busy -= 1
                last = live.doomed and live.busy == 0
            if last:
                self._close_live(live)

    def missing(self) -> str | None:
        """The path of a needed segment (mapped or held) that is no longer in
        the WAL directory -- removed under the running store -- or None."""
        with self._lock:
            paths = [live.slot.path for live in self.live.values()]
            paths += [self.slots[n].path for n in self.held if n in self.slots]
        return next((p for p in paths if not self.fs.exists(p)), None)

    def trim(self, before_seq: int) -> list[int]:
        """Segments with seq < before_seq are no longer needed: their slots become reusable.

        With an archive, each is copied there first (before its slot can be reused).
        """
        done, closing = [], []
        with self._lock:
            for number, seq in list(self.held.items()):
                if seq < before_seq:
                    del self.held[number]
                    done.append((seq, self.slots[number]))
            for seq in [s for s in self.live if s < before_seq]:
                live = self.live.pop(seq)
                if live.busy:
                    live.doomed = True
                else:
                    closing.append(live)
                done.append((seq, live.slot))
        if self.archive is not None:
            for seq, slot in sorted(done, key=lambda d: d[0]):
                self.archive.add(seq, slot.path)
        with self._lock:
            self.free.update(slot.number for _seq, slot in done)
        for live in closing:
            self._close_live(live)
        self._retry_unclosed()
        return sorted(slot.number for _seq, slot in done)

    # -- teardown ------------------------------------------------------------
    def join(self) -> None:
        """Stop preparing spares; wait for one being prepared, and for the grower
        thread to end (a store that returned from close or abandon runs none)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            while self._preparer is not None or self._growing:
                self._cond.wait()
            grower = self._grower
        if grower is not None and grower is not threading.current_thread():
            try:
                grower.join()
            except RuntimeError:       # made but not started: it sees _stopping at once
                pass

    def close(self) -> None:
        """Stop the background threads and release every live segment and the spare."""
        self.join()
        with self._lock:
            lives = list(self.live.values())
            if self._spare is not None:
                lives.append(self._spare)
            self.live.clear()
            self._spare = None
        for live in lives:
            self._close_live(live)
        self.close_readers()
        self._retry_unclosed()

    def _close_live(self, live: LiveSegment) -> None:
        live.file.close()
        live.buffer = None   # pwrite path: anonymous memory, freed with its last reference
        if live.mapping is not None:
            self._close_mapping(live.mapping)

    def _close_mapping(self, mapping) -> None:
        try:
            mapping.close()
        except BufferError:
            # Someone (the C core) still exports the buffer; close it later.
            self._unclosed.append(mapping)

    def _retry_unclosed(self) -> None:
        pending, self._unclosed = self._unclosed, []
        for mapping in pending:
            self._close_mapping(mapping)
