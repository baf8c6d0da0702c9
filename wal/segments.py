"""WAL segment slot files: discovery, preallocation, mapping, reuse in rotation.

A slot is a file `<wal dir>/seg-NNNNNNNN.wal` of exactly `segment_size`
bytes; the number in its name is only a slot number, the segment header
inside says which absolute `seq` the slot currently holds. Slots are created
on demand and reused once the segment they hold lies wholly before the trim
pointer (seq < trim_lsn // segment_size).

Invariants:
  (1) A slot is handed to the writer only after its file is preallocated,
      fsynced, and (when new) its directory entry is fsynced: a record
      acknowledged as durable never sits in a file that can vanish.
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
  (5) With a cipher (encryption_key) and sealing="records", the encoder
      seals every record (wal/recseal.py): the buffer already holds what the
      file must hold, so both write paths work as without a cipher.
      With sealing="blocks" (the fallback when the C core has no libcrypto),
      the pwrite path is the only one: the buffer holds the plaintext
      segment, `publish` seals the blocks it covers (wal/sealed.py:
      complete blocks in one pwrite, the partial last block in a second
      one, to a tail slot), and slot files are `physical_size(segment_size)`
      bytes. `read_buffer` gives readers the plaintext segment back. O_DIRECT
      is refused: sealed blocks are 4128 bytes, not 4 KiB aligned.

Every file operation goes through the `diskio` file system given.
"""

from __future__ import annotations

import os
import posixpath
import re
import threading

from pagestore.diskio import PosixFS, aligned_buffer

from .format import BLOCK, SEG_HDR_LEN, decode_segment_header
from .recseal import SEALED_RECORDS
from .sealed import (SEALED, BlockSealer, is_sealed, open_segment, physical_offset, physical_size,
                     tail_offset)

__all__ = ["Segments", "Slot", "read_slot", "slot_name", "SEALINGS", "WRITE_PATHS"]

WRITE_PATHS = ("mmap", "pwrite")
SEALINGS = ("blocks", "records")   # with a cipher: wal/sealed.py or wal/recseal.py

_ZERO_CHUNK = 1 << 20
_ZEROS = bytes(_ZERO_CHUNK)
_NAME = re.compile(r"^seg-(\d{8})\.wal$")


_BY_ACQUIRE = "acquire"     # Segments._preparer: the acquiring thread prepares it itself


def slot_name(number: int) -> str:
    return f"seg-{number:08d}.wal"


class SegmentSizeMismatch(ValueError):
    """A segment file of another segment_size than the one the store was opened with."""


class Slot:
    """One slot file as found on disk: its number, path, size and header."""

    __slots__ = ("number", "path", "size", "header", "blank")

    def __init__(self, number: int, path: str, size: int, header, blank: bool = True):
        self.number = number
        self.path = path
        self.size = size
        self.header = header  # SegmentHeader or None (fresh, torn or foreign)
        self.blank = blank    # header and first record block all zero (never written)

    @property
    def seq(self):
        return None if self.header is None else self.header.seq

    def __repr__(self) -> str:
        return f"Slot({self.path}, seq={self.seq}, size={self.size})"


def read_slot(open_file, path: str, number: int) -> Slot:
    """The Slot of a slot file from its first bytes; `open_file(path)` gives a diskio File."""
    f = open_file(path)
    try:
        size = f.size()
        raw = f.pread(min(size, SEG_HDR_LEN), 0)
        # Blank means never written, so free to reuse as a fresh segment. A
        # zeroed header alone is not that: records after it mean the header
        # was damaged, and the slot is damage to report and set aside, not a
        # slot whose records may be overwritten unreported.
        blank = not any(raw) and (size <= BLOCK or not any(f.pread(min(size - BLOCK, BLOCK), BLOCK)))
    finally:
        f.close()
    return Slot(number, path, size, decode_segment_header(raw), blank)


