"""A deterministic discrete-event model of writers, a checkpointer and a buffer.

The model
---------
* ``writers`` writers each run operations of ``op_cost`` seconds back to back.
  An operation touches one page, drawn with a seeded generator:

  - with probability ``cow_share · unwritten/checkpoint_pages`` (only while a
    checkpoint runs) a hot page of the running checkpoint not yet written in
    place (``in_checkpoint_page``): if it has no copy yet it takes a
    copy-on-write slot and the live page becomes dirty for the next
    checkpoint, otherwise it costs nothing new;
  - with probability ``new_share`` a clean page, which becomes dirty;
  - otherwise a page that is already dirty (nothing new to write).

  After the operation the writer asks the policy (``now`` = the end of the
  operation) and parks for the answer; the operation's latency runs from its
  start to the end of the park, as a put that throttles inside the call.
* The checkpointer starts when no checkpoint runs and either
  ``checkpoint_interval`` has passed since the last one ended or dirty pages
  reach ``trigger·total_pages`` (a writer that meets the hard limit
  ``max_dirty·total_pages`` outside a checkpoint starts one at once).  It takes
  the dirty pages, writes them to recovery files at ``recovery_speed`` pages/s,
  fsyncs (``fsync`` seconds), writes them in place at ``write_speed`` pages/s
  and fsyncs again.  A page written in place frees its copy; while the buffer
  is at least 2/3 full it writes copied pages first, as Ignite does.
* Last-resort waits: a writer that needs a copy when the buffer is full waits
  until the checkpointer has written that very page in place (a *stall*:
  the page then needs no copy; its rank among the pages still to write is
  drawn at random, and copies go first while the buffer is 2/3 full); a writer that would dirty a
  page at the hard limit while a checkpoint runs waits for the next checkpoint
  to take the dirty pages (a *dirty block*).

Time is a :class:`~throttling.signals.FakeClock` moved from event to event
(operation ends, page writes, phase ends), so a run is exact and repeatable.
Reported per policy: operations completed, stalls, dirty blocks, parks, the
longest park, p99 latency during and outside checkpoints, the *freeze* (the
longest interval in which no operation completed) with the checkpoint phase it
began in, and the buffer's peak fill.
"""
from __future__ import annotations

import bisect
import heapq
import math
import random
from dataclasses import asdict, dataclass, replace
from typing import Dict, List, Optional

from .signals import PHASES, FakeClock, Signals

IDLE, RECOVERY, RECOVERY_FSYNC, WRITE, WRITE_FSYNC = (
    "idle", "recovery", "recovery_fsync", "write", "write_fsync")
#: The model's phases as the store reports them (``Signals.phase``).
SIGNAL_PHASE = {IDLE: "idle", RECOVERY: "recovery_files", RECOVERY_FSYNC: "recovery_fsync",
                WRITE: "pages", WRITE_FSYNC: "page_fsync"}


@dataclass(frozen=True)
class Scenario:
    """One run's parameters; the defaults are the ``standard`` scenario."""

    name: str = "standard"
    duration: float = 6.0
    writers: int = 16
    op_cost: float = 1.6e-3
    new_share: float = 0.05
    cow_share: float = 0.1
    total_pages: int = 6000
    max_dirty: float = 0.75
    cow_capacity: int = 600
    recovery_speed: float = 1500.0
    write_speed: float = 3000.0
    fsync: float = 0.01
    checkpoint_interval: float = 1.0
    trigger: float = 0.5
    seed: int = 7


SCENARIOS: Dict[str, Scenario] = {
    # 10 000 ops/s offered, 500 new dirty pages/s (half what the checkpointer
    # sustains), a checkpoint a second after the last, and a buffer a little
    # short for the copy-on-write traffic of a recovery phase.
    "standard": Scenario(),
    # 32 writers at full speed, 30 % of operations on hot checkpoint pages,
    # checkpoints back to back, dirty pages beyond what the checkpointer
    # sustains: throttling is needed in every checkpoint.
    "extreme": Scenario(name="extreme", duration=8.0, writers=32, op_cost=3.2e-3,
                        new_share=0.1, cow_share=0.3, cow_capacity=1500, recovery_speed=1500.0,
                        write_speed=3000.0, checkpoint_interval=0.0, trigger=0.1),
}


