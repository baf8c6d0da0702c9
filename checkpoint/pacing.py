"""Spread checkpoints: the in-place page writes of a timed checkpoint, paced.

Why
---
A checkpoint that writes its pages as fast as the disk takes them makes the
writers' puts slower while it runs, though they never wait for it: on two
cores the kernel's write-back work, the I/O completions and the checkpoint
threads' trips through the GIL take the CPU from a writer for a few
microseconds at a time. Measured with one writer doing 600,000 puts/s, 2-3 %
of the puts made during a checkpoint's write phases took over 4 µs, against
0.4 % outside checkpoints (docs/checkpoint.md, "Spread checkpoints"). The
same work spread over more time slows a smaller share of the puts.

So a *timed* checkpoint (started by `checkpoint_interval`, nothing else
asking for it) writes its pages in place on a schedule, PostgreSQL's
`checkpoint_completion_target`: page ``i`` of ``N`` is due at

    pages_start + (deadline - pages_start) · i / N,   deadline = begin + spread · interval

and a writer thread that takes a chunk naps (at most ``MAX_NAP`` at a time,
then it looks again) until the chunk's first page is due: the last chunk
starts one chunk's share of the span before the deadline, and no thread runs
ahead of the schedule by more than the chunk it holds. Only the page-write
phase is paced. The recovery-file
phase is when the checkpoint buffer fills and nothing can drain it
(DESIGN.md §6), so it runs at full speed; the page phase drains the buffer,
so slowing it costs writers no buffer space they would otherwise have.

Pacing must not hold the checkpoint buffer's fill up. In step 5 the buffer
holds only copies of checkpoint pages not written yet (a page's copy is freed
when it is written), so its fill can never exceed the pages still to write. A
writer thread therefore naps only while those pages would fill at most
``SAFE_FILL`` of the buffer even if writers copied every one: below the
buffer thresholds of every policy (exponential backoff 2/3, fill rate the
progress, which is at least 2/3 in step 5, the default 95 %). A bigger
checkpoint writes at full speed until it is down to that many pages, and
paces the rest. A policy can still park for other reasons (``speed_based``
compares dirty pages with the checkpoint's write speed, which pacing lowers);
every park during a checkpoint therefore hurries it (pagestore/throttle.py).

When to stop pacing (``hurried``): as soon as anything else wants the
checkpoint done -- a request for another checkpoint (explicit, dirty pages,
WAL size), close, a writer waiting for clean page-memory slots or stalled on
the buffer, or a writer the throttle parks sets the checkpointer's ``hurry``
event -- or, as a guard, should the buffer's fill reach ``SAFE_FILL``
anyway. From then on the checkpoint runs at full speed to its end.
"""

from __future__ import annotations

import threading

__all__ = ["Pacer", "SAFE_FILL", "MAX_NAP"]

#: Largest share of the checkpoint buffer that the pages still to write may
#: fill for a writer thread to nap (below Ignite's 2/3 throttling threshold).
SAFE_FILL = 0.6
#: Longest nap before the hurry conditions are looked at again (seconds).
MAX_NAP = 0.05


class Pacer:
    """Schedule of one checkpoint's page-write phase, shared by its writer threads.

    `clock` is the checkpointer's clock; `deadline` is on that clock. `wait(t)`
    naps up to t seconds and returns True when woken by a hurry (default: the
    `hurry` event's wait); `why()` says who hurried. `buffer_pages` is the
    checkpoint buffer's capacity and `buffer_fill()` its used fraction; both
    None for a source without one.
    """

    def __init__(self, clock, deadline: float, total_pages: int, hurry: threading.Event, *,
                 buffer_pages: int | None = None, buffer_fill=None, wait=None, why=None) -> None:
        self.clock, self.deadline, self.total = clock, deadline, max(1, total_pages)
        self.start = clock()
        self.hurry, self.buffer_pages, self.buffer_fill = hurry, buffer_pages, buffer_fill
        self._wait = wait if wait is not None else hurry.wait
        self._why = why if why is not None else (lambda: "request")
        self._lock = threading.Lock()
        self._claimed = 0                 # pages some writer has taken
        self._released = 0                # pages written in place and released
        self.napped = 0.0                 # seconds of naps, summed over the threads
        self.hurried: str | None = None   # why pacing stopped: the hurry's why, "buffer" or "abort"
        self.abort: threading.Event | None = None   # the phase's failure flag (pool.write_pages)

    def due(self, done: int) -> float:
        """When the schedule has `done` pages written."""
        return self.start + (self.deadline - self.start) * min(done, self.total) / self.total

    def _hurry_reason(self) -> str | None:
        if self.hurried is not None:
            return self.hurried
        if self.abort is not None and self.abort.is_set():
            self.hurried = "abort"   # another writer failed: stop napping, let the error out
        elif self.hurry.is_set():
            self.hurried = self._why()
        elif self.buffer_fill is not None and self.buffer_fill() >= SAFE_FILL:
            self.hurried = "buffer"
        return self.hurried

    def _may_nap(self) -> bool:
        # Copies exist only of pages not yet released; bound those, not the claimed.
        return self.buffer_pages is None or self.total - self._released <= SAFE_FILL * self.buffer_pages

    def claim(self, n: int) -> None:
        """A writer took the next `n` pages: nap until the schedule reaches the first."""
        with self._lock:
            first = self._claimed
            self._claimed += n
        while self._hurry_reason() is None and self._may_nap():
            left = self.due(first) - self.clock()
            if left <= 0:
                return
            nap = min(left, MAX_NAP)
            t = self.clock()
            self._wait(nap)
            with self._lock:
                self.napped += max(0.0, self.clock() - t)

    def written(self, n: int) -> None:
        """`n` claimed pages are written in place and released."""
        with self._lock:
            self._released += n
