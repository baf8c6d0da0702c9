"""``adaptive``: the default policy: pace the checkpoint buffer by phase.

Why the Ignite policies disappoint
----------------------------------
Both baselines map the *current* fill to a park.  Exponential backoff only
knows "above 2/3": during the recovery-file phase the buffer cannot drain, so
its exponent climbs with every throttled write and parks reach seconds.  The
fill-rate law compares the fill with the checkpoint's page progress, which
stands still during the fsyncs.  Neither knows *when* the buffer will start
to drain, so both park too early (throughput lost) or too late (the buffer
fills and writers stall on it).

The design
----------
The checkpointer reports its phase (``Signals.phase``, one of
``begin → recovery_files → recovery_fsync → pages → page_fsync``), how long
it has been in it and how long each phase took last time.  From ``begin`` to
the end of ``recovery_fsync`` nothing frees a checkpoint-buffer slot; copies
are freed from the first in-place write on.  So the policy knows the
*filling window*: it began ``W = checkpoint_elapsed`` ago and ends in

    T_drain = (begin left) + recovery pages left / recovery speed
              + (recovery fsync left)

where a phase's "left" is the previous checkpoint's duration of it less what
has elapsed, floored at ``overrun_floor`` of that duration (a phase that
overruns is assumed to end soon, not now), and the recovery speed is
measured in the running phase (remembered from the last one before that).
Over the window ``H = W + T_drain`` the writers may spend the budget
``buffer_target · cow_capacity`` on a schedule: at ``W`` they may have used
``budget · (W/H)^shape`` slots.  A writer ahead of the schedule parks until
the schedule reaches the fill it sees:

    park = H · (used/budget)^(1/shape) − W        (at most ``max_park``)

A park shorter than ``quantum`` is not taken: the writer runs a little ahead
and parks once for the sum, so parks are few and almost every write has the
unthrottled latency.  The 5 % of the buffer above the budget absorbs what a
writer does between two checks, so the buffer never fills: no write stalls.
Parks are bounded by ``max_park`` (50 ms) and, within the window, by the time
left to drain: no writer is frozen for a phase.

During ``pages`` copies are freed at the in-place write speed (copies go
first while the buffer is above 2/3): a writer over the budget parks for the
time the checkpointer needs to free its excess, at least one quantum.
During ``page_fsync`` every page is written: writes need no copy.

Dirty pages are paced the same way when the store blocks writers at a dirty
limit (``Signals.dirty_limit``; Ignite's ``maxDirtyPages``): the budget
``dirty_target · dirty_limit`` must last until the next checkpoint takes the
dirty pages, i.e. the end of this one (all phases' expected time left).  A
store without such a limit (``dirty_limit == 0``, pagestore's: it starts a
checkpoint early and a write that finds no evictable page waits for pages
being released) is not paced on dirty pages.

Without a phase (a caller that does not report it) the policy falls back to
IEP-113's fill-rate law capped at ``max_park``.
"""
from __future__ import annotations

import threading
from typing import Optional

from .policies import fill_rate_park
from .signals import PHASES, Clock, MonotonicClock, Signals

_ORDER = {p: i for i, p in enumerate(PHASES)}
_FILLING = ("begin", "recovery_files", "recovery_fsync")


