"""The baseline write-throttling policies, after Apache Ignite.

Every policy is a plain object with a ``name`` and
``park_seconds(signals, now) -> float``: how long the writer that just
modified a page should park before its next operation (0 means go on).  A
policy is shared by all writers of a store and keeps its own state (counters,
rates measured from successive signals); time comes only from ``now`` and the
injected clock, never from the policy itself.

* ``disabled`` never parks; the core's last-resort waits (a full checkpoint
  buffer, the hard dirty-page limit) are all that hold writers back.
* ``exponential_backoff`` is Ignite's old checkpoint-buffer protection: above
  2/3 fill each throttled write parks ``4 µs · 1.05^n`` and ``n`` grows by one
  per throttled call, shared by all writers, until a check sees the fill back
  at or below 2/3.  During the recovery-file phase nothing is freed, the fill
  cannot drop, ``n`` climbs with every write and the parks reach seconds: the
  freeze IEP-113 had to fix.
* ``fill_rate`` is IEP-113's strategy: the fill may run ahead of the weighted
  progress, and the park grows exponentially with how far it is ahead,
  from 10 µs to 1 s.
* ``speed_based`` is Ignite's clean-pages protection: compare the speed at
  which pages get dirty with the speed the checkpoint could allow so that
  dirty pages stay under 75 % until it ends; checkpoint pages in the buffer's
  throttling zone use the fill-rate protector.

Ignite throttles the checkpoint buffer only on writes to pages that are in the
checkpoint; the buffer-protecting policies here do the same when
``in_checkpoint_page`` is known and throttle every write when it is ``None``.
"""
from __future__ import annotations

import math
import threading
from typing import Dict, Optional, Protocol

from .meters import RateMeter
from .signals import Clock, MonotonicClock, Signals


class Policy(Protocol):
    """What a store asks of a throttling policy (every policy here is one)."""

    #: The policy's name, as `open(throttling=...)` spells it.
    name: str
    #: Seconds a writer may go without asking (0.0: ask on every write).
    check_interval: float

    def park_seconds(self, signals: Signals, now: float) -> float:
        """Seconds the writer that just modified a page parks (0: go on)."""

#: Fill above which Ignite's checkpoint-buffer protection starts.
CP_BUF_THRESHOLD = 2.0 / 3.0


def _touches_checkpoint(s: Signals) -> bool:
    return s.in_checkpoint_page is not False


class DisabledPolicy:
    """Never parks."""

    name = "disabled"
    check_interval = 0.0  # asked on every write, as in Ignite

    def __init__(self, clock: Optional[Clock] = None) -> None:
        self.clock = clock or MonotonicClock()

    def park_seconds(self, signals: Signals, now: float) -> float:
        """Always 0.0: writers never park."""
        return 0.0


class ExponentialBackoffPolicy:
    """Ignite's old protection: ``start · ratio^n`` above the threshold."""

    name = "exponential_backoff"
    check_interval = 0.0  # asked on every write, as in Ignite

    def __init__(self, clock: Optional[Clock] = None, *, start: float = 4e-6,
                 ratio: float = 1.05, threshold: float = CP_BUF_THRESHOLD) -> None:
        self.clock = clock or MonotonicClock()
        self.start = start
        self.ratio = ratio
        self.threshold = threshold
        self.exponent = 0

    def park_seconds(self, signals: Signals, now: float) -> float:
        """Ignite's backoff: 4 µs · 1.05^n while the checkpoint buffer is over 2/3 full, n growing
        per throttled call; 0 below."""
        if (not signals.checkpoint_running or signals.checkpoint_pages <= 0
                or signals.fill <= self.threshold):
            self.exponent = 0
            return 0.0
        if not _touches_checkpoint(signals):
            return 0.0
        n = self.exponent
        self.exponent = n + 1
        try:
            return self.start * self.ratio ** n
        except OverflowError:
            return math.inf


def fill_rate_park(fill: float, progress: float) -> float:
    """IEP-113's park for a buffer ``fill`` at weighted ``progress``.

    ``10 µs · exp(ln(1e5) · (fill − progress)/(1 − progress))`` when the fill
    is ahead of the progress, else 0: 10 µs just ahead, 1 s with a full buffer.
    """
    if fill <= progress or progress >= 1.0:
        return 0.0
    x = (fill - progress) / (1.0 - progress)
    return 1e-5 * math.exp(math.log(1e5) * min(1.0, x))


