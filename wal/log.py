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
             files; fdatasync releases the GIL, so concurrent leaders overlap)
Invariants:
  (1) durable <= published <= end_lsn() on the simulator; durable <= end_lsn().
  (2) A leader syncs every segment from the one holding `durable` (as it was
      when it started) to the one holding its target, so when it finishes
      everything below its target is durable whatever other leaders did.
  (3) `end_lsn()` returns an LSN below which every byte is fully written.
"""

from __future__ import annotations

import threading
from _thread import allocate_lock as _allocate_lock
from time import monotonic as _monotonic

from pagestore.diskio import PosixFS

from .archive import Archive
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


class Wal:
    """The logical WAL of one store directory (see the module docstring)."""

    def __init__(self, fs, dirpath: str, *, mode: str = "log_only", segment_size: int = DEFAULT_SEGMENT_SIZE,
                 flush_interval: float = DEFAULT_FLUSH_INTERVAL, end_lsn=None,
                 max_syncs: int = DEFAULT_MAX_SYNCS, archive: str | None = None,
                 archive_size: int = 1 << 30, cipher=None, direct: bool = False,
                 write_path: str | None = None, sealing: str = "blocks"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        seal_blocks = cipher is not None and sealing == "blocks"
        if write_path is None:
            # Block sealing happens when bytes are published, so it needs the
            # pwrite path (a shared mapping would put plaintext in the file);
            # records come out of the encoder sealed (sealing="records").
            write_path = "pwrite" if mode == "fsync" or direct or seal_blocks else "mmap"
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
        self.cipher = cipher       # blocks sealed at publish (wal/sealed.py) or records by the encoder
        self.sealing = sealing if cipher is not None else None
        if self.sealing == "records" and segment_size > MAX_SEGMENT:
            raise ValueError(f"sealing='records' needs segment_size <= {MAX_SEGMENT}")
        self._segs = Segments(fs, dirpath, segment_size, None, write_path=write_path,
                              direct=direct, cipher=cipher, sealing=sealing)
        self._archive = Archive(fs, archive, archive_size, cipher=cipher) if archive else None
        self._segs.archive = self._archive
        self._pwrite = write_path == "pwrite"
        self._publish_needed = self._pwrite or not isinstance(fs, PosixFS)
        self._released = 0         # pwrite path: segments below this seq have no buffer
        self._mu = threading.Lock()
        self._waiters: list = []   # (lsn, gate lock) of commits waiting for a sync round
        self._pub_lock = threading.Lock()
        self._published = self._durable = self._start_lsn = 0
        self._sync_target = 0      # highest target of a leader in flight
        self._syncing = 0          # leaders in flight
        self._started = False
        self._closed = False
        self._scan_end = None
        self._scanned = False
        self._stop = threading.Event()
        self._flusher = None
        self.flusher_error: BaseException | None = None
        self.recovery_report: RecoveryReport | None = None
        self._fsyncs = self._rounds = self._grouped = self._group_max = self._round_size = 0
        self._in_flight = 0        # threads released by the last round, not yet back (see _flush)
        self._linger_gate = None   # held by a lingering leader, released by the last one back
        self._sync_mean = 0.0      # moving mean of a sync round's duration, seconds
        self._lingered = 0.0
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
        damage or gap). After the last record: the torn tail is copied to a
        side file `seg-N.wal.tail-<stop lsn>`, every segment not on the replay
        chain is renamed aside the same way, the chain is fsynced, and the
        next `start()` begins a fresh segment after the stop.
        """
        if self._started:
            raise RuntimeError("recover() must run before start()")
        self._segs.scan()
        if from_lsn > 0:
            # A checkpoint's pointer is the lsn of its CHECKPOINT record, fsynced
            # before START and never trimmed away: without its segment the
            # records acknowledged since are gone, which no warning may pass over.
            seq = from_lsn // self.segment_size
            if not any(s.header is not None and s.seq == seq for s in self._segs.slots.values()):
                raise SegmentMissing(self.dir, seq, from_lsn)
        self.recovery_report = report = RecoveryReport(from_lsn)
        end = yield from scan(self._segs, from_lsn, report)
        self._cut(end, report)

    def _cut(self, end, report: RecoveryReport) -> None:
        segs, stop = self._segs, end.stop_lsn
        suffix = f".tail-{stop}"
        changed = False
        segs.close_readers()
        if end.tail is not None:
            slot, _offset, data = end.tail
            report.tail_file = slot.path + suffix
            segs.write_side_file(report.tail_file, data)
            changed = True
        for slot in end.off_chain:
            path = slot.path
            dst = segs.set_aside(slot, suffix)
            report.set_aside.append(dst)
            what = "has a damaged header" if slot.header is None else \
                f"holds seq {slot.seq}, not on the log's chain ending at lsn {stop}"
            report.warn("damage", path, 0, None, f"segment file {what}; renamed to {dst}")
            changed = True
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
        head = encode_segment_header(self.segment_size, fresh, from_end_lsn)
        buf[0:BLOCK] = seal_header(head, self.cipher) if self.sealing == "records" else head
        if self._pwrite:
            # The header is in the file at once, as with a mapping (a store
            # closed before its first record reopens after this segment).
            self._segs.publish(fresh, 0, BLOCK)
        self._released = fresh
        self._published = self._durable = self._sync_target = from_end_lsn
        self._start_lsn = fresh * self.segment_size   # bytes written count from the fresh segment
        self._started = True
        if self.mode == "background":
            self._flusher = threading.Thread(target=self._flush_loop, name="wal-flusher", daemon=True)
            self._flusher.start()
        return buf, self.segment_size, fresh, BLOCK, from_end_lsn, False

    def segment_for(self, seq: int):
        """The encoder's next-segment callback: the writable buffer of segment `seq`."""
        return self._segs.acquire(seq)

    # -- commit per mode ---------------------------------------------------------------
    def _commit_nothing(self, lsn: int) -> None:
        """log_only/background on posix: the record already sits in the page cache."""

    def _commit_publish(self, lsn: int) -> None:
        """log_only/background on the simulator: hand the new bytes to the OS."""
        if lsn > self._published:
            self._publish_upto(self._end_lsn())

    def _commit_fsync(self, lsn: int) -> None:
        """fsync: return once `lsn` is durable; concurrent callers share fsyncs."""
        if lsn > self._durable:
            self._flush(lsn, linger=True)
        else:
            self._grouped += 1  # covered by a round it did not wait for (unlocked: a statistic)

    def flush(self, lsn: int | None = None) -> int:
        """Make the log durable up to `lsn` (default: all written); returns the durable LSN."""
        self._flush(self._end_lsn() if lsn is None else lsn)
        return self._durable

    def _flush(self, lsn: int, linger: bool = False) -> None:
        """Group commit: lead a sync round or wait for one that covers `lsn`.

        Each waiter blocks on its own lock; a finishing leader releases the
        waiters its round covered and, if others are left uncovered, wakes
        one of them to lead the next round. No herd re-contends for a shared
        lock, which matters when every commit waits (see docs/wal.md).

        Linger (commits only): the threads a round released come back one at
        a time (each needs the GIL for its next operation), so the first to
        return would otherwise sync alone and the rest would form the next
        round -- groups of ~2 with 16 writers. A new leader therefore waits
        until every thread the last round released has committed again
        (`_in_flight` reaches 0), at most about one recent sync's duration,
        then syncs them all: PostgreSQL's commit_delay/commit_siblings, with
        the siblings counted instead of guessed. One thread never lingers.
        """
        mu = self._mu
        first = True
        # A KeyboardInterrupt can land in the main thread between any two
        # calls: once this thread has taken a sync slot (`leading`), the
        # finally below gives it back whatever happens, or every later commit
        # would wait for a round no one leads.
        leading = ok = release = False
        pause = None
        try:
            while True:
                with mu:
                    if first:
                        first = False
                        if self._in_flight:
                            self._in_flight -= 1
                            if not self._in_flight and self._linger_gate is not None:
                                self._linger_gate.release()
                                self._linger_gate = None
                    if self._durable >= lsn:
                        self._round_size += 1
                        self._grouped += 1
                        return
                    if self._syncing < self.max_syncs and lsn > self._sync_target:
                        if lsn > self._end_lsn():
                            raise ValueError(f"lsn {lsn} is past the end of the log {self._end_lsn()}")
                        self._syncing += 1
                        leading = True
                        if (linger and self._in_flight and self._linger_gate is None
                                and min(_MAX_LINGER, self._sync_mean) > 0):
                            pause = self._linger_gate = _allocate_lock()
                            pause.acquire()
                        if pause is None:
                            start = self._durable
                            target = self._end_lsn()
                            self._sync_target = max(self._sync_target, target)
                        break
                    gate = _allocate_lock()
                    gate.acquire()
                    self._waiters.append((lsn, gate))
                try:
                    gate.acquire()  # released by a leader: covered now, or asked to lead
                except BaseException:
                    self._leave_waiters(lsn, gate)
                    raise
            if pause is not None:
                t0 = _monotonic()
                pause.acquire(True, min(_MAX_LINGER, self._sync_mean))
                self._lingered += _monotonic() - t0
                with mu:
                    if self._linger_gate is pause:
                        self._linger_gate = None
                    start = self._durable
                    target = self._end_lsn()
                    self._sync_target = max(self._sync_target, target)
            t0 = _monotonic()
            self._sync_range(start, target)
            self._sync_mean += (_monotonic() - t0 - self._sync_mean) * 0.125
            ok = True
        finally:
            if leading:
                with mu:
                    if pause is not None and self._linger_gate is pause:
                        self._linger_gate = None
                    self._syncing -= 1
                    if ok and target > self._durable:
                        self._durable = target
                        release = self._pwrite and target // self.segment_size > self._released
                        self._rounds += 1
                        self._group_max = max(self._group_max, self._round_size)
                        self._round_size = 0
                    elif not ok:
                        self._sync_target = self._durable
                    self._round_size += 1
                    self._grouped += 1
                    durable, left = self._durable, []
                    back = 1                  # this leader, and every waiter it releases
                    for entry in self._waiters:
                        if entry[0] <= durable:
                            entry[1].release()
                            back += 1
                        else:
                            left.append(entry)
                    self._in_flight = back if ok else 0
                    if left and not ok:       # let every waiter retry (and meet the error itself)
                        for _lsn, gate in left:
                            gate.release()
                        left = []
                    elif left and self._syncing < self.max_syncs:
                        left.pop()[1].release()  # it loops back and leads the next round
                    self._waiters = left
        if release:
            self._release_written()

    def _leave_waiters(self, lsn: int, gate) -> None:
        """A waiter interrupted (KeyboardInterrupt) leaves the queue; if a leader
        had already picked it to lead the next round, it hands that on."""
        with self._mu:
            try:
                self._waiters.remove((lsn, gate))
            except ValueError:                # released already: covered, or asked to lead
                if lsn > self._durable and self._waiters and self._syncing < self.max_syncs:
                    self._waiters.pop()[1].release()

    def _release_written(self) -> None:
        """pwrite path: drop the buffers of segments wholly below `durable`.

        They are written and synced, and the encoder has moved on. Under
        `_pub_lock`, so no publish is reading them (a later publish starts
        at `published` >= `durable`).
        """
        with self._pub_lock:
            upto = self._durable // self.segment_size
            if upto > self._released:
                self._segs.release(upto)
                self._released = upto

    def _sync_range(self, start: int, target: int) -> None:
        if self._publish_needed:
            self._publish_upto(target)
        self.fs.crash_point("wal.before_fsync")
        S = self.segment_size
        for seq in range(start // S, (max(target, 1) - 1) // S + 1):
            self._segs.sync(seq)
            self._fsyncs += 1
        self.fs.crash_point("wal.after_fsync")

    def _publish_upto(self, target: int) -> None:
        with self._pub_lock:
            a = self._published
            if target <= a:
                return
            S, segs = self.segment_size, self._segs
            last = (target - 1) // S
            for seq in range(a // S, last + 1):
                base = seq * S
                lo = max(a - base, 0)
                hi = target - base if seq == last else self._data_end(seq)
                if hi > lo:
                    segs.publish(seq, lo, hi)
            self._published = target

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
    def trim(self, lsn: int) -> None:
        """Records before `lsn` are no longer needed (a durable checkpoint's pointer)."""
        if self._pwrite and self._started and not self._closed:
            # The archive copies the files: every byte of a trimmed segment
            # must be in its file before the slot is closed. A caller that
            # flushed to `lsn` (the checkpointer) makes this a no-op.
            self._publish_upto(min(lsn, self._end_lsn()))
        self._segs.trim(lsn // self.segment_size)

    @property
    def durable_lsn(self) -> int:
        return self._durable

    def stats(self) -> dict:
        rounds = self._rounds
        return {
            "wal_mode": self.mode,
            "wal_bytes_written": max(0, self._end_lsn() - self._start_lsn) if self._started else 0,
            "wal_fsyncs": self._fsyncs,
            "wal_group_commits": rounds,
            "wal_group_size_mean": self._grouped / rounds if rounds else 0.0,
            "wal_group_size_max": max(self._group_max, self._round_size),
            "wal_linger_seconds": self._lingered,
            "wal_durable_lsn": self._durable,
            "wal_segments_created": self._segs.created,
            "wal_segments_live": len(self._segs.live),
            "wal_segments_archived": self._archive.archived if self._archive else 0,
            "wal_encrypted": self.cipher is not None,
            "wal_sealing": self.sealing,
            "wal_write_path": self.write_path,
            "wal_direct": self.direct,
            "wal_pwrites": self._segs.pwrites,
            "wal_pwrite_bytes": self._segs.pwrite_bytes,
        }

    def abandon(self) -> None:
        """Stop background threads without flushing (tests: the process dies here)."""
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
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
            if self._started:
                self.flush()
        finally:
            self._closed = True
            self._segs.close()
            if self._archive is not None:
                self._archive.close()  # lets a background compaction round finish