class _Live:
    """A segment handed to the writer: its slot, buffer, mapping (mmap path) and file."""

    __slots__ = ("slot", "mapping", "buffer", "file", "busy", "doomed", "sealer", "seal_lock")

    def __init__(self, slot: Slot, mapping, buffer, file, sealer=None):
        self.slot = slot
        self.mapping = mapping  # diskio Mapping (mmap path) or None (pwrite path)
        self.buffer = buffer    # what the encoder writes into; None once released
        self.file = file
        self.busy = 0         # syncs running on `file`
        self.doomed = False   # trimmed while busy: the last sync closes it
        self.sealer = sealer  # BlockSealer with a cipher, set once the seq is known
        self.seal_lock = threading.Lock()   # sealed writes vs. the epoch a sync covers


class Segments:
    """The slot files of one WAL directory."""

    def __init__(self, fs, dirpath: str, segment_size: int, archive=None, *,
                 write_path: str = "mmap", direct: bool = False, cipher=None,
                 sealing: str = "blocks"):
        if write_path not in WRITE_PATHS:
            raise ValueError(f"write_path must be one of {WRITE_PATHS}, got {write_path!r}")
        if sealing not in SEALINGS:
            raise ValueError(f"sealing must be one of {SEALINGS}, got {sealing!r}")
        if direct and write_path != "pwrite":
            raise ValueError("direct=True needs write_path='pwrite'")
        self.seal_blocks = cipher is not None and sealing == "blocks"
        if self.seal_blocks and direct:
            raise ValueError("option 'wal_direct': O_DIRECT cannot write an encrypted WAL "
                             "(sealed blocks are 4128 bytes, not 4 KiB aligned); turn off "
                             "wal_direct or encryption_key")
        self.cipher = cipher
        self.unopened: dict = {}   # path -> indexes of sealed blocks that did not open (read_buffer)
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
        self.file_size = physical_size(segment_size) if self.seal_blocks else segment_size
        if not fs.exists(dirpath):
            fs.makedirs(dirpath)
        self._lock = threading.Lock()
        self.slots: dict[int, Slot] = {}
        self.free: set[int] = set()
        self.held: dict[int, int] = {}             # slot number -> seq, needed segments not mapped
        self.live: dict[int, _Live] = {}           # seq -> mapped segment
        self._readers: list = []                   # mappings opened for recovery reads
        self._unclosed: list = []                  # mappings whose close hit a live export
        self._spare: _Live | None = None
        self._spare_error: BaseException | None = None
        # Who prepares the spare now: a background thread's ident, _BY_ACQUIRE,
        # or None; claimed and released under the lock, so a spare is never
        # prepared twice at once, whatever interrupts the main thread.
        self._preparer = None
        self._cond = threading.Condition(self._lock)
        self._stopping = False
        self.created = 0

    # -- discovery -----------------------------------------------------------
    def scan(self) -> list[Slot]:
        """Read every slot file's header; all slots start out free."""
        self.slots.clear()
        for name in self.fs.listdir(self.dir):
            m = _NAME.match(name)
            if not m:
                continue
            slot = read_slot(self.fs.open, posixpath.join(self.dir, name), int(m.group(1)))
            if slot.header is not None and slot.header.segment_size != self.segment_size:
                raise SegmentSizeMismatch(f"{slot.path} was written with segment_size "
                                          f"{slot.header.segment_size}, this store uses {self.segment_size}")
            self.slots[slot.number] = slot
        self.free = set(self.slots)
        self.held = {}
        return sorted(self.slots.values(), key=lambda s: s.number)

    def expected_size(self, slot: Slot) -> int:
        """The size the slot file should have (sealed segments are larger)."""
        return physical_size(self.segment_size) if is_sealed(slot.header) else self.segment_size

    def read_buffer(self, slot: Slot):
        """A readable buffer of segment_size bytes with the slot's content (zeros past a short file).

        A sealed segment is decrypted (EncryptionError naming the file with a
        wrong key, NoKeyError without one); blocks that do not open read as zeros and are listed
        in `unopened[slot.path]`.
        """
        if is_sealed(slot.header):
            buf, self.unopened[slot.path] = open_segment(self.file_bytes(slot, 0, slot.size),
                                                         self.segment_size, self.cipher, slot.path)
            return buf
        if slot.size >= self.segment_size:
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

    def file_bytes(self, slot: Slot, lo: int, hi: int) -> bytes:
        f = self.fs.open(slot.path)
        try:
            return f.pread(max(0, min(hi, f.size()) - lo), lo)
        finally:
            f.close()

    def tail_bytes(self, slot: Slot, lo: int, hi: int) -> bytes:
        """Bytes to keep aside for logical range [lo, hi) of a slot: as stored (a sealed
        segment's tail stays sealed: whole physical blocks), so no plaintext leaves it."""
        if not is_sealed(slot.header):
            return None
        first, last = lo // BLOCK, -(-hi // BLOCK)
        tails = tail_offset(self.segment_size, 0)
        return (self.file_bytes(slot, physical_offset(first), min(physical_offset(last), tails))
                + self.file_bytes(slot, tails, slot.size))     # the partial block's copies

    def close_readers(self) -> None:
        readers, self._readers = self._readers, []
        for mapping in readers:
            self._close_mapping(mapping)

    # -- recovery side effects -------------------------------------------------
    def write_side_file(self, path: str, data: bytes) -> None:
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
        self.fs.fsync_dir(self.dir)

    # -- writer segments -------------------------------------------------------
    def acquire(self, seq: int):
        """Map a prepared slot as segment `seq` for the writer; returns its buffer."""
        with self._lock:
            live = self.live.get(seq)
            if live is not None:
                if live.buffer is None:
                    raise ValueError(f"segment {seq} was already written, synced and released")
                return live.buffer
            if self.live and seq <= max(self.live):
                raise ValueError(f"segment {seq} requested after segment {max(self.live)}")
        spare = self._take_spare()
        with self._lock:
            self.live[seq] = spare
        self.prepare_spare()
        return spare.buffer

    def _take_spare(self) -> _Live:
        """The prepared spare, else one prepared here. A KeyboardInterrupt can
        land between any two bytecodes of this (main) thread: it once came
        between creating the spare thread and starting it, and every later
        acquire failed joining a thread that never started. Now nothing here
        joins a thread: it waits for the preparer the lock records."""
        claimed = False
        try:
            with self._cond:
                while self._preparer is not None:
                    self._cond.wait()
                spare, self._spare = self._spare, None
                err, self._spare_error = self._spare_error, None
                if spare is None and err is None:
                    claimed = True
                    self._preparer = _BY_ACQUIRE
            if err is not None:
                raise err
            return spare if spare is not None else self._prepare()
        finally:
            if claimed:
                with self._cond:
                    self._preparer = None
                    self._cond.notify_all()

    def prepare_spare(self) -> None:
        """Get the next slot ready in a background thread (invariant 3). If an
        interrupt keeps the thread from starting, the next acquire prepares it."""
        with self._lock:
            if self._spare is not None or self._preparer is not None or self._stopping:
                return
        threading.Thread(target=self._prepare_bg, name="wal-spare", daemon=True).start()

    def _prepare_bg(self) -> None:
        with self._cond:
            if (self._spare is not None or self._spare_error is not None or self._preparer is not None
                    or self._stopping):
                return                # prepared, being prepared, or closing
            self._preparer = threading.get_ident()
        spare = err = None
        try:
            spare = self._prepare()
        except BaseException as exc:  # handed to the next acquire(), which re-raises it
            err = exc
        with self._cond:
            self._spare, self._spare_error = spare, err
            self._preparer = None
            self._cond.notify_all()

    def _prepare(self) -> _Live:
        """Preallocate a free or new slot and give it a buffer (invariants 1, 4)."""
        S, fs, P = self.segment_size, self.fs, self.file_size
        if self.seal_blocks and not self.pwrite_path:
            raise ValueError("a block-sealed WAL writes through write_path='pwrite' (a shared "
                             "mapping would put plaintext in the file)")
        with self._lock:
            reuse = min(self.free, default=None)
            if reuse is not None:
                self.free.discard(reuse)
                slot = self.slots[reuse]
            else:
                number = max(self.slots, default=-1) + 1
                slot = Slot(number, posixpath.join(self.dir, slot_name(number)), 0, None)
                self.slots[number] = slot
        new = slot.size == 0 and not fs.exists(slot.path)
        f = self._wfs.open(slot.path, create=new, direct=self.direct)
        try:
            # A slot of another kind reused by an encrypted WAL is zeroed whole:
            # plaintext records must not stay readable in a file that claims to
            # be sealed, and the other sealed layout would read as damage.
            kind = SEALED if self.seal_blocks else SEALED_RECORDS
            zero_from = 0 if self.cipher is not None and not slot.blank and \
                (slot.header is None or slot.header.flags != kind) else slot.size
            if slot.size < P or zero_from < slot.size:
                # Allocate, then write the zeros: on ext4 a write into a
                # fallocated (unwritten) extent converts it in the journal,
                # which every later fdatasync of the segment would pay for.
                f.preallocate(P)
                for at in range(zero_from - zero_from % _ZERO_CHUNK, P, _ZERO_CHUNK):
                    f.pwrite(_ZEROS[:min(_ZERO_CHUNK, P - at)], at)
                f.fsync()
                slot.size = max(slot.size, P)
            if new:
                self.created += 1
                fs.crash_point("wal.segment_created")
                fs.fsync_dir(self.dir)
            if not self.pwrite_path:
                mapping = fs.map(slot.path, S)
                return _Live(slot, mapping, mapping.buffer, f)
            if not f.direct:
                self._drop_cached_pages(f, reused=not new)
            buf = aligned_buffer(S)
        except BaseException:
            f.close()
            raise
        return _Live(slot, None, buf, f)

    @staticmethod
    def _drop_cached_pages(f, reused: bool) -> None:
        """Evict the slot's clean pages from the page cache (posix, buffered pwrite path).

        The zero fill above (1 MiB writes), recovery's mapped reads and a
        log_only incarnation leave large folios in the page cache. A 4 KiB
        pwrite into a cached 1 MiB folio dirties all of it, and the next
        fdatasync writes the whole megabyte. Once the pages are gone, each
        4 KiB pwrite creates a 4 KiB folio (see `publish`). Only a cache
        hint: the file's bytes do not change.
        """
        fileno = getattr(f, "fileno", None)
        if fileno is None or not hasattr(os, "posix_fadvise"):
            return
        if reused:
            f.fdatasync()   # DONTNEED only drops clean pages
        try:
            os.posix_fadvise(fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass

    def buffer(self, seq: int):
        buf = self.live[seq].buffer
        if buf is None:
            raise KeyError(seq)
        return buf

    def publish(self, seq: int, lo: int, hi: int) -> None:
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
        """
        live = self.live.get(seq)
        if live is None:
            return
        if live.mapping is not None:
            live.mapping.publish(lo, hi)
            return
        buf = live.buffer
        if buf is None or hi <= lo:
            return
        f = live.file
        if self.seal_blocks:
            with live.seal_lock:
                if live.sealer is None:
                    live.sealer = BlockSealer(self.cipher, seq, self.segment_size)
                for at, data in live.sealer.writes(buf, lo, hi):
                    f.pwrite(data, at)
                    self.pwrites += 1
                    self.pwrite_bytes += len(data)
            return
        if f.direct:
            lo -= lo % BLOCK
        top = -(-hi // BLOCK) * BLOCK
        last = top - BLOCK
        if top != hi and lo < last and not f.direct:
            f.pwrite(buf[lo:last], lo)
            f.pwrite(buf[last:top], last)
            self.pwrites += 2
        else:
            f.pwrite(buf[lo:top], lo)
            self.pwrites += 1
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
        sealer = live.sealer
        if sealer is not None:
            with live.seal_lock:
                epoch = sealer.sync_begins()
        try:
            live.file.fdatasync()
            if sealer is not None:
                with live.seal_lock:
                    sealer.sync_done(epoch)
        finally:
            with self._lock:
                live.busy -= 1
                last = live.doomed and live.busy == 0
            if last:
                self._close_live(live)

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
        """Stop preparing spares; wait for one being prepared."""
        with self._cond:
            self._stopping = True
            while self._preparer is not None:
                self._cond.wait()

    def close(self) -> None:
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

    def _close_live(self, live: _Live) -> None:
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