class _Checkpointer:
    """The checkpointer's state, advanced lazily to any later time."""

    def __init__(self, sc: Scenario, rng: random.Random) -> None:
        self.sc, self.rng = sc, rng
        self.t = 0.0
        self.phase = IDLE
        self.phase_end = math.inf
        self.phase_start = 0.0
        self.last_end = 0.0
        self.dirty = 0
        self.total = 0
        self.recovery_written = 0
        self.written = 0
        self.uncopied = 0
        self.copied = 0
        self.uncopied_written = 0
        self.cow_used = 0
        self.completed = 0
        self.timeline: List[float] = [0.0]
        self.phases: List[str] = [IDLE]
        self.started = 0.0
        self._durations = [0.0] * len(PHASES)
        self.last_durations: tuple = ()

    @property
    def running(self) -> bool:
        return self.phase != IDLE

    def _enter(self, phase: str, t: float, end: float) -> None:
        if self.phase != IDLE:
            self._durations[PHASES.index(SIGNAL_PHASE[self.phase])] = t - self.phase_start
        if phase == IDLE:
            self.last_durations = tuple(self._durations)
        elif self.phase == IDLE:
            self.started = t
            self._durations = [0.0] * len(PHASES)
        self.phase, self.phase_start, self.phase_end = phase, t, end
        self.timeline.append(t)
        self.phases.append(phase)

    def phase_at(self, t: float) -> str:
        return self.phases[bisect.bisect_right(self.timeline, t) - 1]

    def wants_start(self, t: float) -> bool:
        sc = self.sc
        return (self.phase == IDLE and self.dirty > 0 and
                (t >= self.last_end + sc.checkpoint_interval or
                 self.dirty >= sc.trigger * sc.total_pages))

    def start(self, t: float) -> None:
        self.total = self.uncopied = self.dirty
        self.dirty = self.recovery_written = self.written = self.copied = 0
        self._enter(RECOVERY, t, t + self.total / self.sc.recovery_speed)

    def next_event(self) -> float:
        if self.phase == IDLE:
            return self.last_end + self.sc.checkpoint_interval if self.dirty else math.inf
        if self.phase == WRITE:
            return self.phase_start + (self.written + 1) / self.sc.write_speed
        return self.phase_end

    def _write_one_page(self) -> None:
        fill = self.cow_used / self.sc.cow_capacity
        remaining = self.copied + self.uncopied
        if self.copied and (fill >= 2 / 3 or self.rng.random() * remaining < self.copied):
            self.copied -= 1
            self.cow_used -= 1
        else:
            self.uncopied -= 1
            self.uncopied_written += 1
        self.written += 1

    def advance_to(self, t: float) -> None:
        sc = self.sc
        while True:
            if self.phase == IDLE:
                start_at = self.last_end + sc.checkpoint_interval
                if self.dirty and start_at <= t:
                    self.start(max(start_at, self.t))
                    continue
                break
            if self.phase == RECOVERY:
                if self.phase_end <= t:
                    self.recovery_written = self.total
                    self._enter(RECOVERY_FSYNC, self.phase_end, self.phase_end + sc.fsync)
                    continue
                done = int((t - self.phase_start) * sc.recovery_speed)
                self.recovery_written = max(self.recovery_written, min(self.total, done))
                break
            if self.phase == RECOVERY_FSYNC:
                if self.phase_end <= t:
                    end = self.phase_end
                    self._enter(WRITE, end, end + self.total / sc.write_speed)
                    continue
                break
            if self.phase == WRITE:
                while self.written < self.total and self.next_event() <= t:
                    self._write_one_page()
                if self.written >= self.total:
                    end = self.phase_start + self.total / sc.write_speed
                    self._enter(WRITE_FSYNC, end, end + sc.fsync)
                    continue
                break
            if self.phase == WRITE_FSYNC:
                if self.phase_end <= t:
                    end = self.phase_end
                    self._enter(IDLE, end, math.inf)
                    self.last_end = end
                    self.completed += 1
                    if self.wants_start(end):
                        self.start(end)
                    continue
                break
        self.t = max(self.t, t)


