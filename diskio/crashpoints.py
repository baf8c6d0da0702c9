"""Registry of named crash points and the arming table the file systems share.

A crash point is a named gap in a protocol (DESIGN.md §3 numbers the
checkpoint steps) where a test may kill the process or raise
`SimulatedCrash`. Every name must be registered in `CRASH_POINTS`: calling an
unknown name raises ValueError, so a typo in a caller cannot silently turn a
crash test into a test of nothing, and this dict stays the complete list.
"""

from __future__ import annotations

import threading
from typing import Callable

__all__ = ["CRASH_POINTS", "CrashPointTable", "check_crash_point", "parse_crash_spec"]

CRASH_POINTS: dict[str, str] = {
    # WAL
    "wal.before_fsync": "WAL bytes written (or published) up to the flush target, fsync not yet issued",
    "wal.after_fsync": "WAL fsync returned; waiters on the flushed LSN not yet released",
    "wal.round_elected": "group commit: a leader elected, its round's range fixed, nothing of it published or synced",
    "wal.sync_write_logged": "a write with sync=True logged (log_only/background), its flush not begun",
    "aio.group_durable": "asyncio store: a group's WAL durable, none of its waiting writes told yet",
    "wal.segment_tmp_created": "a new WAL segment's temporary file created, empty, nothing allocated",
    "wal.segment_preallocated": "a new WAL segment's temporary file allocated and zeroed, not yet fsynced",
    "wal.segment_synced": "a new WAL segment's temporary file fsynced, not yet renamed to its name",
    "wal.segment_created": "a new WAL segment file created and preallocated, directory not yet fsynced",
    "wal.segment_dir_synced": "a new WAL segment renamed into place and its directory fsynced, not yet handed out",
    "wal.newest_tmp_written": "wal/NEWEST's temporary file written and fsynced, not yet renamed over NEWEST",
    "wal.newest_written": "wal/NEWEST replaced and its directory fsynced; the segment it names not yet handed out",
    # Checkpoint, numbered as in DESIGN.md §3
    "checkpoint.after_lock": "step 1 done: dirty set snapshotted and CHECKPOINT logged, lock released",
    "checkpoint.after_wal_fsync": "step 2 done: WAL durable up to the CHECKPOINT record",
    "checkpoint.after_recovery_reuse": "step 3: old recovery files renamed to this checkpoint's names (cp/ fsynced), none written",
    "checkpoint.recovery_file_written": "step 3: one recovery file fully written, before its fsync",
    "checkpoint.after_recovery_fsync": "step 3 done: every recovery file and cp/ durable, no START yet",
    "checkpoint.start_tmp_written": "step 4: START temp file written and fsynced, not yet renamed",
    "checkpoint.after_start_marker": "step 4 done: START marker renamed into place and cp/ fsynced",
    "checkpoint.page_written": "step 5: a batch of pages written in place, before the page-file fsync",
    "checkpoint.before_page_fsync": "step 5: every page written in place, fsync of page files not issued",
    "checkpoint.after_page_fsync": "step 5 done: page files durable, END marker not yet written",
    "checkpoint.after_end_marker": "step 6: END marker durable, WAL not yet trimmed",
    "checkpoint.after_wal_trim": "step 6 done: WAL before the checkpoint pointer trimmed",
    # Recovery
    "recovery.after_restore": "recovery: pages restored from recovery files and synced, WAL not replayed",
    "recovery.after_replay": "recovery: WAL replayed, store not yet open for business",
    # Compaction (pagestore/compaction.py)
    "compact.copy_durable": "compact: the dense copy closed and durable in compact.tmp/, nothing renamed",
    "compact.page_file_renamed": "compact: the copy's page file renamed over pages.dat, directory not fsynced",
}


def check_crash_point(name: str) -> None:
    """Raise ValueError unless `name` is a registered crash point."""
    if name not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {name!r}; register it in diskio/crashpoints.py")


def parse_crash_spec(spec: str) -> tuple[str, int]:
    """Parse `name` or `name@hit` (the PAGESTORE_CRASH_POINT syntax)."""
    name, sep, hit_text = spec.strip().partition("@")
    hit = 1
    if sep:
        try:
            hit = int(hit_text)
        except ValueError:
            raise ValueError(f"bad crash point hit count in {spec!r}") from None
    check_crash_point(name)
    if hit < 1:
        raise ValueError(f"crash point hit count must be >= 1, got {hit}")
    return name, hit


class CrashPointTable:
    """Armed points, per-point hit counters, and the trigger decision.

    Thread-safe: checkpoint writer threads and WAL flushers pass crash points
    concurrently, and the n-th hit must be counted exactly once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: dict[str, tuple[int, object]] = {}  # name -> (hit, action)
        self.hits: dict[str, int] = {}

    def arm(self, name: str, hit: int, action: object) -> None:
        """Fire `action` at the `hit`-th pass through `name` from now; ValueError for an unknown
        name or hit < 1."""
        check_crash_point(name)
        if hit < 1:
            raise ValueError(f"hit must be >= 1, got {hit}")
        with self._lock:
            # Count from the moment of arming, so arming after some hits
            # means "the hit-th pass from now".
            self._armed[name] = (self.hits.get(name, 0) + hit, action)

    def disarm(self, name: str | None = None) -> None:
        """Disarm `name`, or every point when None."""
        with self._lock:
            if name is None:
                self._armed.clear()
            else:
                self._armed.pop(name, None)

    def any_armed(self) -> bool:
        """Whether any point is armed (no lock: a dict's truth is read atomically)."""
        return bool(self._armed)

    def armed(self) -> dict[str, int]:
        """Armed names mapped to the absolute hit number that fires."""
        with self._lock:
            return {n: h for n, (h, _a) in self._armed.items()}

    def passing(self, name: str, fire: Callable[[str, object], None]) -> None:
        """Record a pass through `name`; call fire(name, action) if armed for it."""
        check_crash_point(name)
        with self._lock:
            count = self.hits.get(name, 0) + 1
            self.hits[name] = count
            entry = self._armed.get(name)
            if entry is None or entry[0] != count:
                return
            del self._armed[name]
        # Fire outside the lock: a SIGKILL never returns, and a raised
        # SimulatedCrash must not leave the table locked.
        fire(name, entry[1])
