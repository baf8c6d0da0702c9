"""What a writer's throttle check sees, and the clocks policies run on.

A writer asks its policy once per page modification (after the page is
unlocked, as Ignite's ``onMarkDirty`` does) with a :class:`Signals` snapshot of
the counters the core keeps.  Policies never read a clock of their own: they get
``now`` from the caller and a :class:`Clock` at construction, so the same policy
runs against the wall clock in the store and against :class:`FakeClock` in the
simulation and the tests, where time only moves when someone advances it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Signals:
    """One snapshot of the counters a throttle check reads.

    Counts are pages.  ``recovery_pages_written`` and ``pages_written`` count
    the running checkpoint's progress in its two phases (recovery files first,
    then pages in place); ``pages_dirtied`` is monotonic over the store's
    life.  ``in_checkpoint_page`` tells whether the page this write touched
    belongs to the running checkpoint (so it needed a copy-on-write slot);
    ``None`` means the caller does not know, and policies then assume it may.
    ``writer`` optionally identifies the calling writer; when it is ``None``
    policies that count writers use the calling thread's id.
    """

    cow_used: int = 0
    cow_capacity: int = 0
    dirty_pages: int = 0
    total_pages: int = 0
    checkpoint_running: bool = False
    checkpoint_pages: int = 0
    recovery_pages_written: int = 0
    pages_written: int = 0
    pages_dirtied: int = 0
    in_checkpoint_page: Optional[bool] = None
    writer: Optional[int] = None

    @property
    def fill(self) -> float:
        """Checkpoint-buffer fill in [0, 1]; 0 for a buffer of no pages."""
        if self.cow_capacity <= 0:
            return 0.0
        return min(1.0, max(0.0, self.cow_used / self.cow_capacity))

    @property
    def dirty_ratio(self) -> float:
        """Dirty pages over page-memory slots in [0, 1]; 0 for no slots."""
        if self.total_pages <= 0:
            return 0.0
        return min(1.0, max(0.0, self.dirty_pages / self.total_pages))

    @property
    def progress(self) -> float:
        """IEP-113's weighted checkpoint progress in [0, 1].

        ``(2·recovery_pages_written + pages_written) / (3·checkpoint_pages)``:
        the recovery-file phase takes about two thirds of a checkpoint.  An
        empty checkpoint (no pages) counts as finished.
        """
        if self.checkpoint_pages <= 0:
            return 1.0
        done = 2 * self.recovery_pages_written + self.pages_written
        return min(1.0, max(0.0, done / (3 * self.checkpoint_pages)))


@runtime_checkable
class Clock(Protocol):
    """Time source: ``now()`` in seconds, ``sleep(s)`` to park."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` and ``time.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that moves only when told (the idea of trio's MockClock).

    ``advance(s)`` moves time forward; ``sleep(s)`` advances by ``s`` at once,
    so code that parks runs instantly and deterministically.  ``set(t)`` jumps
    to an absolute time, never backwards.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a FakeClock cannot go backwards")
        self._now += seconds

    def set(self, t: float) -> None:
        if t < self._now:
            raise ValueError("a FakeClock cannot go backwards")
        self._now = float(t)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._now += seconds
