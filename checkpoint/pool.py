"""The two parallel phases of a checkpoint, run by the writer pool.

Both phases share one shape, taken from Ignite's checkpointer: the sorted
page list is cut into chunks, the chunks go into one queue, and each of N
workers pulls the next chunk until the queue is empty (work-stealing, so a
slow disk write in one thread does not leave the others idle).

* Recovery phase (DESIGN.md §3 step 3): worker w owns recovery file w. It
  copies a chunk's checkpoint images out of the source, encodes them (the
  codec runs here, in parallel), appends them with one pwrite, and at the
  end fsyncs its file. The caller fsyncs cp/ once all files are synced.
* Page phase (step 5): a worker copies a chunk, writes it in place through
  the sink, then releases it. While the source says its checkpoint buffer is
  nearly full, a worker first takes pages that have a copy-on-write copy
  (Ignite's `pullPageFromCpBuffer`): writing those frees buffer space, which
  is what keeps writers out of the throttle.

A failure in one worker (an I/O error, a simulated crash) sets `abort` so the
others stop at their next chunk; the first failure is re-raised to the
coordinator, a BaseException (SimulatedCrash) in preference.
"""

from __future__ import annotations

import posixpath
import threading
import time
from collections import deque

from .format import recovery_file_name
from .recovery_file import RecoveryFileWriter

__all__ = ["PHASES", "Progress", "chunked", "recovery_file_count", "write_recovery_files", "write_pages"]


#: Checkpoint phases as the throttle sees them, in order: the same strings as
#: ``throttling.signals.PHASES``, which this layer may not import;
#: tests/checkpoint/test_phase_vocabulary.py fails when the two drift.  ``recovery_fsync`` runs from the first
#: recovery file's fsync to the durable START marker and ``page_fsync`` from the
#: last in-place write to the end: in both nothing frees checkpoint-buffer
#: slots, or (page_fsync) nothing needs one.
PHASES = ("idle", "begin", "recovery_files", "recovery_fsync", "pages", "page_fsync")


class Progress:
    """Counters the throttle reads while a checkpoint runs (DESIGN.md §6).

    Besides page counts it keeps the current phase, when it began (on the
    checkpointer's clock) and how long each phase took in the previous
    checkpoint: the throttle needs to know that a checkpoint buffer which is
    not draining will start to drain only after the recovery fsync, and for
    how long that usually lasts.
    """

    def __init__(self, clock=time.monotonic) -> None:
        self.lock = threading.Lock()
        self.clock = clock
        self.checkpoint_pages = 0
        self.recovery_pages_written = 0
        self.pages_written = 0
        self.running = False
        self.phase = "idle"
        self.phase_started = clock()
        self.started = self.phase_started
        self._current = [0.0] * len(PHASES)
        self.last_phase_seconds = (0.0,) * len(PHASES)

    def add(self, field: str, n: int) -> None:
        """Add `n` to counter `field` (thread-safe)."""
        with self.lock:
            setattr(self, field, getattr(self, field) + n)

    def set_phase(self, phase: str, only_from: str | None = None) -> None:
        """Enter `phase` (no-op if `only_from` is given and is not the current one)."""
        now = self.clock()
        with self.lock:
            if only_from is not None and self.phase != only_from:
                return
            if phase == self.phase:
                return
            self._current[PHASES.index(self.phase)] += now - self.phase_started
            if phase == "begin":
                self.started = now
                self._current = [0.0] * len(PHASES)
            elif phase == "idle" and self.phase != "idle":
                self.last_phase_seconds = tuple(self._current)
            self.phase, self.phase_started = phase, now

    def release_lead(self) -> float:
        """Seconds the previous checkpoint spent before its page phase (begin,
        recovery files, their fsync). A lock-free read of one tuple."""
        last = self.last_phase_seconds
        return last[1] + last[2] + last[3]

    def _counts(self) -> dict:
        return {"checkpoint_pages": self.checkpoint_pages,
                "recovery_pages_written": self.recovery_pages_written,
                "pages_written": self.pages_written, "running": self.running}

    def snapshot(self) -> dict:
        """The counters as a dict, read consistently."""
        with self.lock:
            return self._counts()

    def phase_snapshot(self) -> dict:
        """`snapshot()` plus the phase, its age, the checkpoint's age and the
        previous checkpoint's phase durations (seconds, in PHASES order)."""
        now = self.clock()
        with self.lock:
            out = self._counts()
            out.update(phase=self.phase, phase_elapsed=now - self.phase_started,
                       checkpoint_elapsed=now - self.started, last_phase_seconds=self.last_phase_seconds)
            return out


def chunked(page_ids, n: int) -> list:
    """`page_ids` in consecutive slices of at most `n`."""
    return [page_ids[i:i + n] for i in range(0, len(page_ids), n)]


def _run_all(pool, fn, count: int, abort: threading.Event) -> list:
    def guarded(w: int):
        # The failing worker stops the others itself: the loop below reads
        # the futures in order, and a worker napping on a spread schedule
        # (pacing.py) would otherwise keep writing until it was done.
        try:
            return fn(w)
        except BaseException:
            abort.set()
            raise

    futures = [pool.submit(guarded, w) for w in range(count)]
    results, first = [], None
    for fut in futures:
        try:
            results.append(fut.result())
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after every worker stopped
            # (`guarded` has set `abort` already.) A simulated crash (a BaseException) outranks the I/O errors
            # the other workers see on the dead file system after it.
            if first is None or (isinstance(first, Exception) and not isinstance(exc, Exception)):
                first = exc
    if first is not None:
        raise first
    return results


