"""Growth: allocating a sparse WAL segment ahead of its writer (wal/segments.py, Sizing).

A base class of `Segments`, kept apart for size: the grower thread and its
policy, and `reserve`, the encoder's own call when a record would pass the
allocated end. It runs on the Segments' own state (lock, condition, live
segments). Allocating (`File.allocate`) changes no byte, so it may run while
the C encoder, or a publish, writes the same segment.

On the pwrite path of the real file system (fsync mode) the grower also
writes zeros ahead of the writer (`_zero_ahead`): on ext4 a write into an
allocated but never-written extent converts the extent in the journal, and
every fdatasync of the segment would pay for it, as it pays for a write
into a hole. Zeros are written only where no publish can write meanwhile
(`zeroing_from`, which `Segments.publish` waits on).
"""

from __future__ import annotations

import os

from pagestore.diskio import PosixFS

__all__ = ["GROW_FIRST", "Growth"]

# Sizing (with a `progress` callable): a slot is prepared sparse, its first
# GROW_FIRST bytes allocated and zeroed; the grower thread allocates the live
# segment ahead of the writer, at least GROW_FIRST / 2 ahead and to twice its
# offset, in GROW_FIRST steps (`_grow_once`). It looks every
# _GROW_POLL_MIN seconds while the writer moves, backing off to
# _GROW_POLL_MAX when it is idle.
GROW_FIRST = 1 << 20
_PAGE = 4096              # the smallest step `reserve` takes on a nearly full disk
# Zeros ahead (pwrite path): up to _ZERO_AHEAD past the writer, or twice its
# offset if less (`_zero_goal`), written _ZERO_CHUNK at a time, each chunk
# then fdatasynced, in _PAGE writes: a
# larger buffered write makes a larger page-cache folio, and a publish's
# 4 KiB write into it would dirty (and its fdatasync write back) all of it.
_ZERO_AHEAD = 4 << 20
_ZERO_CHUNK = 1 << 20
_ZERO_PAGE = bytes(_PAGE)
_NOT_ZEROING = float("inf")
_GROW_POLL_MIN = 0.01
_GROW_POLL_MAX = 1.0