def _p99(values: List[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(math.ceil(0.99 * len(ordered))) - 1)]


def simulate(policy_name: str, scenario: Scenario, policy=None) -> dict:
    """Run one policy through ``scenario``; returns the measurements."""
    from . import make_policy

    sc = scenario
    rng = random.Random(sc.seed)
    clock = FakeClock()
    policy = policy if policy is not None else make_policy(policy_name, clock)
    cp = _Checkpointer(sc, rng)
    limit = int(sc.max_dirty * sc.total_pages)
    n = sc.writers
    ready = [i * sc.op_cost / n for i in range(n)]
    heap = [(t, i) for i, t in enumerate(ready)]
    blocked: List[Optional[tuple]] = [None] * n   # (reason, kind, op start, page rank)
    queue: List[int] = []                          # blocked writers, FIFO
    dirtied = 0
    stalls = dirty_blocks = parks = 0
    park_total = park_max = rec_park_max = 0.0
    lat_in: List[float] = []
    lat_out: List[float] = []
    done_at: List[float] = []
    last_done = [0.0] * n
    stuck = [0.0, 0.0]                 # longest gap of one writer, when its park began
    peak = 0

    def execute(w: int, kind: str, t: float, started: float) -> None:
        nonlocal dirtied, parks, park_total, park_max, peak, rec_park_max
        if kind == "cow":
            cp.uncopied -= 1
            cp.copied += 1
            cp.cow_used += 1
            peak = max(peak, cp.cow_used)
        if kind in ("cow", "new"):
            cp.dirty += 1
            dirtied += 1
        end = t + sc.op_cost
        clock.set(max(clock.now(), end))
        sig = Signals(cp.cow_used, sc.cow_capacity, cp.dirty, sc.total_pages, cp.running,
                      cp.total if cp.running else 0, cp.recovery_written, cp.written,
                      dirtied, kind in ("cow", "cphit"), w,
                      phase=SIGNAL_PHASE[cp.phase], phase_elapsed=end - cp.phase_start,
                      checkpoint_elapsed=end - cp.started if cp.running else 0.0,
                      last_phase_seconds=cp.last_durations, dirty_limit=limit)
        park = max(0.0, float(policy.park_seconds(sig, end)))
        if park > 0:
            if cp.phase in (RECOVERY, RECOVERY_FSYNC):
                rec_park_max = max(rec_park_max, park)
            parks += 1
            park_total += park
            park_max = max(park_max, park)
        back = end + park
        (lat_in if cp.phase_at(started) != IDLE else lat_out).append(back - started)
        done_at.append(back)
        if min(back, sc.duration) - last_done[w] > stuck[0]:
            stuck[0], stuck[1] = min(back, sc.duration) - last_done[w], end
        last_done[w] = back
        ready[w] = back
        heapq.heappush(heap, (back, w))
        if cp.wants_start(t):
            cp.start(t)

    while True:
        while heap and heap[0][0] != ready[heap[0][1]]:
            heapq.heappop(heap)
        tw, w = heap[0] if heap else (math.inf, -1)
        te = cp.next_event() if (queue or cp.phase == IDLE) else math.inf
        t = min(tw, te)
        if t >= sc.duration:
            break
        cp.advance_to(t)
        if te <= tw:
            for b in list(queue):
                reason, kind, started, target = blocked[b]
                if reason == "cow":
                    if cp.running and cp.uncopied_written < target:
                        continue
                    kind = "new"
                elif cp.dirty >= limit:
                    continue
                elif kind == "cow" and (not cp.running or cp.uncopied <= 0):
                    kind = "new"
                queue.remove(b)
                blocked[b] = None
                execute(b, kind, t, started)
            continue
        if cp.running and cp.total:
            p_cp = sc.cow_share * (cp.uncopied + cp.copied) / cp.total
            p_cow = sc.cow_share * cp.uncopied / cp.total
        else:
            p_cp = p_cow = 0.0
        u = rng.random()
        if u < p_cp:
            kind = "cow" if u < p_cow else "cphit"
        else:
            kind = "new" if u < p_cp + sc.new_share else "hit"
        if kind in ("cow", "new") and cp.dirty >= limit:
            if cp.running:
                dirty_blocks += 1
                blocked[w] = ("dirty", kind, t, 0)
                queue.append(w)
                ready[w] = math.inf
                continue
            cp.start(t)
            kind = "new"
        if kind == "cow" and cp.cow_used >= sc.cow_capacity:
            stalls += 1
            blocked[w] = ("cow", kind, t, cp.uncopied_written + rng.randint(1, cp.uncopied))
            queue.append(w)
            ready[w] = math.inf
            continue
        execute(w, kind, t, t)

    finished = sorted(x for x in done_at if x <= sc.duration)
    edges = [0.0] + finished + [sc.duration]
    freeze, freeze_at = 0.0, 0.0
    for a, b in zip(edges, edges[1:]):
        if b - a > freeze:
            freeze, freeze_at = b - a, a
    p_in, p_out = _p99(lat_in), _p99(lat_out)
    return {
        "policy": policy_name,
        "scenario": sc.name,
        "ops": len(finished),
        "ops_per_s": len(finished) / sc.duration,
        "stalls": stalls,
        "dirty_blocks": dirty_blocks,
        "parks": parks,
        "park_s": park_total,
        "max_park_s": park_max,
        "recovery_max_park_s": rec_park_max,
        "p99_in_ms": p_in * 1e3,
        "p99_out_ms": p_out * 1e3,
        "p99_ratio": p_in / p_out if p_out else math.inf,
        "freeze_s": freeze,
        "freeze_phase": cp.phase_at(freeze_at),
        "writer_freeze_s": stuck[0],
        "writer_freeze_phase": cp.phase_at(stuck[1]),
        "buffer_peak": peak / sc.cow_capacity,
        "checkpoints": cp.completed,
    }


