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

Every file operation goes through the `diskio` file system given.
"""

from __future__ import annotations

import posixpath
import re
import threading

from .format import SEG_HDR_LEN, decode_segment_header

__all__ = ["Segments", "Slot", "slot_name"]

_ZERO_CHUNK = 1 << 20
_ZEROS = bytes(_ZERO_CHUNK)
_NAME = re.compile(r"^seg-(\d{8})\.wal$")


def slot_name(number: int) -> str:
    return f"seg-{number:08d}.wal"


class Slot:
    """One slot file as found on disk: its number, path, size and header."""

    __slots__ = ("number", "path", "size", "header", "blank")

    def __init__(self, number: int, path: str, size: int, header, blank: bool = True):
        self.number = number
        self.path = path
        self.size = size
        self.header = header  # SegmentHeader or None (fresh, torn or foreign)
        self.blank = blank    # the header bytes are all zero (never written)

    @property
    def seq(self):
        return None if self.header is None else self.header.seq

    def __repr__(self) -> str:
        return f"Slot({self.path}, seq={self.seq}, size={self.size})"


class _Live:
    """A segment mapped for the writer: its slot, mapping and sync handle."""

    __slots__ = ("slot", "mapping", "file", "busy", "doomed")

    def __init__(self, slot: Slot, mapping, file):
        self.slot = slot
        self.mapping = mapping
        self.file = file
        self.busy = 0         # syncs running on `file`
        self.doomed = False   # trimmed while busy: the last sync closes it


class Segments:
    """The slot files of one WAL directory."""

    def __init__(self, fs, dirpath: str, segment_size: int, archive=None):
        self.fs = fs
        self.archive = archive          # wal.archive.Archive or None
        self.dir = dirpath
        self.segment_size = segment_size
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
        self._spare_thread: threading.Thread | None = None
        self._spare_error: BaseException | None = None
        self.created = 0

    # -- discovery -----------------------------------------------------------
    def scan(self) -> list[Slot]:
        """Read every slot file's header; all slots start out free."""
        self.slots.clear()
        for name in self.fs.listdir(self.dir):
            m = _NAME.match(name)
            if not m:
                continue
            path = posixpath.join(self.dir, name)
            f = self.fs.open(path)
            try:
                size = f.size()
                raw = f.pread(min(size, SEG_HDR_LEN), 0)
            finally:
                f.close()
            header = decode_segment_header(raw)
            if header is not None and header.segment_size != self.segment_size:
                raise ValueError(f"{path} was written with segment_size {header.segment_size}, "
                                 f"this store uses {self.segment_size}")
            self.slots[int(m.group(1))] = Slot(int(m.group(1)), path, size, header, not any(raw))
        self.free = set(self.slots)
        self.held = {}
        return sorted(self.slots.values(), key=lambda s: s.number)

    def read_buffer(self, slot: Slot):
        """A readable buffer of segment_size bytes with the slot's content (zeros past a short file)."""
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
                return live.mapping.buffer
            if self.live and seq <= max(self.live):
                raise ValueError(f"segment {seq} requested after segment {max(self.live)}")
        spare = self._take_spare()
        with self._lock:
            self.live[seq] = spare
        self.prepare_spare()
        return spare.mapping.buffer

    def _take_spare(self) -> _Live:
        thread = self._spare_thread
        if thread is not None:
            thread.join()
        with self._lock:
            spare, self._spare = self._spare, None
            err, self._spare_error = self._spare_error, None
        if err is not None:
            raise err
        return spare if spare is not None else self._prepare()

    def prepare_spare(self) -> None:
        """Get the next slot ready in a background thread (invariant 3)."""
        with self._lock:
            if self._spare is not None or (self._spare_thread and self._spare_thread.is_alive()):
                return
            self._spare_thread = threading.Thread(target=self._prepare_bg, name="wal-spare", daemon=True)
            self._spare_thread.start()

    def _prepare_bg(self) -> None:
        try:
            spare = self._prepare()
        except BaseException as exc:  # handed to the next acquire(), which re-raises it
            with self._lock:
                self._spare_error = exc
            return
        with self._lock:
            self._spare = spare

    def _prepare(self) -> _Live:
        """Preallocate and map a free or new slot (invariant 1)."""
        S, fs = self.segment_size, self.fs
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
        f = fs.open(slot.path, create=new)
        try:
            if slot.size < S:
                # Allocate, then write the zeros: on ext4 a write into a
                # fallocated (unwritten) extent converts it in the journal,
                # which every later fdatasync of the segment would pay for.
                f.preallocate(S)
                for at in range(slot.size - slot.size % _ZERO_CHUNK, S, _ZERO_CHUNK):
                    f.pwrite(_ZEROS[:min(_ZERO_CHUNK, S - at)], at)
                f.fsync()
                slot.size = S
            if new:
                self.created += 1
                fs.crash_point("wal.segment_created")
                fs.fsync_dir(self.dir)
            mapping = fs.map(slot.path, S)
        except BaseException:
            f.close()
            raise
        return _Live(slot, mapping, f)

    def buffer(self, seq: int):
        return self.live[seq].mapping.buffer

    def publish(self, seq: int, lo: int, hi: int) -> None:
        """Hand bytes [lo, hi) of segment seq to the OS (a segment not mapped has nothing new)."""
        live = self.live.get(seq)
        if live is not None:
            live.mapping.publish(lo, hi)

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
        thread = self._spare_thread
        if thread is not None:
            thread.join()

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
