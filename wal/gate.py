"""`CommitGate`: how group commit decides who syncs and who waits.

A committer takes its thread's ticket (`ticket()`) and asks the gate to
wait until its LSN is durable. The gate either returns False (a round
another thread led covered it) or elects it leader, granting the ticket a
round [start, target): the leader makes it durable and calls
`done(ticket, ok)` whatever happened. The grant is written into the ticket
before `wait` returns, so a Ctrl-C landing on the way back still finds the
round owed in the caller's `finally`. One round covers everything appended
before its leader read the log's end.

The store passes the C implementation (pagestore's binding of
csrc/gcommit.c), where the wait happens with the GIL released and a waiter
returns to Python once, already durable. `ThreadGate` is the same protocol
in Python for a WAL used without the C core (the WAL's own tests, tools).

Linger (commits only): the threads a round released come back one at a
time (each needs the GIL for its next write), so the first back would sync
alone and groups of 16 writers would shrink to ~2. A leader elected while
threads of the last round are still out waits until the last of them is
back, at most min(max_linger, the mean duration of a round): PostgreSQL's
commit_delay/commit_siblings with the siblings counted instead of guessed.
One thread never lingers.

The C gate can also do a leader's round itself (pwrite + fdatasync of the
segment, no GIL): the WAL registers the segments and passes `io=True`; a
round it cannot do alone still comes back to the WAL. Its first I/O failure
is `RoundFailed`, raised to every commit not yet durable from then on.
Every publish of the log holds the gate's `publish_lock()`, which guards
`published` (the C leaders publish too).
"""

from __future__ import annotations

import threading
from time import monotonic
from typing import Callable, Protocol, runtime_checkable

__all__ = ["CommitGate", "RoundFailed", "Ticket", "ThreadGate"]

_SLICE = 0.2   # seconds a waiter sleeps before looking again (lets Ctrl-C through)


class RoundFailed(Exception):
    """A round written and synced in C failed: the OS error `err` (errno) on
    segment `seq`; `acked`: the durable LSN then (the acknowledged end),
    `handed`: the end of what may have reached the OS; `during_sync`: the
    fdatasync failed (else the pwrite). The WAL turns it into its failure."""

    def __init__(self, err: int, seq: int, acked: int, handed: int, during_sync: bool):
        super().__init__(f"WAL segment {seq}: {'fdatasync' if during_sync else 'pwrite'} failed "
                         f"(errno {err})")
        self.err, self.seq, self.acked, self.handed, self.during_sync = err, seq, acked, handed, during_sync


@runtime_checkable
class CommitGate(Protocol):
    """Group commit's coordination (see the module docstring)."""

    def reset(self, durable: int) -> None:
        """Everything below `durable` is durable; no commit may be in flight."""

    def ticket(self):
        """This thread's ticket: `start`, `target`, `granted`."""

    def wait(self, lsn: int, commit: bool, ticket, io: bool = False) -> bool:
        """False once `lsn` is durable; True if granted a round to lead (then
        `done` is owed). `commit` lets a leader linger for its siblings;
        `io`: the gate may do the round itself. ValueError if `lsn` is past
        the log's end; `RoundFailed` after a round done by the gate failed."""

    def publish_lock(self):
        """The lock every publish holds (a context manager)."""

    published: int
    """Everything below was handed to the OS (under `publish_lock`)."""

    def done(self, ticket, ok: bool) -> None:
        """The leader's round ended; `ok`: [start, target) is durable. A ticket
        not granted is ignored."""

    @property
    def durable(self) -> int:
        """Everything below is durable."""

    def stats(self) -> dict:
        """rounds, grouped, group_max, round_size, lingered (seconds)."""


class Ticket:
    """A thread's ticket: when `granted`, the range [start, target) it must make durable."""

    __slots__ = ("start", "target", "t0", "granted")

    def __init__(self):
        self.start = self.target = 0
        self.t0 = 0.0
        self.granted = False