def compare(scenario, policies: Optional[List[str]] = None) -> List[dict]:
    """Every policy (default first) through ``scenario`` (a name or a Scenario)."""
    from . import POLICIES

    sc = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
    return [simulate(name, sc) for name in (policies or POLICIES)]


COLUMNS = [("policy", "{:<19}"), ("ops", "{:>6}"), ("stalls", "{:>6}"),
           ("dirty_blocks", "{:>6}"), ("max_park_s", "{:>9.4g}"),
           ("p99_in_ms", "{:>7.2f}"), ("p99_out_ms", "{:>7.2f}"),
           ("p99_ratio", "{:>6.2f}"), ("freeze_s", "{:>7.3f}"),
           ("freeze_phase", "{:>8.8}"), ("writer_freeze_s", "{:>7.3f}"),
           ("buffer_peak", "{:>5.2f}")]
HEADERS = ["policy", "ops", "stalls", "dblock", "max park", "p99 in", "p99 out",
           "ratio", "freeze", "in phase", "w.freeze", "peak"]


def format_table(rows: List[dict]) -> str:
    """The result rows as a plain-text table, one line per scenario and policy."""
    widths = [len(f.format(rows[0][k])) if rows else 8 for k, f in COLUMNS]
    head = " | ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(HEADERS, widths)))
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(" | ".join(f.format(r[k]) for k, f in COLUMNS))
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    """Command line: simulate the named scenarios (all by default) under every policy and print the
    table; returns the exit status."""
    import argparse

    ap = argparse.ArgumentParser(description="Compare throttling policies in simulation.")
    ap.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                    help="one of %s (default: all)" % ", ".join(SCENARIOS))
    ap.add_argument("--duration", type=float, default=None)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args(argv)
    for name in args.scenarios or list(SCENARIOS):
        if name not in SCENARIOS:
            ap.error(f"unknown scenario {name!r}")
        sc = SCENARIOS[name]
        if args.duration is not None:
            sc = replace(sc, duration=args.duration)
        if args.seed is not None:
            sc = replace(sc, seed=args.seed)
        print(f"scenario {name}: " + ", ".join(f"{k}={v}" for k, v in asdict(sc).items() if k != "name"))
        print(format_table(compare(sc)))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
