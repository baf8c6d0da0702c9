"""``adaptive``: the default policy: per-writer budget pacing in quanta.

Why the Ignite policies disappoint
----------------------------------
Both baselines map the *current* state to a park.  Exponential backoff only
knows "above 2/3": during the recovery-file phase the buffer cannot drain, so
its exponent climbs with every throttled write and parks reach seconds (a
writer that got one stays parked long after the buffer drained).  The
fill-rate law is graded, but it parks only writes to checkpoint pages, in
steps that grow exponentially to 1 s, so the few writes that hit hot pages
carry all the delay (p99 20-50x outside a checkpoint in the extreme run) and
it ignores dirty pages, which then reach the hard limit.  The speed-based
policy adds dirty-page protection but parks ``threads/targetSpeed`` without a
bound (parks of seconds when the target speed collapses).

The design
----------
Each limited resource is a budget that must last until the checkpoint can
refill it, turned into an *allowed rate*:

* checkpoint buffer: during the recovery-file phase nothing is freed, so the
  room left under ``buffer_target`` (95 %) must last the remaining recovery
  time ``T_rec = (checkpoint_pages − recovery_pages_written)/recovery_speed``:
  ``allowed_cow = room / (buffer_lead · T_rec)``.  With ``buffer_lead`` 0.5 the
  room shrinks like ``T_rec²``: early copies are allowed, which matters
  because writes to hot pages need their copy early and not again.  Once pages
  are written in place copies are freed at about ``write_speed ·
  used/pages_left``, so then ``allowed_cow = room/horizon + free_rate``.
* dirty pages: the room under ``dirty_target · max_dirty · total_pages`` must
  last until the checkpoint ends: ``allowed_dirty = room / (dirty_lead ·
  (T_rec + T_write))``.

Speeds are measured (time-decayed averages of the written counters) and
remembered across checkpoints; before the first measurement the policy falls
back to the fill-rate law, capped at ``max_park``.

Each check pays for what it consumed: the copy-on-write slots it took (the
rise of ``cow_used``) and the pages it dirtied (the rise of
``pages_dirtied``).  Each writer (``Signals.writer`` or its thread) owns an
equal share of each allowed rate and a debt per resource in *pages*, paid
off by elapsed time at the share's current rate (so when a budget refills,
old debt melts at once instead of parking writers into a phase that no
longer needs it).  Its debt in seconds is ``pages / share rate``; beyond a
``tolerance`` (50 ms of consumption ahead of plan) the writer parks.

Parks come in quanta: a writer parks only when its excess passes the current
quantum, and then parks the whole excess, capped at ``max_park`` (50 ms).
The quantum is tuned so that about 0.4 % of checks park (from the measured
debt rate and check rate, between 0.5 ms and ``max_park``), the same idea as
RocksDB's write controller with its minimum 1 ms delay: a few longer parks
instead of a small one on every write keep p99 latency at the unthrottled
value while the aggregate rate still follows the plan, and fewer parks mean
fewer context switches.

Why it wins in the simulation: the buffer is used to its target exactly when
it can be refilled (more operations per checkpoint than the fill-rate law,
which stops around its exponential knee), the hard limits that stall or block
writers are never reached, no writer is parked past ``max_park``, and p99
latency during a checkpoint equals the latency outside one unless the needed
slowdown is so deep that more than 1 % of writes must park.
"""
from __future__ import annotations

import math
import threading
from typing import Dict, List, Optional, Tuple

from .meters import RateMeter
from .policies import fill_rate_park
from .signals import Clock, MonotonicClock, Signals


