"""`Wal`: segment ownership, durability modes, group commit, trimming, recovery.

The C core encodes records straight into the current segment's buffer at
the LSN it reserves under the tree lock and reports the end of what it has
written through `end_lsn()`; this class never copies record bytes. It hands
the encoder segments (`start`, `segment_for`), makes written bytes visible
and durable per the mode (`commit`, `flush`), and reads the log back on open
(`recover`). docs/wal.md describes the modes and their costs.

Write paths (`write_path`): "mmap" (log_only, background) gives the encoder
a shared mapping of the segment file; "pwrite" (fsync mode, and always with
direct=True) gives it anonymous aligned memory, and publishing pwrites the
4 KiB blocks covering the new bytes to the file.

Durability pointers (LSNs, only growing):
  published  everything below was handed to the OS (pwrite path: pwritten;
             mmap path: `Mapping.publish`, skipped on posix, where the
             mapping *is* the page cache)
  durable    everything below survives power loss (fdatasync of the segment
             files; fdatasync releases the GIL, so concurrent leaders overlap);
             the commit gate (wal/gate.py) holds it (and `published`)
Commit per mode and the group-commit rounds (in Python, or in C for fsync
mode on posix files) are `Committing`'s, wal/commit.py; what follows a
failed write or sync is `Failing`'s, wal/failure.py.
Invariants:
  (1) durable <= published <= end_lsn() on the simulator; durable <= end_lsn().
  (2) A leader syncs every segment from the one holding `durable` (as it was
      when it started) to the one holding its target, so when it finishes
      everything below its target is durable whatever other leaders did.
  (3) `end_lsn()` returns an LSN below which every byte is fully written.
"""

from __future__ import annotations

import threading

from pagestore.diskio import PosixFS
from pagestore.diskio.layout import tail_name

from .archive import Archive
from .commit import Committing
from .failure import Failing
from .gate import ThreadGate
from .newest import check_newest, keep_chain
from .format import BLOCK, FIRST_RECORD, MIN_SEGMENT, decode_segment_header, encode_segment_header
from .reader import RecoveryReport, SegmentMissing, scan
from .recseal import MAX_SEGMENT, seal_header
from .segments import WRITE_PATHS, Segments

__all__ = ["Wal", "MODES", "DEFAULT_FLUSH_INTERVAL", "DEFAULT_SEGMENT_SIZE"]

MODES = ("log_only", "fsync", "background")
DEFAULT_SEGMENT_SIZE = 64 * 1024 * 1024
DEFAULT_FLUSH_INTERVAL = 0.5   # seconds; background mode may lose at most about this much
DEFAULT_MAX_SYNCS = 1          # group-commit leaders allowed to fdatasync at once
_MAX_LINGER = 0.002            # seconds a leader may wait for its siblings (see Wal._flush)


