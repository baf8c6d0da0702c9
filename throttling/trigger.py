"""When dirty pages should start a checkpoint: early enough for what writers dirty meanwhile.

Page memory has `slots` page slots and a page leaves it only through a
checkpoint (a dirty page becomes evictable once written in place). A
checkpoint requested now frees its first slots only after its *lead*: its
begin, the recovery files and their fsync (the previous checkpoint's phases,
measured). Writers that dirty ``w`` pages a second take about ``w · lead``
clean slots in that time, so a request made at a fixed fraction of page
memory comes too late whenever ``w · lead`` exceeds what is left clean: the
writers then wait for slots instead of going on while it runs.

:class:`DirtyTrigger` asks for the checkpoint when

    dirty >= slots − margin · w · lead,   kept within [floor, fraction] · slots

so with slow writers it is the configured fraction, as before, and with fast
ones it moves earlier, never below ``floor`` (a checkpoint of very few pages
would cost its fixed steps -- fsyncs, markers -- for little). ``w`` is a
time-decayed average of the store's pages-dirtied counter (meters.py).
Pure: the caller passes the counters and the time.
"""
from __future__ import annotations

from .meters import RateMeter

__all__ = ["DirtyTrigger"]


class DirtyTrigger:
    """The dirty-page trigger of checkpoints, paced by the measured dirtying rate."""

    def __init__(self, fraction: float, *, floor: float = 0.25, margin: float = 1.5,
                 tau: float = 0.5) -> None:
        if not 0 < fraction <= 1 or not 0 < floor <= 1 or margin < 0:
            raise ValueError("fraction and floor must be in (0, 1], margin >= 0")
        self.fraction = fraction
        self.floor = min(floor, fraction)
        self.margin = margin
        self.meter = RateMeter(tau, min_interval=0.005)

    @property
    def dirty_rate(self) -> float:
        """Pages dirtied per second, averaged (0 before the first interval)."""
        return self.meter.rate or 0.0

    def threshold(self, slots: int, lead: float) -> float:
        """Dirty pages from which a checkpoint is due, with a checkpoint lead of `lead` seconds."""
        early = slots - self.margin * self.dirty_rate * max(0.0, lead)
        return max(self.floor * slots, min(self.fraction * slots, early))

    def due(self, dirty: int, slots: int, dirtied: int, now: float, lead: float) -> bool:
        """Note the pages-dirtied counter `dirtied` at `now`; True when `dirty` pages
        of `slots` call for a checkpoint."""
        self.meter.update(dirtied, now)
        return dirty >= self.threshold(slots, lead)
