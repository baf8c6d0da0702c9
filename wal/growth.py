"""Growth: allocating a sparse WAL segment ahead of its writer (wal/segments.py, Sizing).

A base class of `Segments`, kept apart for size: the grower thread and its
policy. It runs on the Segments' own state (lock, condition, live segments)
and never writes a byte: `File.allocate` only reserves blocks, so it may
run while the C encoder, or a publish, writes the same segment.
"""

from __future__ import annotations

__all__ = ["GROW_FIRST", "Growth"]

# Sizing (with a `progress` callable): a slot is prepared sparse, its first
# GROW_FIRST bytes allocated and zeroed; the grower thread allocates the live
# segment ahead of the writer, at least GROW_FIRST / 2 ahead and to twice its
# offset, in GROW_FIRST steps (`_grow_once`). It looks every
# _GROW_POLL_MIN seconds while the writer moves, backing off to
# _GROW_POLL_MAX when it is idle.
GROW_FIRST = 1 << 20
_GROW_POLL_MIN = 0.01
_GROW_POLL_MAX = 1.0


class Growth:
    """The grower of `Segments`: see `_grow_loop`."""

    __slots__ = ()

    def _grow_loop(self) -> None:
        """The grower thread: allocate the newest live segment ahead of the writer.

        Only `File.allocate`, which changes no byte: the encoder (or a
        publish) may be writing the segment meanwhile. A write that outruns
        it lands in a hole, which the file system allocates then (slower,
        equally durable); on a full disk the grower's own call fails first,
        kept in `grow_error`, and retried when the writer moves on.
        """
        poll, last = _GROW_POLL_MIN, None
        while True:
            with self._cond:
                if self._stopping:
                    return
                live, seq = self._newest_unfilled()
                if live is None:
                    self._cond.wait()          # all allocated: until the next acquire
                    continue
                self._cond.wait(poll)
                if self._stopping:
                    return
                live, seq = self._newest_unfilled()
                if live is None:
                    continue
                live.busy += 1                 # trim leaves its file to us (see sync)
                self._growing = True
            try:
                end = self._progress()
                poll = _GROW_POLL_MIN if end != last else min(poll * 2, _GROW_POLL_MAX)
                last = end
                self._grow_once(live, end - seq * self.segment_size)
            except BaseException as exc:      # noqa: BLE001 - a hint failed; the writer reports its own
                self.grow_error = exc
                poll = _GROW_POLL_MAX
            finally:
                with self._cond:
                    self._growing = False
                    live.busy -= 1
                    doomed = live.doomed and live.busy == 0
                    self._cond.notify_all()
                if doomed:
                    self._close_live(live)

    def _newest_unfilled(self):
        """(live, seq) of the newest live segment not wholly allocated, or (None, None).
        Under the lock."""
        if not self.live:
            return None, None
        seq = max(self.live)
        live = self.live[seq]
        if live.filled >= self.file_size or live.doomed:
            return None, None
        return live, seq

    def _grow_once(self, live, written: int) -> None:
        """Keep `live` allocated ahead of `written` (its writer's offset) by at
        least half of GROW_FIRST; when it is not, allocate to twice `written`
        (at least that half step ahead), in whole GROW_FIRST, so steps double."""
        P, written = self.file_size, max(written, 0)
        if self._whole:
            want = P
        elif written + GROW_FIRST // 2 <= live.filled:
            return
        else:
            want = max(written + GROW_FIRST // 2, 2 * written)
            want = min(P, -(-want // GROW_FIRST) * GROW_FIRST)
        if want > live.filled:
            live.file.allocate(live.filled, want - live.filled)
            live.filled = want
