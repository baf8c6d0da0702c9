"""Rate meters driven by the caller's time (no clock of their own).

A policy sees counters, not rates; :class:`RateMeter` turns a counter sampled
at irregular times into a time-decayed average rate, and :class:`Ema` smooths
any value the same way.  The weight of a sample is ``1 − exp(−Δt/τ)``, so the
average forgets at the same speed whether it is sampled every microsecond or
every second.  Samples closer than ``min_interval`` are folded into the next
one, which keeps a meter called once per write cheap and its samples not
dominated by quantisation (a counter that moved by one page in 2 µs).
"""
from __future__ import annotations

import math
from typing import Optional


class Ema:
    """Time-decayed exponential moving average with time constant ``tau``."""

    __slots__ = ("tau", "value")

    def __init__(self, tau: float) -> None:
        if tau <= 0:
            raise ValueError("tau must be positive")
        self.tau = tau
        self.value: Optional[float] = None

    def add(self, sample: float, dt: float) -> float:
        """Blend in `sample` taken `dt` seconds after the last one; returns the new average."""
        if self.value is None:
            self.value = float(sample)
        else:
            w = 1.0 - math.exp(-max(0.0, dt) / self.tau)
            self.value += w * (sample - self.value)
        return self.value

    def reset(self) -> None:
        """Forget every sample."""
        self.value = None


class RateMeter:
    """Average rate (units per second) of a counter sampled with times."""

    __slots__ = ("ema", "min_interval", "_t", "_v")

    def __init__(self, tau: float, min_interval: float = 0.001) -> None:
        self.ema = Ema(tau)
        self.min_interval = min_interval
        self._t: Optional[float] = None
        self._v = 0.0

    @property
    def rate(self) -> Optional[float]:
        """The averaged rate, or ``None`` before the first full interval."""
        return self.ema.value

    def rebase(self, value: float, now: float) -> None:
        """Start measuring from ``value`` at ``now`` (the counter was reset)."""
        self._t = now
        self._v = value

    def update(self, value: float, now: float) -> Optional[float]:
        """Take the counter's `value` at time `now`; returns the averaged rate (None before the
        first interval of at least `min_interval`)."""
        if self._t is None:
            self.rebase(value, now)
            return self.rate
        dt = now - self._t
        if dt < self.min_interval:
            return self.rate
        self.ema.add((value - self._v) / dt, dt)
        self._t = now
        self._v = value
        return self.rate