class AdaptivePolicy:
    """Budget pacing of the checkpoint buffer and dirty pages (the default)."""

    name = "adaptive"

    def __init__(self, clock: Optional[Clock] = None, *, max_dirty: float = 0.75,
                 buffer_target: float = 0.95, dirty_target: float = 0.98,
                 max_park: float = 0.05, min_quantum: float = 0.0005,
                 parked_share: float = 0.004, horizon: float = 0.02,
                 speed_tau: float = 0.1, load_tau: float = 0.05,
                 active_window: float = 0.1, tolerance: float = 0.05,
                 debt_limit: float = 1.0, dirty_lead: float = 0.3,
                 buffer_lead: float = 0.5) -> None:
        self.clock = clock or MonotonicClock()
        self.max_dirty = max_dirty
        self.buffer_target = buffer_target
        self.dirty_target = dirty_target
        self.max_park = max_park
        self.min_quantum = min(min_quantum, max_park)
        self.parked_share = parked_share
        self.horizon = horizon
        self.active_window = active_window
        self.tolerance = tolerance
        self.dirty_lead = dirty_lead
        self.buffer_lead = buffer_lead
        self.debt_limit = max(debt_limit, tolerance + 2 * max_park)
        self.recovery_speed = RateMeter(speed_tau)
        self.write_speed = RateMeter(speed_tau)
        self.debt_rate = RateMeter(load_tau)
        self.call_rate = RateMeter(load_tau)
        self.quantum = self.min_quantum
        self.allowed = (math.inf, math.inf)
        self._debt_sum = 0.0
        self._calls = 0
        self._writers: Dict[object, List[float]] = {}
        self._cp_key: Optional[int] = None
        self._cp_start = 0.0
        self._seen_dirtied: Optional[int] = None
        self._seen_cow = 0

    # measurements -------------------------------------------------------
    def _costs(self, s: Signals) -> Tuple[float, float]:
        """Copy-on-write slots and new dirty pages this check pays for."""
        last = self._seen_dirtied
        dirty = 0 if last is None else max(0, s.pages_dirtied - last)
        self._seen_dirtied = s.pages_dirtied
        cow = 0 if s.in_checkpoint_page is False else max(0, s.cow_used - self._seen_cow)
        self._seen_cow = s.cow_used
        return float(cow), float(dirty)

    def _track_checkpoint(self, s: Signals, now: float) -> None:
        if self._cp_key != s.checkpoint_pages:
            self._cp_key = s.checkpoint_pages
            self._cp_start = now
            self.recovery_speed.rebase(s.recovery_pages_written, now)
            self.write_speed.rebase(s.pages_written, now)
        if s.recovery_pages_written < s.checkpoint_pages:
            if s.recovery_pages_written == 0:
                self.recovery_speed.rebase(0, now)
            else:
                self.recovery_speed.update(s.recovery_pages_written, now)
        elif s.pages_written == 0:
            self.write_speed.rebase(0, now)
        elif s.pages_written < s.checkpoint_pages:
            self.write_speed.update(s.pages_written, now)

    def _speeds(self, s: Signals, now: float) -> Optional[Tuple[float, float]]:
        rs = self.recovery_speed.rate
        if not rs or rs <= 0:
            elapsed = now - self._cp_start
            rs = s.recovery_pages_written / elapsed if elapsed > 0 else 0.0
        ws = self.write_speed.rate
        if not ws or ws <= 0:
            ws = 2.0 * rs
        if s.recovery_pages_written < s.checkpoint_pages and rs <= 0:
            return None
        if ws <= 0:
            return None
        return rs, ws

    # the law ------------------------------------------------------------
    def allowed_rates(self, s: Signals, now: float) -> Optional[Tuple[float, float]]:
        """Copy-on-write slots/s and new dirty pages/s that spend the budgets
        evenly until they refill; ``None`` while checkpoint speeds are unknown.
        """
        speeds = self._speeds(s, now)
        if speeds is None:
            return None
        rs, ws = speeds
        cp = s.checkpoint_pages
        rec_left = max(0, cp - s.recovery_pages_written)
        write_left = max(0, cp - s.pages_written)
        t_rec = rec_left / rs if rec_left else 0.0
        t_write = write_left / ws if write_left else 0.0
        cow_rate = math.inf
        if s.cow_capacity > 0:
            room = self.buffer_target * s.cow_capacity - s.cow_used
            if rec_left:
                cow_rate = room / max(self.buffer_lead * t_rec, self.horizon)
            else:
                free = ws * min(1.0, s.cow_used / max(1, write_left))
                cow_rate = room / self.horizon + free
        dirty_rate = math.inf
        if s.total_pages > 0:
            room = self.dirty_target * self.max_dirty * s.total_pages - s.dirty_pages
            dirty_rate = room / max(self.dirty_lead * (t_rec + t_write), self.horizon)
        return max(0.0, cow_rate), max(0.0, dirty_rate)

    def _writer(self, key: object, now: float) -> List[float]:
        """Per-writer state ``[cow debt, dirty debt, last paid, last seen]``;
        debts are in pages (resource units), so a budget that refills pays
        them off at the new rate at once."""
        state = self._writers.get(key)
        if state is None:
            state = self._writers[key] = [0.0, 0.0, now, now]
        state[3] = now
        if len(self._writers) > 1 and self._calls % 64 == 0:
            for k in [k for k, v in self._writers.items() if now - v[3] > self.active_window]:
                if k != key:
                    del self._writers[k]
        return state

    def park_seconds(self, signals: Signals, now: float) -> float:
        s = signals
        self._calls += 1
        cow, dirty = self._costs(s)
        key = s.writer if s.writer is not None else threading.get_ident()
        state = self._writer(key, now)
        self.call_rate.update(self._calls, now)
        self.debt_rate.update(self._debt_sum, now)
        if not s.checkpoint_running or s.checkpoint_pages <= 0:
            self._cp_key = None
            self.allowed = (math.inf, math.inf)
            state[0] = state[1] = 0.0
            state[2] = now
            return 0.0
        self._track_checkpoint(s, now)
        allowed = self.allowed_rates(s, now)
        elapsed = max(0.0, now - state[2])
        state[2] = now
        if allowed is None:
            state[0] = state[1] = 0.0
            if s.in_checkpoint_page is False:
                return 0.0
            return min(self.max_park, fill_rate_park(s.fill, s.progress))
        self.allowed = allowed
        share = len(self._writers)
        debt = 0.0
        for i, (cost, rate) in enumerate(((cow, allowed[0]), (dirty, allowed[1]))):
            if rate == math.inf:
                state[i] = 0.0
                continue
            per_writer = rate / share
            units = max(0.0, state[i] - elapsed * per_writer) + cost
            if per_writer > 0:
                units = min(units, per_writer * self.debt_limit)
                seconds = units / per_writer
            else:
                seconds = math.inf if units > 0 else 0.0
            state[i] = units
            if cost:
                self._debt_sum += min(self.debt_limit, cost / per_writer if per_writer > 0 else self.debt_limit)
            debt = max(debt, seconds)
        self._retune_quantum()
        over = debt - self.tolerance
        if over <= self.quantum:
            return 0.0
        return min(over, self.max_park)

    def _retune_quantum(self) -> None:
        """Size parks so that about ``parked_share`` of checks park."""
        g, c = self.debt_rate.rate, self.call_rate.rate
        if g is None or not c:
            return
        want = g / (self.parked_share * c)
        self.quantum = min(self.max_park, max(self.min_quantum, want))
