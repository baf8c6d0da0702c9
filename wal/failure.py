"""`Failing`: what the WAL does after its first failed write or sync.

A base class of `Wal` (wal/log.py), kept apart for size, as `Committing`
(wal/commit.py) is; it runs on the Wal's state (gate, segments, publish
lock, `_failure`, `_acked_end`, `_handed_end`). After a failed write or sync
the bytes may be gone from the page cache (PostgreSQL's fsync finding), so
the first failure wins and the log acknowledges nothing after it:

  (1) `_fail` keeps the first failure with the acknowledged end (what a
      caller was told is in the log) and the handed end (what may have
      reached the OS); C rounds stop.
  (2) `_settle` fences the writers (the store's `fence` undoes what lies
      past the acknowledged end and refuses later records), then blanks
      [acknowledged end, written end) in the segments, so a reopen ends the
      log at the last acknowledged record; `close()` blanks again.
  (3) `in_doubt` answers, once (2) is done, whether a write that met the
      failure may still be found after a crash.
"""

from __future__ import annotations

from .format import BLOCK, end_after

__all__ = ["Failing"]


class Failing:
    """The first failure of `Wal` and what follows it (see the module docstring)."""

    __slots__ = ()

    def _fail(self, exc: BaseException, acked_end: int) -> None:
        # the first failure wins: later ones are its consequences
        if self._io:
            self._gate.io_enable(False)     # no round in C after it either
        with self._pub_lock:
            first = self._failure is None
            if first:
                self._failure, self._acked_end = exc, acked_end
                self._handed_end = max(acked_end, self._published)
        if first:
            self._settle()

    def _settle(self) -> None:
        # A writer that fails meanwhile asks `in_doubt` only after this: the
        # fence may yet keep its record as acknowledged, the blanking may fail.
        try:
            self._fence_writers()
            self._blank_unacknowledged()
        finally:
            self._settled.set()

    def _fence_writers(self) -> None:
        # Nothing may be acknowledged after the failure: the writers stop here.
        # On a mapping that is the page cache every record written until then
        # was in the OS when its write returned, so those stay acknowledged.
        if self.fence is None:
            return
        mapped = self.mode != "fsync" and not self._publish_needed
        try:
            end = self.fence(None if mapped else self._acked_end)
        except Exception:  # noqa: BLE001 - the failure that started this is what is reported
            # the writers are refused all the same (the fence refuses first);
            # what it left applied is in doubt, not "not applied"
            self.undo_failed = True
            return
        if mapped:
            with self._pub_lock:
                self._acked_end = self._handed_end = max(self._acked_end, end)

    def _visible_end(self) -> int:
        # a posix mapping is the page cache: every written byte is out already
        return self._published if self._publish_needed else self._end_lsn()

    def in_doubt(self, end_lsn: int) -> bool:
        """The write of the record ending at `end_lsn` met the failure, yet the
        record was handed to the OS: kept because the log counts what is out as
        acknowledged (a failed sync of log_only/background), or past the
        acknowledged end and could not be blanked, or could not be taken back
        from memory (`undo_failed`). After a crash it may or may not be there."""
        if self._failure is None or end_lsn < 0:
            return False
        # the failing thread may still be fencing and blanking (it holds no
        # lock a caller of this holds); its outcome decides
        self._settled.wait(60)
        return end_lsn <= self._acked_end or self.undo_failed or (
            self.blank_failed and self._acked_end < end_lsn <= self._handed_end)

    @property
    def failure(self) -> BaseException | None:
        """The write or sync error after which this log refuses to publish or
        sync (None while healthy). Records past the last acknowledged one
        are blanked by `close()`, so reopening replays only acknowledged ones."""
        return self._failure

    def _blank_unacknowledged(self) -> None:
        """After a failure (at once, and again on close): zero [acked end,
        written end) in the segments and hand the zeros to the file, so a
        reopen ends the log at the last acknowledged record. Best effort: the
        disk may refuse this too (`blank_failed`), and then what it already
        had of those records may come back."""
        lo, hi, S = self._acked_end, self._end_lsn(), self.segment_size
        for seq in range(lo // S, (max(hi, 1) - 1) // S + 1):
            try:
                buf = self._segs.buffer(seq)
            except KeyError:
                continue
            a, b = max(lo - seq * S, 0), min(hi - seq * S, S)
            if b <= a:
                continue
            if b < S and b > BLOCK:
                b = min(end_after(b), S)     # the END after the last record: it would prove them
            buf[a:b] = bytes(b - a)
            try:
                self._segs.publish(seq, a, b, record_end=False)
                self._segs.sync(seq)
            except Exception:  # noqa: BLE001 - the failure that started this is what is reported
                self.blank_failed = True
                return
        self.blank_failed = False