def recovery_file_count(pages: int, workers: int, chunk_pages: int) -> int:
    """How many recovery files `write_recovery_files` writes for `pages` pages:
    one per worker that finds a chunk, at least one."""
    return max(1, min(workers, -(-pages // chunk_pages)))


def write_recovery_files(pool, fs, cpdir, source, codec, checkpoint_id, page_ids, *,
                         workers: int, chunk_pages: int, page_size: int, progress: Progress,
                         clock, cipher=None, framing=None) -> dict:
    """Write every page image of the checkpoint to `workers` recovery files, fsynced.

    Returns {"files", "bytes", "fsync_seconds", "gap_fallbacks"}. Worker w
    writes `cp/<id>-RECOVERY-<w>.bin`; every worker creates its file even if
    the queue is empty by the time it starts, so the START marker's file
    count always equals the number of files of the checkpoint. With
    `framing` (a contracts.RecoveryFraming: the store's C framing) plain
    records are copied and framed without the GIL and a compressing codec's
    framing is done in bulk in C; without it the Python framing runs.
    """
    queue = deque(chunked(page_ids, chunk_pages))
    count = recovery_file_count(len(page_ids), workers, chunk_pages)
    abort = threading.Event()
    framer = framing.frame_records if framing is not None else None
    copy_frame = framing.copy_frame if framing is not None else None
    compactor = framing

    def worker(w: int) -> tuple[int, float, int]:
        path = posixpath.join(cpdir, recovery_file_name(checkpoint_id, w))
        out = RecoveryFileWriter(fs, path, checkpoint_id, w, page_size, codec, cipher, framer, compactor)
        try:
            buf = bytearray(chunk_pages * page_size)
            while not abort.is_set():
                try:
                    chunk = queue.popleft()
                except IndexError:
                    break
                if copy_frame is not None and out.fuses:
                    out.append_copied(chunk, copy_frame)
                else:
                    view = memoryview(buf)[:len(chunk) * page_size]
                    source.copy_pages(chunk, view)
                    out.append(chunk, view)
                progress.add("recovery_pages_written", len(chunk))
            if abort.is_set():
                return 0, 0.0, 0
            if not queue:
                # The first worker to find nothing left starts the fsync wait.
                progress.set_phase("recovery_fsync", only_from="recovery_files")
            fs.crash_point("checkpoint.recovery_file_written")
            t = clock()
            out.sync()
            return out.offset, clock() - t, out.gap_fallbacks
        finally:
            out.close()

    results = _run_all(pool, worker, count, abort)
    return {"files": count, "bytes": sum(r[0] for r in results),
            "fsync_seconds": sum(r[1] for r in results), "gap_fallbacks": sum(r[2] for r in results)}


class _PageQueue:
    """Sorted chunks, plus out-of-order pulls of pages that hold a COW copy."""

    def __init__(self, source, page_ids, chunk_pages: int, copy_first_fraction: float):
        self.source, self.chunk_pages = source, chunk_pages
        self.chunks = deque(chunked(page_ids, chunk_pages))
        self.lock = threading.Lock()
        self.done: set[int] = set()     # pages already taken by a worker
        self.members = None             # set(page_ids), built on first priority pull
        self.page_ids = page_ids
        self.fraction = copy_first_fraction
        self.priority_chunks = 0

    def _buffer_nearly_full(self) -> bool:
        used, capacity, _peak = self.source.checkpoint_buffer()
        return capacity > 0 and used >= self.fraction * capacity

    def next(self):
        with self.lock:
            if self._buffer_nearly_full():
                if self.members is None:
                    self.members = set(self.page_ids)
                picked = []
                for pid in self.source.pages_with_copy():
                    if pid in self.members and pid not in self.done:
                        picked.append(pid)
                        if len(picked) == self.chunk_pages:
                            break
                if picked:
                    picked.sort()
                    self.done.update(picked)
                    self.priority_chunks += 1
                    return picked
            while self.chunks:
                chunk = self.chunks.popleft()
                if self.done:
                    chunk = [p for p in chunk if p not in self.done]
                if chunk:
                    # Taken pages must not be pulled again as priority
                    # pages while another worker is writing them.
                    self.done.update(chunk)
                    return chunk
            return None


def write_pages(pool, fs, source, sink, page_ids, *, workers: int, chunk_pages: int,
                page_size: int, progress: Progress, copy_first_fraction: float, pacer=None) -> dict:
    """Write every page of the checkpoint in place through the sink (not synced).

    REQUIRES: the START marker of this checkpoint is durable (invariant 1).
    Returns {"priority_chunks"}: chunks pulled out of order to relieve the
    checkpoint buffer. With a `pacer` (pacing.Pacer) a worker that took a chunk
    naps until the spread schedule reaches the chunk's first page.
    """
    queue = _PageQueue(source, page_ids, chunk_pages, copy_first_fraction)
    count = max(1, min(workers, len(queue.chunks)))
    abort = threading.Event()
    if pacer is not None:
        pacer.abort = abort

    def worker(_w: int) -> None:
        buf = bytearray(chunk_pages * page_size)
        while not abort.is_set():
            chunk = queue.next()
            if chunk is None:
                return
            if pacer is not None:
                pacer.claim(len(chunk))
            view = memoryview(buf)[:len(chunk) * page_size]
            source.copy_pages(chunk, view)
            sink.write_pages(chunk, view)
            fs.crash_point("checkpoint.page_written")
            # Released only after the write: until then a writer that
            # modifies the page must still copy-on-write it.
            source.release(chunk)
            progress.add("pages_written", len(chunk))
            if pacer is not None:
                pacer.written(len(chunk))

    _run_all(pool, worker, count, abort)
    return {"priority_chunks": queue.priority_chunks}
