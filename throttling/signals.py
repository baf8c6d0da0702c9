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
from typing import Optional, Protocol, Tuple, runtime_checkable

#: The checkpoint's phases, in order (the checkpointer reports the same
#: strings).  Between ``begin`` and the end of ``recovery_fsync`` the
#: checkpoint buffer only fills: copies are freed once their page is written
#: in place, in ``pages``; in ``page_fsync`` every page is written, so writes
#: need no copy.  ``idle``: no checkpoint.
PHASES = ("idle", "begin", "recovery_files", "recovery_fsync", "pages", "page_fsync")
#: Phases during which the checkpoint buffer cannot drain.
FILLING_PHASES = frozenset(("begin", "recovery_files", "recovery_fsync"))


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

    ``phase`` is the checkpoint's phase (one of :data:`PHASES`; ``None`` when
    the caller does not know it), ``phase_elapsed`` and ``checkpoint_elapsed``
    the seconds since the phase and the checkpoint began, and
    ``last_phase_seconds`` how long each phase of :data:`PHASES` took in the
    previous checkpoint (empty before the first one ended).  ``dirty_limit``
    is the count of dirty pages at which the store blocks writers until the
    next checkpoint begins; 0 means it has no such limit (a store that only
    starts a checkpoint early and evicts as it can).
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
    phase: Optional[str] = None
    phase_elapsed: float = 0.0
    checkpoint_elapsed: float = 0.0
    last_phase_seconds: Tuple[float, ...] = ()
    dirty_limit: int = 0

    def last_seconds(self, phase: str) -> float:
        """How long ``phase`` took in the previous checkpoint; 0 if unknown."""
        i = PHASES.index(phase)
        return self.last_phase_seconds[i] if i < len(self.last_phase_seconds) else 0.0

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


_FIELDS = tuple(Signals.__dataclass_fields__)
# The slots' own setters: a frozen dataclass's __init__ goes through
# object.__setattr__ per field (~3 us for these sixteen), too slow for a check
# made on a write; the setters fill the same immutable snapshot in ~1 us.
_SETTERS = tuple(Signals.__dict__[name].__set__ for name in _FIELDS)


def snapshot(*values) -> Signals:
    """A `Signals` of all its fields, positionally in declaration order (the write
    path's fast constructor; keyword construction stays the readable one)."""
    if len(values) != len(_FIELDS):
        raise TypeError(f"snapshot takes the {len(_FIELDS)} fields of Signals, got {len(values)}")
    s = object.__new__(Signals)
    for setter, value in zip(_SETTERS, values):
        setter(s, value)
    return s


@runtime_checkable
class Clock(Protocol):
    """Time source: ``now()`` in seconds, ``sleep(s)`` to park."""

    def now(self) -> float:
        """Seconds on this clock (monotonic)."""

    def sleep(self, seconds: float) -> None:
        """Park the calling thread for `seconds` of this clock."""


class MonotonicClock:
    """The real clock: ``time.monotonic`` and ``time.sleep``."""

    def now(self) -> float:
        """`time.monotonic()`."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """`time.sleep(seconds)`."""
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
        """The simulated time."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`; ValueError if negative."""
        if seconds < 0:
            raise ValueError("a FakeClock cannot go backwards")
        self._now += seconds

    def set(self, t: float) -> None:
        """Jump to absolute time `t`; ValueError if that is in the past."""
        if t < self._now:
            raise ValueError("a FakeClock cannot go backwards")
        self._now = float(t)

    def sleep(self, seconds: float) -> None:
        """Advance by `seconds` at once (no real wait)."""
        if seconds > 0:
            self._now += seconds
