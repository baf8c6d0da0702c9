"""Preparing the next WAL slot ahead of need (wal/segments.py's invariants 1, 3, 4).

The C encoder's next-segment callback runs under the tree lock, so the slot
it gets must already be preallocated, zeroed where it will be written,
fsynced and (when new) its directory entry fsynced: a background thread
prepares one spare, and `acquire` only takes it. `SparePreparer` is that part
of `Segments`; it uses the Segments' lock, condition, slot table and options.
"""

from __future__ import annotations

import posixpath
import threading

from pagestore.diskio import aligned_buffer
from pagestore.diskio.layout import TMP_SUFFIX, slot_name

from .growth import GROW_FIRST
from .recseal import SEALED_RECORDS
from .slot import LiveSegment, Slot

__all__ = ["SparePreparer"]

_ZERO_CHUNK = 1 << 20
_ZEROS = bytes(_ZERO_CHUNK)

_BY_ACQUIRE = "acquire"     # _preparer: the acquiring thread prepares it itself


class SparePreparer:
    """The spare-slot half of `Segments` (a mixin: it has no state of its own)."""

    def _take_spare(self) -> LiveSegment:
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

    def _prepare(self) -> LiveSegment:
        """Preallocate a free or new slot and give it a buffer (invariants 1, 4).

        A new slot appears whole: it is made under a temporary name,
        preallocated, zeroed and fsynced, then renamed and its directory
        fsynced, so a kill leaves no segment or a complete one. When any step
        fails (a full disk) nothing stays behind: the temporary file is
        removed and the slot number is not used up, so a store retrying
        writes on a full disk does not leave a file per attempt.
        """
        fs = self.fs
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
        try:
            return self._prepare_slot(slot, new)
        except BaseException:
            with self._lock:
                if new:
                    self.slots.pop(slot.number, None)
                    slot.size = 0
                else:
                    self.free.add(slot.number)
            if new:
                try:
                    fs.remove(slot.path + TMP_SUFFIX)
                except OSError:
                    pass          # never created, or the disk refuses even this: .tmp is never read
            raise

    def _prepare_slot(self, slot: Slot, new: bool) -> LiveSegment:
        S, fs, P = self.segment_size, self.fs, self.file_size
        path = slot.path + TMP_SUFFIX if new else slot.path
        f = self._wfs.open(path, create=new, truncate=new, direct=self.direct)
        try:
            if new:
                fs.crash_point("wal.segment_tmp_created")
            # A slot of another kind reused by an encrypted WAL is zeroed whole:
            # plaintext records must not stay readable in a file that claims to
            # be sealed, and the other sealed layout would read as damage.
            zero_from = 0 if self.cipher is not None and not slot.blank and \
                (slot.header is None or slot.header.flags != SEALED_RECORDS) else slot.size
            whole = self._whole or zero_from < slot.size
            filled = zeroed = P    # a reused slot's blocks were written in its earlier life
            if slot.size < P or zero_from < slot.size:
                # Allocate, then write the zeros: on ext4 a write into a
                # fallocated (unwritten) extent converts it in the journal,
                # which every later fdatasync of the segment would pay for.
                # Sparse (sizing): only the first GROW_FIRST bytes now; the
                # size is still P, the rest is a hole the grower allocates.
                filled = zeroed = P if whole else min(P, GROW_FIRST)
                f.preallocate(filled)
                for at in range(zero_from - zero_from % _ZERO_CHUNK, filled, _ZERO_CHUNK):
                    f.pwrite(_ZEROS[:min(_ZERO_CHUNK, filled - at)], at)
                if filled < P:
                    f.truncate(max(P, slot.size))
                if new:
                    fs.crash_point("wal.segment_preallocated")
                f.fsync()
                if new:
                    fs.crash_point("wal.segment_synced")
                slot.size = max(slot.size, P)
            elif whole and self._progress is not None:
                f.allocate(0, P)   # a slot reused from a sparse life: cheap where allocated
            else:
                filled = 0 if self._progress is not None else P   # unknown: the grower allocates
            if new:
                fs.rename(path, slot.path)
                f.close()                # reopened by its name, which its errors then give
                f = self._wfs.open(slot.path, direct=self.direct)
                self.created += 1
                fs.crash_point("wal.segment_created")
                fs.fsync_dir(self.dir)
                fs.crash_point("wal.segment_dir_synced")
            if not self.pwrite_path:
                mapping = fs.map(slot.path, S)
                live = LiveSegment(slot, mapping, mapping.buffer, f)
                live.filled = live.zeroed = filled
                return live
            if not f.direct:
                self._drop_cached_pages(f, reused=not new)
            buf = aligned_buffer(S)
        except BaseException:
            f.close()
            raise
        live = LiveSegment(slot, None, buf, f)
        live.filled, live.zeroed = filled, zeroed
        return live

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
        f.drop_cache(flush_first=reused)