class FillRatePolicy:
    """IEP-113's fill-rate strategy (``FillRateBasedThrottlingStrategy``)."""

    name = "fill_rate"
    check_interval = 0.0  # asked on every write, as in Ignite

    def __init__(self, clock: Optional[Clock] = None) -> None:
        self.clock = clock or MonotonicClock()

    def park_seconds(self, signals: Signals, now: float) -> float:
        """IEP-113's park: 10 µs up to 1 s, exponential in how far buffer fill runs ahead of
        checkpoint progress (DESIGN.md §6); 0 when it does not."""
        if not signals.checkpoint_running or signals.checkpoint_pages <= 0:
            return 0.0
        if not _touches_checkpoint(signals):
            return 0.0
        return fill_rate_park(signals.fill, signals.progress)


class SpeedBasedPolicy:
    """Ignite's speed-based throttle (``PagesWriteSpeedBasedThrottle``).

    Clean-pages protection, with ``dirty`` the dirty-page ratio and ``done``
    the checkpoint's weighted progress in pages
    (``(2·recovery_pages_written + pages_written)/3``)::

        targetSpeed = (0.75 − dirty)·total_pages / ((checkpoint_pages − done)/cpSpeed)
        targetRatio = (progress·(1 − init) + init)·0.75,  init ≥ 0.03
        throttle if dirty > targetRatio and markSpeed > k·targetSpeed
        park = factor·threads/targetSpeed

    with ``k = 0.8, factor = 3`` when clean space is low (dirty + 0.05 > 0.75)
    and ``k = 1, factor = 1`` otherwise.  ``markSpeed`` is the measured rate of
    ``pages_dirtied``, ``cpSpeed`` the measured rate of ``done`` and
    ``threads`` the writers seen in the last second.  At or above 75 % dirty it
    parks nothing: the hard limit blocks writers instead.
    """

    name = "speed_based"
    check_interval = 0.0  # asked on every write, as in Ignite
    MAX_DIRTY = 0.75
    MIN_RATIO_NO_THROTTLE = 0.03

    def __init__(self, clock: Optional[Clock] = None, *, tau: float = 0.5) -> None:
        self.clock = clock or MonotonicClock()
        self.mark_speed = RateMeter(tau)
        self.cp_speed = RateMeter(tau)
        self._cp_key: Optional[int] = None
        self._init_ratio = self.MIN_RATIO_NO_THROTTLE
        self._writers: Dict[object, float] = {}

    def _threads(self, signals: Signals, now: float) -> int:
        key = signals.writer if signals.writer is not None else threading.get_ident()
        self._writers[key] = now
        if len(self._writers) > 1:
            stale = [k for k, t in self._writers.items() if now - t > 1.0]
            for k in stale:
                del self._writers[k]
        return max(1, len(self._writers))

    def park_seconds(self, signals: Signals, now: float) -> float:
        """Seconds to park so dirtying keeps pace with the checkpointer's measured write speed (see
        the class docstring); 0 when it does."""
        s = signals
        threads = self._threads(s, now)
        self.mark_speed.update(s.pages_dirtied, now)
        if not s.checkpoint_running or s.checkpoint_pages <= 0:
            self._cp_key = None
            return 0.0
        done = (2 * s.recovery_pages_written + s.pages_written) / 3.0
        if self._cp_key != s.checkpoint_pages:
            self._cp_key = s.checkpoint_pages
            self._init_ratio = max(self.MIN_RATIO_NO_THROTTLE, s.dirty_ratio)
            self.cp_speed.rebase(done, now)
        self.cp_speed.update(done, now)
        if _touches_checkpoint(s) and s.fill > CP_BUF_THRESHOLD:
            return fill_rate_park(s.fill, s.progress)
        dirty = s.dirty_ratio
        if dirty >= self.MAX_DIRTY:
            return 0.0
        cp_speed = self.cp_speed.rate
        mark_speed = self.mark_speed.rate
        if not cp_speed or cp_speed <= 0 or mark_speed is None:
            return 0.0
        left = max(0.0, s.checkpoint_pages - done)
        if left <= 0:
            return 0.0
        target_speed = (self.MAX_DIRTY - dirty) * s.total_pages / (left / cp_speed)
        target_ratio = (s.progress * (1 - self._init_ratio) + self._init_ratio) * self.MAX_DIRTY
        low_clean = dirty + 0.05 > self.MAX_DIRTY
        k, factor = (0.8, 3.0) if low_clean else (1.0, 1.0)
        if dirty > target_ratio and mark_speed > k * target_speed and target_speed > 0:
            return factor * threads / target_speed
        return 0.0