class ThreadGate:
    """`CommitGate` on a `threading.Condition` (see the module docstring)."""

    def __init__(self, end_lsn: Callable[[], int], max_syncs: int = 1, max_linger: float = 0.002):
        self._end = end_lsn
        self.max_syncs = max(1, max_syncs)
        self.max_linger = max_linger
        lock = threading.Lock()
        self._cv = threading.Condition(lock)
        self._linger_cv = threading.Condition(lock)
        self._durable = self._sync_target = 0
        self._syncing = 0
        self._lingering = False
        self._in_flight = 0
        self._waiting: list = []         # [lsn, counted] of sleeping committers
        self._sync_mean = self._lingered = 0.0
        self._rounds = self._grouped = self._group_max = self._round_size = 0
        self._tls = threading.local()
        self._pub_lock = threading.Lock()
        self.published = 0

    @property
    def durable(self) -> int:
        """Everything below is durable."""
        return self._durable

    def reset(self, durable: int) -> None:
        """Everything below `durable` is durable (and published); no commit may be in flight."""
        with self._cv:
            self._durable = self._sync_target = durable
            self._in_flight = 0
        self.published = durable

    def publish_lock(self) -> threading.Lock:
        """The lock every publish of the log holds."""
        return self._pub_lock

    def ticket(self) -> Ticket:
        """This thread's ticket (reused)."""
        try:
            return self._tls.ticket
        except AttributeError:
            t = self._tls.ticket = Ticket()
            return t

    def wait(self, lsn: int, commit: bool, ticket: Ticket, io: bool = False) -> bool:
        """False once `lsn` is durable; True if granted a round to lead (`done` is then owed).
        ValueError if `lsn` is past the log's end. `io` is ignored: rounds are the WAL's."""
        cv = self._cv
        me = None
        with cv:
            if self._in_flight:
                self._in_flight -= 1
                if not self._in_flight and self._lingering:
                    self._linger_cv.notify()
            try:
                while True:
                    if self._durable >= lsn:
                        self._round_size += 1
                        self._grouped += 1
                        return False
                    if self._syncing < self.max_syncs and lsn > self._sync_target:
                        if lsn > self._end():
                            raise ValueError(f"lsn {lsn} is past the end of the log {self._end()}")
                        # granted before anything that may raise (the linger's
                        # wait): the caller's finally then reports the round
                        ticket.granted = True
                        self._syncing += 1
                        self._lead(commit, ticket)
                        return True
                    if me is None:
                        me = [lsn, False]
                        self._waiting.append(me)
                    cv.wait(_SLICE)
            finally:
                if me is not None:
                    self._waiting.remove(me)

    def _lead(self, commit: bool, ticket: Ticket) -> None:
        pause = min(self.max_linger, self._sync_mean)
        if commit and self._in_flight and not self._lingering and pause > 0:
            t0 = monotonic()
            self._lingering = True
            try:
                self._linger_cv.wait_for(lambda: not self._in_flight, pause)
            finally:
                self._lingering = False
                self._lingered += monotonic() - t0
        target = self._end()
        self._sync_target = max(self._sync_target, target)
        ticket.start, ticket.target, ticket.t0 = self._durable, target, monotonic()

    def done(self, ticket: Ticket, ok: bool) -> None:
        """The leader's round ended (`ok`: [start, target) is durable); wakes the waiters. A ticket
        not granted is ignored."""
        with self._cv:
            if not ticket.granted:
                return
            ticket.granted = False
            self._syncing -= 1
            if ok:
                self._sync_mean += (monotonic() - ticket.t0 - self._sync_mean) * 0.125
                if ticket.target > self._durable:
                    self._durable = ticket.target
                    self._rounds += 1
                    self._group_max = max(self._group_max, self._round_size)
                    self._round_size = 0
            else:
                self._sync_target = self._durable   # a later leader syncs this range again
            self._round_size += 1
            self._grouped += 1
            back = 1
            for entry in self._waiting:
                if not entry[1] and entry[0] <= self._durable:
                    entry[1] = True
                    back += 1
            self._in_flight = back if ok else 0
            self._cv.notify_all()

    def stats(self) -> dict:
        """rounds, grouped, group_max, round_size, lingered (seconds)."""
        return {"rounds": self._rounds, "grouped": self._grouped, "group_max": self._group_max,
                "round_size": self._round_size, "lingered": self._lingered}