class AdaptivePolicy:
    """Phase-aware pacing of the checkpoint buffer (the default)."""

    name = "adaptive"
    #: A store may ask at most this often per writer (seconds): parks come
    #: in quanta of >= 1 ms, so a check every write buys nothing.
    check_interval = 0.0002
    # Per check: the quantum grows fast when too many checks park and
    # shrinks slowly, so it stays sized between two checkpoints' windows.
    QUANTUM_UP = 1.01
    QUANTUM_DOWN = 0.99995

    def __init__(self, clock: Optional[Clock] = None, *, buffer_target: float = 0.95,
                 dirty_target: float = 0.97, max_park: float = 0.05, quantum: float = 0.001,
                 shape: float = 1.0, phase_guess: float = 0.02, overrun_floor: float = 0.25,
                 min_window: float = 0.002, parked_share: float = 0.004,
                 window_share: float = 0.1, head_start: float = 0.3) -> None:
        if not 0 < buffer_target <= 1 or not 0 < dirty_target <= 1:
            raise ValueError("buffer_target and dirty_target must be in (0, 1]")
        if shape <= 0 or max_park <= 0 or quantum < 0:
            raise ValueError("shape and max_park must be positive, quantum not negative")
        self.clock = clock or MonotonicClock()
        self.buffer_target = buffer_target
        self.dirty_target = dirty_target
        self.max_park = max_park
        self.min_quantum = self.quantum = min(quantum, max_park)
        self.parked_share = parked_share
        self._parked = parked_share     # running share of checks that parked
        self._hard = False
        self.window_share = window_share
        if not 0 <= head_start < 1:
            raise ValueError("head_start must be in [0, 1)")
        self.head_start = head_start
        self._paced = 0.0    # the length of the window the last check paced against
        self.shape = shape
        self.phase_guess = phase_guess
        self.overrun_floor = overrun_floor
        self.min_window = min_window
        #: pages/s of the two writing phases, kept from checkpoint to checkpoint
        self.recovery_speed: Optional[float] = None
        self.write_speed: Optional[float] = None
        self.window = 0.0   # the last filling-window estimate (seconds), for tests

    # time left -----------------------------------------------------------
    def _left(self, s: Signals, phase: str, pages_left: int, speed: Optional[float]) -> float:
        """Expected seconds left of ``phase`` (all of it if it has not begun)."""
        if speed and phase in ("recovery_files", "pages"):
            return pages_left / speed
        last = s.last_seconds(phase) or self.phase_guess
        if phase != s.phase:
            return last
        return max(last - s.phase_elapsed, self.overrun_floor * last)

    def _measure(self, s: Signals) -> None:
        if s.phase_elapsed <= 0:
            return
        if s.phase == "recovery_files" and s.recovery_pages_written > 0:
            self.recovery_speed = s.recovery_pages_written / s.phase_elapsed
        elif s.phase == "pages" and s.pages_written > 0:
            self.write_speed = s.pages_written / s.phase_elapsed

    def time_left(self, s: Signals, until: str) -> float:
        """Expected seconds until the phase after ``until`` begins."""
        now = _ORDER.get(s.phase or "idle", 0)
        end = _ORDER[until]
        rec_left = max(0, s.checkpoint_pages - s.recovery_pages_written)
        write_left = max(0, s.checkpoint_pages - s.pages_written)
        total = 0.0
        for phase in PHASES[max(now, 1):end + 1]:
            if phase == "recovery_files":
                total += self._left(s, phase, rec_left, self.recovery_speed) if rec_left else 0.0
            elif phase == "pages":
                total += self._left(s, phase, write_left, self.write_speed) if write_left else 0.0
            else:
                total += self._left(s, phase, 0, None)
        return total

    # the law ---------------------------------------------------------------
    def _schedule_park(self, used: float, budget: float, elapsed: float, left: float) -> float:
        """Park that keeps ``used`` on the schedule ``budget·(elapsed/H)^shape``.

        Negative when behind the schedule; over the budget it is the whole
        time left, and always at least ``min_quantum`` (see ``park_seconds``).
        """
        h = elapsed + max(left, self.min_window)
        if used >= budget:
            self._hard = True
            return max(h - elapsed, self.min_quantum)
        x = (used / budget - self.head_start) / (1.0 - self.head_start)
        if x <= 0:
            return 0.0
        return h * x ** (1.0 / self.shape) - elapsed

    def park_seconds(self, signals: Signals, now: float) -> float:
        """Seconds the writer parks now (see the class docstring); 0 when it may go on."""
        s = signals
        if not s.checkpoint_running or s.checkpoint_pages <= 0:
            return 0.0
        phase = s.phase
        if phase not in _ORDER:
            if s.in_checkpoint_page is False:
                return 0.0
            return min(self.max_park, fill_rate_park(s.fill, s.progress))
        self._measure(s)
        self._hard = False   # over a budget: park whatever the quantum
        self._paced = 0.0
        park = 0.0
        w = s.checkpoint_elapsed
        # Like Ignite, the schedule throttles only writers that touch
        # checkpoint pages (all of them when the store cannot tell): the
        # others took no slot, and parking them too would stop the whole
        # store at once.  Over the budget every writer parks: its next write
        # may need a slot.
        if s.cow_capacity > 0 and (s.in_checkpoint_page is not False
                                   or s.cow_used >= self.buffer_target * s.cow_capacity):
            budget = self.buffer_target * s.cow_capacity
            if phase in _FILLING:
                left = self.time_left(s, "recovery_fsync")
                self.window = self._paced = w + left
                park = self._schedule_park(s.cow_used, budget, w, left)
            elif phase == "pages" and s.cow_used > budget:
                speed = self.write_speed or 0.0
                # Over the budget a park is due even if the excess frees in
                # less than a quantum: skipping it is how the buffer fills.
                self._hard = True
                park = max(self.min_quantum, (s.cow_used - budget) / speed if speed > 0 else 0.0)
        if s.dirty_limit > 0:
            left = self.time_left(s, "page_fsync")
            self._paced = max(self._paced, w + left)
            park = max(park, self._schedule_park(s.dirty_pages, self.dirty_target * s.dirty_limit, w, left))
        return self._quantise(park, s.writer if s.writer is not None else threading.get_ident())

    def _quantise(self, park: float, writer: int) -> float:
        """Take parks of at least one quantum, and size the quantum so that
        about ``parked_share`` of checks park.

        Fewer, longer parks instead of a small one on every write (the idea
        of RocksDB's write controller and its minimum delay): the same
        aggregate pace, with almost every write at the unthrottled latency.
        The quantum shrinks back to ``min_quantum`` when parks are rare.
        """
        # Every writer sees the same schedule: with one threshold they would
        # all park at once and the store would stop for a quantum.  A
        # threshold per writer, spread over [1, 2) quanta, staggers the parks.
        # A quantum is also at most ``window_share`` of the window being
        # paced: a writer allowed to run a whole quantum ahead of a short
        # window's schedule would spend the window's budget at its start.
        spread = 1.0 + ((writer * 2654435761) % 1024) / 1024.0
        threshold = min(self.quantum * spread, max(self.min_quantum, self.window_share * self._paced))
        parked = park >= threshold or (park >= self.min_quantum and self._hard)
        self._parked += 0.001 * ((1.0 if parked else 0.0) - self._parked)
        if self._parked > self.parked_share:
            self.quantum = min(self.max_park, self.quantum * self.QUANTUM_UP)
        else:
            self.quantum = max(self.min_quantum, self.quantum * self.QUANTUM_DOWN)
        return min(park, self.max_park) if parked else 0.0