class Growth:
    """The grower of `Segments`: see `_grow_loop`."""

    __slots__ = ()
    # hook(seq, on): told when a chunk of zeros is announced (True) and done
    # (False), for a writer that publishes without `Segments.publish` (the C
    # gate's rounds, wal/log.py); it is called under the condition's lock
    zeroing_hook = None

    def _tell_zeroing(self, seq: int, on: bool) -> None:
        if self.zeroing_hook is not None:
            self.zeroing_hook(seq, on)

    def _grow_loop(self) -> None:
        """The grower thread: allocate the newest live segment ahead of the writer
        (and, on the pwrite path, write zeros ahead of it: `_zero_ahead`).

        Allocating changes no byte: the encoder (or a publish) may be writing
        the segment meanwhile. A record that would outrun it waits for
        `reserve` (the encoder's call); on a full disk the grower's own call
        fails first, kept in `grow_error`, and retried when the writer moves on.
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
                if self._zeroing(live):
                    self._zero_ahead(live, seq)
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
        if live.doomed or (live.filled >= self.file_size and not self._zeroing(live)):
            return None, None
        return live, seq

    def _zeroing(self, live) -> bool:
        """Whether the grower still has zeros to write ahead in `live`."""
        return live.zeroed < self.file_size and self.pwrite_path and isinstance(self.fs, PosixFS)

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
            if self._allocated(live, want):        # else no fallocate here: `reserve` writes zeros
                live.filled = max(live.filled, want)   # `reserve` may have gone further meanwhile

    def _allocated(self, live, end: int) -> bool:
        """Whether `live`'s file has disk blocks for [0, end) after an allocate.

        `File.allocate` is a no-op where the file system has no fallocate
        (some FUSE and NFS mounts, older ZFS); the file's block count tells.
        Blocks below `filled` are allocated already, so a count short of
        `end` means the call did nothing."""
        if not isinstance(self.fs, PosixFS):
            return True
        return os.fstat(live.file.fileno()).st_blocks * 512 >= end

    def _write_zeros(self, live, lo: int, hi: int) -> None:
        """Zeros over [lo, hi) of `live`, in _PAGE writes (see _ZERO_PAGE)."""
        for at in range(lo, hi, _PAGE):
            live.file.pwrite(_ZERO_PAGE, at)

    def _zero_ahead(self, live, seq: int) -> None:
        """Write zeros over `live` up to `_zero_goal` of its writer, a chunk at a time.

        Each chunk [z, hi) is announced in `live.zeroing_from` before the
        writer's end is read: a publish that began before read its target
        before, so it ends at or below that end, which z is past; one that
        begins after sees `zeroing_from` and waits for the chunk.
        """
        base = seq * self.segment_size
        while live.zeroed < self.file_size and not self._stopping:
            z = live.zeroed
            while True:
                with self._cond:
                    live.zeroing_from = z
                    self._tell_zeroing(seq, True)
                written = self._progress() - base
                top = -(-max(written, 0) // _PAGE) * _PAGE
                if top <= z:
                    break
                z = top + GROW_FIRST // 2    # the writer is past: zero beyond it
            if z >= min(self.file_size, self._zero_goal(written)):
                with self._cond:
                    live.zeroing_from = _NOT_ZEROING
                    self._tell_zeroing(seq, False)
                    self._cond.notify_all()
                return
            hi = min(self.file_size, z + _ZERO_CHUNK)
            try:
                self._write_zeros(live, z, hi)
                live.file.fdatasync()
            finally:
                with self._cond:
                    live.zeroing_from = _NOT_ZEROING
                    self._tell_zeroing(seq, False)
                    self._cond.notify_all()
            with self._cond:
                if live.filled >= z:
                    live.filled = max(live.filled, hi)
                live.zeroed = max(live.zeroed, hi)

    @staticmethod
    def _zero_goal(written: int) -> int:
        """How far zeros should reach with the writer at offset `written`:
        _ZERO_AHEAD past it, but no more than twice it (a store of a few
        keys keeps the first GROW_FIRST its slot was prepared with)."""
        return min(written + _ZERO_AHEAD, max(2 * written, GROW_FIRST))

    def await_zeros(self, live, top: int) -> None:
        """Wait until the grower writes no zeros below `top` in `live` (a
        publish about to write there: `Segments.publish`)."""
        with self._cond:
            while live.zeroing_from < top:
                self._cond.wait()

    def reserve(self, seq: int, need: int) -> int:
        """Bytes [0, need) of live segment `seq` allocated; returns the allocated end.

        The encoder's callback (wal/log.py `Wal.reserve`), made under the tree
        lock when a record would end past the end the grower has reached: no
        byte is written into a hole, so a mapped segment never meets a page
        the file system cannot back (SIGBUS on a full disk), and a full disk
        is an error of the write that needed the space, with nothing of it
        written. It allocates as the grower would, or, when the disk has less
        room than that, only what the record needs; the file system's error
        (ENOSPC naming the segment) when not even that is left.
        """
        live = self.live.get(seq)
        if live is None:
            return self.file_size
        if need <= live.filled:
            return live.filled
        P, have = self.file_size, live.filled
        step = min(P, -(-max(need + GROW_FIRST // 2, 2 * need) // GROW_FIRST) * GROW_FIRST)
        exact = min(P, -(-need // _PAGE) * _PAGE)
        try:
            live.file.allocate(have, step - have)
        except OSError:
            step = exact
            live.file.allocate(have, step - have)
        if not self._allocated(live, step):
            # No fallocate here: written zeros make the blocks, and fail
            # with ENOSPC where a mapped write would have been a SIGBUS.
            # Nothing writes at or past `have` meanwhile: the encoder stops
            # below the end it was given, and a publish below what it wrote.
            step = min(step, -(-(need + GROW_FIRST // 2) // GROW_FIRST) * GROW_FIRST, P)
            try:
                self._write_zeros(live, have, step)
            except OSError:
                step = exact
                self._write_zeros(live, have, step)
        live.filled = max(live.filled, step)
        return live.filled
