"""The checkpointer: IEP-113 checkpoints through recovery files (DESIGN.md §3).

Invariants (DESIGN.md §4), and where this module keeps them:

 (1) A page is written in place only after its image is durable in a
     recovery file of the same checkpoint and the START marker is durable.
     `_run` calls `pool.write_pages` only after `write_marker(START)` has
     returned, and that returns only after the marker's rename and the fsync
     of cp/ (diskio.write_atomic).
 (2) The START marker is durable only after every recovery file of its
     checkpoint is durable: every writer fsyncs its file, then cp/ is
     fsynced (the files' names), and only then is START written.
 (3) WAL records before the last completed checkpoint's pointer are never
     needed: `wal.trim` runs only after the END marker is durable. In "wal"
     mode it trims only to the *previous* checkpoint's pointer, because
     rebuilding pages after a crash of the next checkpoint reads the page
     records logged since this checkpoint began.
 (4) Nothing acknowledged is lost: the WAL is fsynced up to the CHECKPOINT
     record (step 2) before START names that record as the replay pointer.
 (5) Pages carry their CRC: `source.copy_pages` stamps it; recovery files
     store those exact bytes, so a restored page is the page that was copied.
 (6) Page replacement evicts only clean pages: `source.release` is called
     for a chunk only after the sink wrote it, so the store learns a page is
     clean only when it is on disk.

A checkpoint's states (after SQLite pager.c), with the step that moves it:

    IDLE
      | 1 source.begin (lock held inside the source) . 2 wal.flush(lsn)
      | 3 delete old recovery files, write + fsync new ones, fsync cp/
      v
    RECOVERY_FILES_SYNCED
      | 4 START marker (write_atomic)
      v
    START_WRITTEN
      | 5 pages in place through the sink, sink.sync()
      v
    PAGES_SYNCED
      | 6 END marker (write_atomic)
      v
    END_WRITTEN
      | source.finish(), wal.trim(), prune old markers
      v
    IDLE

Crash points (diskio/crashpoints.py) and what recovery makes of a crash there:

    checkpoint.after_lock             nothing durable yet: previous checkpoint stands
    checkpoint.after_wal_fsync        idem (the CHECKPOINT record is merely durable)
    checkpoint.after_recovery_reuse   old recovery files renamed to this one's names: ignored
    checkpoint.recovery_file_written  recovery files without START: ignored
    checkpoint.after_recovery_fsync   idem
    checkpoint.start_tmp_written      only START's temp file: ignored
    checkpoint.after_start_marker     START without END: restore, replay from START
    checkpoint.page_written           idem (pages may be torn)
    checkpoint.before_page_fsync      idem
    checkpoint.after_page_fsync       idem (pages whole, END missing: restore is harmless)
    checkpoint.after_end_marker       complete: replay from this checkpoint's pointer
    checkpoint.after_wal_trim         idem

In "wal" mode there are no recovery files; a START without END is repaired
from the WAL's page records instead (recovery/physical.py).
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from pagestore.wal.contracts import WalHandle

from . import pool
from .attempt import Attempt, RecordingSource, backoff, is_fatal, waited_for
from .steps import CheckpointSteps
from .compression import PageCodec
from .contracts import PageSink, PageSource, RecoveryFraming
from .pacing import Pacer
from .format import END, START, Marker
from .markers import cp_dir, prune_markers, read_marker, scan, write_marker

__all__ = ["Checkpointer", "CheckpointerError", "STATES", "DEFAULT_INTERVAL", "DEFAULT_THREADS"]

STATES = ("IDLE", "RECOVERY_FILES_SYNCED", "START_WRITTEN", "PAGES_SYNCED", "END_WRITTEN")
DEFAULT_INTERVAL = 180.0      # seconds; Ignite's DFLT_CHECKPOINT_FREQ
DEFAULT_THREADS = 4           # Ignite's DFLT_CHECKPOINT_THREADS
# 1 MiB per pwrite with 4 KiB pages. Each chunk costs a writer thread a few
# trips through the GIL (queue, copy, write, release, progress), each one a
# chance to make a put wait for it; with 64-page chunks ~400 puts per
# checkpoint waited over 20 us in the page-write phase (measured with 4
# threads on 2 cores), with 256 about 70.
DEFAULT_CHUNK_PAGES = 256
COPY_FIRST_FRACTION = 2 / 3   # checkpoint-buffer fill above which COW pages go first
MARKER_HISTORY = 2            # completed checkpoints whose markers are kept


HISTORY = 256


class CheckpointerError(Exception):
    """The checkpointer cannot start, or an earlier checkpoint failed."""


class Checkpointer(CheckpointSteps):
    """A background checkpoint thread plus a pool of `threads` writers.

    `dirpath` is the store directory; markers and recovery files go to its
    `cp/`. `source`, `sink` and `wal` are a `PageSource`, a `PageSink` and
    a `wal.WalHandle` (contracts.py, wal/contracts.py); `framing`, when given, is the
    `RecoveryFraming` fast path for recovery-file records (None: the Python
    framing). `clock` is injected (seconds, monotonic)
    so tests can drive the interval trigger. `cipher` (an object with
    `seal(data, context)`, pagestore.cipher.Cipher) seals every recovery
    record. `first_checkpoint_id` is a floor for the next id (the directory
    scan already continues after the highest id found in cp/). With `spread`
    > 0 a timed checkpoint paces its in-place page writes to end by
    `spread · interval` after it began (pacing.py); naps run on real time,
    so a test with a frozen `clock` leaves `spread` at 0.
    """

    def __init__(self, fs, dirpath: str, source: PageSource, sink: PageSink, wal: WalHandle, *,
                 threads: int = DEFAULT_THREADS,
                 interval: float | None = DEFAULT_INTERVAL, compression: str = "skip_garbage",
                 compression_level: int | None = None, recovery_data: str = "checkpoint",
                 clock=time.monotonic, chunk_pages: int = DEFAULT_CHUNK_PAGES,
                 copy_first_fraction: float = COPY_FIRST_FRACTION, cipher=None,
                 first_checkpoint_id: int = 1, autostart: bool = True, spread: float = 0.0,
                 framing: RecoveryFraming | None = None):
        if recovery_data not in ("checkpoint", "wal"):
            raise ValueError(f"recovery_data must be 'checkpoint' or 'wal', got {recovery_data!r}")
        if threads < 1 or chunk_pages < 1:
            raise ValueError("threads and chunk_pages must be >= 1")
        if not 0.0 <= spread <= 1.0:
            raise ValueError(f"spread must be in [0, 1], got {spread!r}")
        self.spread = spread
        self.fs, self.source, self.sink, self.wal = fs, source, sink, wal
        self.framing = framing
        self.cpdir = cp_dir(dirpath)
        self.page_size = source.page_size
        self.codec = PageCodec(compression, compression_level, self.page_size)
        self.recovery_data, self.threads, self.interval = recovery_data, threads, interval
        self.clock, self.chunk_pages, self.copy_first_fraction = clock, chunk_pages, copy_first_fraction
        self.cipher = cipher
        self.state = "IDLE"

        cp = scan(fs, self.cpdir)
        if cp.interrupted is not None:
            raise CheckpointerError(f"checkpoint {cp.interrupted} has a START marker and no END: "
                                    "run recovery.recover() before starting the checkpointer")
        # Ids only grow, past every name in cp/ (even a crashed attempt's
        # recovery files), so no file is ever reused for another checkpoint.
        self._next_id = max(cp.max_id + 1, first_checkpoint_id)
        last = cp.last_complete
        self._last_lsn = read_marker(fs, self.cpdir, last, START).wal_lsn if last is not None else 0

        self._progress = pool.Progress(clock)
        self._totals = {"checkpoints": 0, "recovery_bytes_written": 0, "page_bytes_written": 0,
                        "recovery_pages_written": 0, "pages_written": 0, "gap_fallbacks": 0,
                        "lock_seconds_max": 0.0, "last_checkpoint": None}
        # The last HISTORY checkpoints' figures, for per-checkpoint rows.
        self._history = collections.deque(maxlen=HISTORY)
        self._cond = threading.Condition()
        self._requested = self._done = 0
        self._begun = 0             # requests covered by the checkpoint that began last
        self._reasons: list[str] = []
        self._error: BaseException | None = None   # the last try's failure (None once one succeeds)
        self._stopping = False
        # A begun checkpoint that failed is resumed (attempt.py) after a backoff
        # on real time; requests made up to a failure are answered by it.
        self._attempt: Attempt | None = None
        self._retry_at = 0.0
        self._failed_upto = 0
        self._failures = self._consecutive = 0
        # on_failure(exc, fatal): called (no lock held) when a checkpoint no
        # caller waits for fails after the last one succeeded, and always for a
        # fatal failure (attempt.is_fatal: no retry; only a reopen recovers)
        self.on_failure = None
        self._broken: BaseException | None = None
        # Set by any request (and by close) made while a checkpoint runs, and by
        # `hurry`: a paced page phase then goes full speed (pacing.py).
        self._hurry = threading.Event()
        self._hurry_why = "request"
        self._last_end = clock()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="pagestore-cp-writer")
        self._thread = threading.Thread(target=self._main, name="pagestore-checkpointer", daemon=True)
        if autostart:
            self._thread.start()

    # -- triggers --------------------------------------------------------
    def request(self, reason: str) -> int:
        """Ask for a checkpoint soon (dirty pages, WAL size, close...); returns a ticket.

        Requests made while a checkpoint runs are served by the next one,
        since the running one's page set was fixed at its begin.
        """
        with self._cond:
            self._raise_if_dead()
            self._requested += 1
            self._reasons.append(reason)
            self._hurry_now("request")
            self._cond.notify_all()
            return self._requested

    def hurry(self, why: str) -> None:
        """Finish the running checkpoint at full speed, without asking for another
        (writers waiting for the clean pages only its page writes make)."""
        if self._hurry.is_set():     # the common case once hurried: no lock
            return
        with self._cond:
            self._hurry_now(why)

    def _hurry_now(self, why: str) -> None:
        # under self._cond; the first reason is the one reported
        if not self._hurry.is_set():
            self._hurry_why = why
            self._hurry.set()

    def checkpoint(self, wait: bool = True, reason: str = "explicit", timeout: float | None = None):
        """Request a checkpoint; with `wait`, block until one begun after the request ends.

        Returns that checkpoint's stats (see `last_checkpoint`), or None if
        not waiting. Re-raises the failure of the checkpoint that served it.
        """
        if wait and not self._thread.is_alive() and self._error is None and not self._stopping:
            raise CheckpointerError("checkpointer not started: call start() before waiting")
        ticket = self.request(reason)
        if not wait:
            return None
        with self._cond:
            if not self._cond.wait_for(lambda: self._done >= ticket or self._failed_upto >= ticket
                                       or self._dead() or self._broken is not None, timeout):
                raise TimeoutError(f"checkpoint not finished within {timeout} s")
            if self._done >= ticket:
                return self._totals["last_checkpoint"]
            self._raise_if_failed()
            raise CheckpointerError("checkpoint failed")

    def start(self) -> None:
        """Start the background thread (idempotent; `autostart` does it at construction)."""
        with self._cond:
            if not self._thread.is_alive() and not self._stopping:
                self._thread.start()

    def close(self, final_checkpoint: bool = True) -> None:
        """Stop the thread and pool; first run a final checkpoint (clean close).
        Without one, a running checkpoint finishes at full speed and none begins
        after, even for a pending request (its waiters get CheckpointerError)."""
        try:
            if final_checkpoint and not self._dead() and not self._stopping:
                self.start()
                with self._cond:
                    self._retry_at = 0.0        # no backoff for the last try
                self.checkpoint(wait=True, reason="close")
        finally:
            with self._cond:
                self._stopping = True
                self._hurry_now("close")
                self._cond.notify_all()
            if self._thread.is_alive():
                self._thread.join()
            self._pool.shutdown(wait=True)

    def _dead(self) -> bool:
        # a SimulatedCrash (not an Exception): the "process" is dead
        return self._error is not None and not isinstance(self._error, Exception)

    def _raise_if_dead(self) -> None:
        if self._dead():
            raise self._error
        if self._stopping:
            raise CheckpointerError("checkpointer is closed")

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            if not isinstance(self._error, Exception):
                raise self._error        # SimulatedCrash: the "process" is dead
            raise CheckpointerError(f"checkpoint failed: {self._error!r}") from self._error
        if self._stopping:
            raise CheckpointerError("checkpointer is closed")

    def _interval_due(self) -> float | None:
        """Seconds until the interval trigger (<= 0: due), or None if disabled."""
        if self.interval is None:
            return None
        return self._last_end + self.interval - self.clock()

    def _main(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - a defect: the waiters must not hang on it
            # An exception out of the loop itself (its failure handling
            # failed) would end the thread with every waiter asleep and every
            # later checkpoint unserved: break the checkpointer loudly instead.
            with self._cond:
                self._error = self._broken = exc
                self._retry_at = float("inf")
                self._failed_upto = self._requested
                self._cond.notify_all()
            if self.on_failure is not None:
                self.on_failure(exc, True)
            raise

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        # nothing begins after close, even for a pending request: a
                        # simulated kill (Engine.abandon) must not checkpoint after it
                        self._failed_upto = self._requested
                        self._cond.notify_all()
                        return
                    due = time.monotonic() >= self._retry_at
                    if due and (self._requested > self._done or self._attempt is not None):
                        break
                    left = self._interval_due()
                    if due and left is not None and left <= 0:
                        self._reasons.append("interval")
                        break
                    # Poll at least once a second so an injected clock that
                    # jumps forward is noticed.
                    waits = [x for x in (left, None if due else self._retry_at - time.monotonic())
                             if x is not None]
                    self._cond.wait(min(max(min(waits), 0.0), 1.0) if waits else None)
                attempt = self._attempt
                if attempt is None:
                    covering = self._begun = self._requested
                    reason = ",".join(dict.fromkeys(self._reasons))
                    self._reasons.clear()
                else:
                    covering, reason = attempt.covering, attempt.stats["reason"]
                self._hurry.clear()         # `_hurry_now` names the next hurry's reason
            try:
                self._run(reason, covering)
            except BaseException as exc:  # noqa: BLE001 - handed to every waiter, then retried
                with self._cond:
                    fatal = is_fatal(exc, self._progress.phase)
                    self._error = exc
                    self._progress.running = False
                    self._progress.set_phase("idle")
                    self._failures += 1
                    self._consecutive += 1
                    self._retry_at = time.monotonic() + backoff(self._consecutive)
                    if fatal:
                        self._broken, self._retry_at = exc, float("inf")
                    self._failed_upto = self._requested
                    if not fatal or self._dead() or self._stopping:
                        self._cond.notify_all()
                    if self._dead() or self._stopping:
                        return
                    unseen = fatal or (self._consecutive == 1 and not waited_for(reason))
                if unseen and self.on_failure is not None:
                    self.on_failure(exc, fatal)
                if fatal:           # waiters wake to a store that already refuses writes
                    with self._cond:
                        self._cond.notify_all()
                continue
            with self._cond:
                self._done = max(self._done, covering)
                self._error, self._consecutive = None, 0
                self._last_end = self.clock()
                self._cond.notify_all()

    # -- one checkpoint ---------------------------------------------------
    def _run(self, reason: str, covering: int) -> dict:
        fs, clock, fsync = self.fs, self.clock, 0.0
        a = self._attempt
        if a is None:
            a = self._attempt = self._begin(reason, covering)
        else:                                   # resuming (attempt.py)
            with self._progress.lock:
                p = self._progress
                p.running, p.checkpoint_pages, p.pages_written = True, len(a.page_ids), len(a.released)
        cid, page_ids, lsn, stats, t0 = a.cid, a.page_ids, a.lsn, a.stats, a.t0
        if not a.started:
            fsync = self._before_start(a)
            a.started = True

        # Step 5 (invariant 1: START is durable by now); a resumed try
        # writes what the failed one did not release.
        todo = a.remaining()
        self._progress.set_phase("pages")
        pacer = self._pacer(reason, t0, len(todo))
        t = clock()
        w = pool.write_pages(self._pool, fs, RecordingSource(self.source, a), self.sink, todo,
                             workers=self.threads,
                             chunk_pages=self.chunk_pages, page_size=self.page_size,
                             progress=self._progress, copy_first_fraction=self.copy_first_fraction,
                             pacer=pacer)
        stats["page_write_seconds"] = clock() - t
        stats["paced_until"] = pacer.deadline - t0 if pacer else None
        stats["napped_seconds"] = pacer.napped if pacer else 0.0
        stats["hurried"] = pacer.hurried if pacer else None
        stats["priority_chunks"] = w["priority_chunks"]
        fs.crash_point("checkpoint.before_page_fsync")
        self._progress.set_phase("page_fsync")
        t = clock()
        self.sink.sync()
        stats["page_sync_seconds"] = clock() - t
        fsync += stats["page_sync_seconds"]
        self.state = "PAGES_SYNCED"
        fs.crash_point("checkpoint.after_page_fsync")

        # Step 6.
        write_marker(fs, self.cpdir, Marker(END, cid, lsn, len(page_ids), self._last_lsn,
                                             stats["recovery_files"], self.recovery_data))
        self.state = "END_WRITTEN"
        fs.crash_point("checkpoint.after_end_marker")
        usage = self.source.checkpoint_buffer()
        self.source.finish()
        self.wal.trim(lsn if self.recovery_data == "checkpoint" else self._last_lsn)
        fs.crash_point("checkpoint.after_wal_trim")
        self._last_lsn = lsn
        self._attempt = None
        prune_markers(self.fs, self.cpdir, cid, MARKER_HISTORY)
        self.state = "IDLE"

        stats.update(page_bytes=len(page_ids) * self.page_size, fsync_seconds=fsync,
                     total_seconds=clock() - t0, cow_peak=usage[2])
        self._account(stats)
        return stats

    def _pacer(self, reason: str, t0: float, pages: int) -> Pacer | None:
        """The page phase's schedule if this is a timed checkpoint with `spread`
        (pacing.py): done by `t0 + spread · interval`. Anything else -- an
        explicit, dirty-page, WAL-size or closing checkpoint -- runs full speed."""
        if not (self.spread > 0 and self.interval and reason == "interval" and pages):
            return None
        deadline = t0 + self.spread * self.interval
        if deadline <= self.clock():
            return None
        capacity = self.source.checkpoint_buffer()[1]

        def fill() -> float:
            used, cap, _peak = self.source.checkpoint_buffer()
            return used / cap if cap else 0.0
        return Pacer(self.clock, deadline, pages, self._hurry, buffer_pages=capacity, buffer_fill=fill,
                     why=lambda: self._hurry_why)

    def _account(self, stats: dict) -> None:
        with self._progress.lock:
            self._progress.running = False
        self._progress.set_phase("idle")
        with self._cond:
            t = self._totals
            t["checkpoints"] += 1
            t["recovery_bytes_written"] += stats["recovery_bytes"]
            t["page_bytes_written"] += stats["page_bytes"]
            t["recovery_pages_written"] += stats["pages"] if self.recovery_data == "checkpoint" else 0
            t["pages_written"] += stats["pages"]
            t["gap_fallbacks"] += stats["gap_fallbacks"]
            t["lock_seconds_max"] = max(t["lock_seconds_max"], stats["lock_seconds"])
            t["last_checkpoint"] = dict(stats)
            self._history.append(dict(stats))

    # -- observation -------------------------------------------------------
    def stats(self) -> dict:
        """Cumulative figures since this checkpointer started (copy)."""
        with self._cond:
            out = dict(self._totals)
            out["last_checkpoint"] = dict(out["last_checkpoint"]) if out["last_checkpoint"] else None
            out["checkpoint_history"] = [dict(h) for h in self._history]
            # a failed checkpoint is retried with backoff until one succeeds
            out["checkpoint_failures"] = self._failures
            out["checkpoint_error"] = None if self._error is None else repr(self._error)
            return out

    def pending(self) -> bool:
        """A requested checkpoint has not begun yet (the dirty-page trigger asks only then)."""
        return self._requested > self._begun

    def running_and_done(self) -> tuple:
        """(running, checkpoints completed): two reads without a lock, for callers
        that ask every few operations (`progress()` and `stats()` lock)."""
        return bool(self._progress.running), self._totals["checkpoints"]

    def release_lead(self) -> float:
        """Seconds the last checkpoint took from its begin to its first page written in
        place (begin, recovery files, their fsync): how long a requested checkpoint
        frees no page slot. Read without a lock, for the dirty-page trigger."""
        return self._progress.release_lead()

    def progress(self) -> dict:
        """checkpoint_pages, recovery_pages_written, pages_written, running: for the throttle."""
        return self._progress.snapshot()

    def phase_progress(self) -> dict:
        """`progress()` plus the phase and its timings (pool.Progress.phase_snapshot)."""
        return self._progress.phase_snapshot()

    @property
    def failed(self) -> BaseException | None:
        """The error that stopped the checkpointer thread, or None while it is healthy."""
        return self._error
