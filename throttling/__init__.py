"""Write throttling for pagestore: policies that decide how long a writer parks.

A writer asks its policy once per page modification, with a
:class:`~throttling.signals.Signals` snapshot of the core's counters, and parks
for the returned seconds outside any lock.  The package imports nothing from
the rest of the project.  ``make_policy(name, clock)`` builds a policy by name;
``POLICIES`` lists the names, the default (``adaptive``) first.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

from .adaptive import AdaptivePolicy
from .policies import (DisabledPolicy, ExponentialBackoffPolicy, FillRatePolicy, Policy,
                       SpeedBasedPolicy, fill_rate_park)
from .signals import Clock, FakeClock, MonotonicClock, Signals

DEFAULT_POLICY = "adaptive"

_FACTORIES: Dict[str, Callable[..., object]] = {
    "adaptive": AdaptivePolicy,
    "disabled": DisabledPolicy,
    "exponential_backoff": ExponentialBackoffPolicy,
    "fill_rate": FillRatePolicy,
    "speed_based": SpeedBasedPolicy,
}

#: Every policy name, the default first.
POLICIES = list(_FACTORIES)


def make_policy(name: Optional[str] = None, clock: Optional[Clock] = None, **options):
    """A new policy object by ``name`` (``None``: the default), on ``clock``.

    ``options`` go to the policy's constructor (for example ``max_park`` for
    ``adaptive``).  Raises ``ValueError`` for an unknown name.
    """
    key = DEFAULT_POLICY if name is None else name
    try:
        factory = _FACTORIES[key]
    except KeyError:
        raise ValueError(f"unknown throttling policy {name!r}; choose one of {POLICIES}") from None
    return factory(clock or MonotonicClock(), **options)


__all__ = [
    "AdaptivePolicy", "Clock", "DEFAULT_POLICY", "DisabledPolicy", "Policy",
    "ExponentialBackoffPolicy", "FakeClock", "FillRatePolicy", "MonotonicClock",
    "POLICIES", "Signals", "SpeedBasedPolicy", "fill_rate_park", "make_policy",
]