class Wal(Committing, Failing):
    """The logical WAL of one store directory (see the module docstring)."""

    def __init__(self, fs, dirpath: str, *, mode: str = "log_only", segment_size: int = DEFAULT_SEGMENT_SIZE,
                 flush_interval: float = DEFAULT_FLUSH_INTERVAL, end_lsn=None,
                 max_syncs: int = DEFAULT_MAX_SYNCS, archive: str | None = None,
                 archive_size: int = 1 << 30, cipher=None, direct: bool = False,
                 write_path: str | None = None, sealer: str = "c", gate=None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        seal_in_python = cipher is not None and sealer == "python"
        if write_path is None:
            # Records sealed in Python are sealed when they are published, so
            # they need the pwrite path (a shared mapping would put plaintext
            # in the file); the C encoder's come out of it sealed.
            write_path = "pwrite" if mode == "fsync" or direct or seal_in_python else "mmap"
        if write_path not in WRITE_PATHS:
            raise ValueError(f"write_path must be one of {WRITE_PATHS}, got {write_path!r}")
        if direct and write_path != "pwrite":
            raise ValueError("direct=True (O_DIRECT) writes through write_path='pwrite'")
        if segment_size % BLOCK or segment_size < MIN_SEGMENT:
            raise ValueError(f"segment_size must be a multiple of {BLOCK} and >= {MIN_SEGMENT}")
        if not flush_interval > 0:
            raise ValueError("flush_interval must be > 0")
        self.fs = fs
        self.dir = dirpath
        self.mode = mode
        self.segment_size = segment_size
        self.flush_interval = flush_interval
        self.max_syncs = max(1, max_syncs)
        self.write_path = write_path
        self.direct = direct
        self._end_lsn = end_lsn
        self.cipher = cipher       # records sealed by the encoder (sealer "c") or at publish ("python")
        self.sealer = sealer if cipher is not None else None
        if self.sealer is not None and segment_size > MAX_SEGMENT:
            raise ValueError(f"an encrypted WAL needs segment_size <= {MAX_SEGMENT}")
        self._segs = Segments(fs, dirpath, segment_size, None, write_path=write_path,
                              direct=direct, cipher=cipher, sealer=sealer, progress=end_lsn)
        self._archive = Archive(fs, archive, archive_size, cipher=cipher) if archive else None
        self._segs.archive = self._archive
        self._pwrite = write_path == "pwrite"
        self._publish_needed = self._pwrite or not isinstance(fs, PosixFS)
        self._released = 0         # pwrite path: segments below this seq have no buffer
        # Group commit's coordination: the C one the store passes, or
        # ThreadGate for a WAL used without the C core.
        self._gate = gate if gate is not None else ThreadGate(
            lambda: self._end_lsn(), self.max_syncs, _MAX_LINGER)
        self._pub_lock = self._gate.publish_lock()
        self._published = self._start_lsn = 0
        # rounds written and synced in C (the module docstring)
        self._io = (mode == "fsync" and write_path == "pwrite" and not seal_in_python
                    and isinstance(fs, PosixFS) and hasattr(self._gate, "io_segment"))
        if self._io:
            self._segs.zeroing_hook = self._gate.io_zeroing
        self._started = self._closed = self._scanned = False
        self._scan_end = None
        self._stop = threading.Event()
        self._flusher = None
        self.flusher_error: BaseException | None = None
        self.recovery_report: RecoveryReport | None = None
        self._fsyncs = 0
        self._already = 0          # commits found durable without asking the gate
        # The first failed write or sync (wal/failure.py): nothing is
        # acknowledged after it; close() blanks what lies past `_acked_end`.
        self._failure: BaseException | None = None
        self._acked_end = self._handed_end = 0   # [acked, handed): given to the OS, not acknowledged
        self.blank_failed = False  # the disk refused the zeros too: unacknowledged records may return
        # The fence could not put every before-image back (the undo needed a
        # page it could not have: checkpoint buffer full, a failed read), so
        # unacknowledged writes may stay visible in memory until reopen.
        self.undo_failed = False
        self._settled = threading.Event()   # set once the first failure's fence and blanking are done
        # Set by the store: fence(acked_end or None) stops the encoder at the
        # failure (it undoes what lies past acked_end, refuses later records)
        # and returns the log's end then.
        self.fence = None
        if mode == "fsync":
            self.commit = self._commit_fsync
        elif self._publish_needed:
            self.commit = self._commit_publish
        else:
            self.commit = self._commit_nothing

    @property
    def shared_mapping(self) -> bool:
        """The writer's segment buffers are MAP_SHARED mappings of their files
        (posix, mmap path): ranges written may be unmapped, the data stays."""
        return not self._publish_needed

    # -- recovery ---------------------------------------------------------------
    def recover(self, from_lsn: int):
        """Iterate the valid records from `from_lsn`; when exhausted, cut the log there.

        Stops at the first invalid record (warning + `recovery_report` on
        damage or gap; a torn tail only counts its bytes, wal/stop.py).
        After the last record: the tail is copied to a
        side file `seg-N.wal.tail-<stop lsn>`, every segment not on the replay
        chain is renamed aside the same way, the chain is fsynced, and the
        next `start()` begins a fresh segment after the stop.
        """
        if self._started:
            raise RuntimeError("recover() must run before start()")
        self._segs.scan()
        self._segs.remove_unfinished()
        if from_lsn > 0:
            # A checkpoint's pointer is the lsn of its CHECKPOINT record, fsynced
            # before START and never trimmed away: without its segment the
            # records acknowledged since are gone, which no warning may pass over.
            seq = from_lsn // self.segment_size
            if not any(s.header is not None and s.seq == seq for s in self._segs.slots.values()):
                raise SegmentMissing(self.dir, seq, from_lsn)
        # A segment removed after the pointer's would read as the log's clean
        # end; wal/NEWEST names the newest one begun (wal/newest.py).
        check_newest(self._segs)
        self.recovery_report = report = RecoveryReport(from_lsn)
        end = yield from scan(self._segs, from_lsn, report)
        self._cut(end, report)

    def _cut(self, end, report: RecoveryReport) -> None:
        segs, stop = self._segs, end.stop_lsn
        suffix = tail_name("", stop)
        changed = False
        segs.close_readers()
        keep_chain(segs, end.chain)      # before any slot is renamed aside
        if end.tail is not None:
            slot, _offset, data = end.tail
            report.tail_file = slot.path + suffix
            segs.write_side_file(report.tail_file, data)
            changed = True
        for slot in end.off_chain:
            path = slot.path
            dst = segs.set_aside(slot, suffix)
            report.set_aside.append(dst)
            changed = True
            if end.torn:            # the rest of a torn tail (wal/stop.py): no damage
                continue
            what = "has a damaged header" if slot.header is None else \
                f"holds seq {slot.seq}, not on the log's chain ending at lsn {stop}"
            report.warn("damage", path, 0, None, f"segment file {what}; renamed to {dst}")
        for slot in end.chain:
            segs.hold(slot)
            segs.sync_slot(slot)
        if changed:
            segs.sync_dir()
        report.fresh_seq = end.fresh_seq
        self._scan_end = end
        self._scanned = True

    # -- the writer's side ----------------------------------------------------------
    def start(self, from_end_lsn: int | None = None):
        """A fresh segment for the encoder, as the arguments of `Core.wal_attach`:
        (buffer, segment_size, seq, offset, prev_end_lsn, write_header=False).

        `from_end_lsn` is the end of the log: the stop of the completed
        `recover()` (the default), or 0 for a new store. The segment header
        is already in the buffer (hence write_header False); the encoder
        writes from `offset` (block 1's header first).
        """
        if self._started:
            raise RuntimeError("start() called twice")
        if self._end_lsn is None:
            raise ValueError("Wal(end_lsn=...) is needed to write")
        if from_end_lsn is None:
            from_end_lsn = self._scan_end.stop_lsn if self._scanned else 0
        if not self._scanned:
            self._segs.scan()
            if any(s.header is not None for s in self._segs.slots.values()):
                raise RuntimeError("the WAL has segments: run recover() to its end before start()")
            S = self.segment_size
            fresh = from_end_lsn // S if from_end_lsn % S < FIRST_RECORD else from_end_lsn // S + 1
        else:
            if from_end_lsn != self._scan_end.stop_lsn:
                raise ValueError(f"recovery stopped at lsn {self._scan_end.stop_lsn}, not {from_end_lsn}")
            fresh = self._scan_end.fresh_seq
        buf = self._segs.acquire(fresh)
        self._register(fresh, buf)
        head = encode_segment_header(self.segment_size, fresh, from_end_lsn)
        buf[0:BLOCK] = seal_header(head, self.cipher) if self.cipher is not None else head
        if self._pwrite:
            # The header is in the file at once, as with a mapping (a store
            # closed before its first record reopens after this segment).
            self._segs.publish(fresh, 0, BLOCK)
        self._released = fresh
        self._published = from_end_lsn
        self._gate.reset(from_end_lsn)
        if self._io:
            self._gate.io_enable(True, self.segment_size, self.direct)
        self._start_lsn = fresh * self.segment_size   # bytes written count from the fresh segment
        self._started = True
        if self.mode == "background":
            self._flusher = threading.Thread(target=self._flush_loop, name="wal-flusher", daemon=True)
            self._flusher.start()
        return buf, self.segment_size, fresh, BLOCK, from_end_lsn, False

    def segment_for(self, seq: int):
        """The encoder's next-segment callback: the writable buffer of segment `seq`."""
        buf = self._segs.acquire(seq)
        self._register(seq, buf)
        return buf

    def reserve(self, seq: int, need: int) -> int:
        """The encoder's space callback: bytes [0, need) of segment `seq` allocated
        on disk; returns the allocated end (wal/growth.py, `Growth.reserve`)."""
        return self._segs.reserve(seq, need)

    def _sync_range(self, start: int, target: int) -> None:
        if self._failure is not None:
            raise self._failure
        # In fsync mode only the durable is acknowledged; in the others a
        # record is once published, so a failed sync leaves those intact.
        acked = self._durable if self.mode == "fsync" else self._visible_end()
        try:
            if self._publish_needed:
                self._publish_upto(target)
            self.fs.crash_point("wal.before_fsync")
            S = self.segment_size
            for seq in range(start // S, (max(target, 1) - 1) // S + 1):
                self._segs.sync(seq)
                self._fsyncs += 1
        except Exception as exc:
            self._fail(exc, acked)
            raise
        self.fs.crash_point("wal.after_fsync")

    def _publish_upto(self, target: int) -> None:
        first_failure = False
        try:
            with self._pub_lock:
                if self._failure is not None:
                    raise self._failure
                a = self._published
                if target <= a:
                    return
                S, segs = self.segment_size, self._segs
                last = (target - 1) // S
                try:
                    for seq in range(a // S, last + 1):
                        base = seq * S
                        lo = max(a - base, 0)
                        hi = target - base if seq == last else self._data_end(seq)
                        if hi > lo:
                            segs.publish(seq, lo, hi)
                except Exception as exc:
                    # set under the lock, before another publish could cover
                    # these records and acknowledge a later one
                    first_failure = self._failure is None
                    if first_failure:
                        self._failure, self._acked_end = exc, self._durable if self.mode == "fsync" else a
                        self._handed_end = max(target, self._acked_end)   # part may have gone
                    raise
                self._published = target
        finally:
            if first_failure:
                self._settle()

    def _data_end(self, seq: int) -> int:
        """Offset just past segment seq's last record (from the next segment's header)."""
        S = self.segment_size
        try:
            header = decode_segment_header(self._segs.buffer(seq + 1))
        except KeyError:
            header = None
        if header is None or not seq * S <= header.prev_end_lsn <= (seq + 1) * S:
            return S
        return header.prev_end_lsn - seq * S

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_interval):
            try:
                self.flush()
            except BaseException as exc:  # kept for the owner; the flusher stops
                self.flusher_error = exc
                return

    # -- trimming, stats, teardown ---------------------------------------------------
    def missing(self) -> str | None:
        """A needed segment file removed under the running store, or None."""
        return self._segs.missing()

    def trim(self, lsn: int) -> None:
        """Records before `lsn` are no longer needed (a durable checkpoint's pointer)."""
        if self._pwrite and self._started and not self._closed:
            # The archive copies the files: every byte of a trimmed segment
            # must be in its file before the slot is closed. A caller that
            # flushed to `lsn` (the checkpointer) makes this a no-op.
            self._publish_upto(min(lsn, self._end_lsn()))
        if self._io:
            self._gate.io_forget(lsn // self.segment_size)   # their files may close now
        self._segs.trim(lsn // self.segment_size)

    @property
    def durable_lsn(self) -> int:
        """Everything below is durable."""
        return self._gate.durable

    def stats(self) -> dict:
        """The WAL's figures for `Database.stats()` (docs/wal.md lists them)."""
        g = self._gate.stats()
        rounds, grouped = g["rounds"], g["grouped"] + self._already
        return {
            "wal_mode": self.mode,
            "wal_bytes_written": max(0, self._end_lsn() - self._start_lsn) if self._started else 0,
            "wal_fsyncs": self._fsyncs + g.get("io_fsyncs", 0),
            "wal_group_commits": rounds,
            "wal_group_size_mean": grouped / rounds if rounds else 0.0,
            "wal_group_size_max": max(g["group_max"], g["round_size"]),
            "wal_linger_seconds": g["lingered"],
            "wal_durable_lsn": self._gate.durable,
            "wal_segments_created": self._segs.created,
            "wal_segments_live": len(self._segs.live),
            "wal_segments_archived": self._archive.archived if self._archive else 0,
            "wal_encrypted": self.cipher is not None,
            "wal_sealer": self.sealer,
            "wal_write_path": self.write_path,
            "wal_direct": self.direct,
            "wal_pwrites": self._segs.pwrites + g.get("io_pwrites", 0),
            "wal_pwrite_bytes": self._segs.pwrite_bytes + g.get("io_pwrite_bytes", 0),
            "wal_rounds_in_c": g.get("io_rounds", 0),
        }

    def abandon(self) -> None:
        """Stop background threads without flushing (tests: the process dies here)."""
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        self._io_off()
        self._segs.join()
        if self._archive is not None:
            self._archive.close()

    def close(self) -> None:
        """Flush everything written, stop the flusher, unmap every segment."""
        if self._closed:
            return
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        try:
            if self._started and self._failure is None:
                self.flush()
        finally:
            self._closed = True
            try:
                if self._failure is not None:
                    self._blank_unacknowledged()
            finally:
                self._io_off()
                self._segs.close()
            if self._archive is not None:
                self._archive.close()  # lets a background compaction round finish
