"""`GroupCommit`: the C group commit of csrc/gcommit.c (ps_gcommit.h).

Implements the WAL's `CommitGate` protocol (wal/gate.py): `wait` sleeps in
C with the GIL released (cffi drops it around the call) until the commit's
LSN is durable or this thread is elected to lead a round; a follower
returns to Python once, covered. The wait is cut into slices so a main
thread blocked in it still sees Ctrl-C.
"""

from __future__ import annotations

import threading

from . import PS_E_NOMEM, ffi, lib

__all__ = ["GroupCommit"]

_DURABLE, _LEAD, _AGAIN, _PAST_END = lib.PS_GC_DURABLE, lib.PS_GC_LEAD, lib.PS_GC_AGAIN, lib.PS_GC_PAST_END
_FIRST, _LINGER = lib.PS_GC_FIRST, lib.PS_GC_LINGER
_SLICE_NS = 200_000_000


class GroupCommit:
    """Group commit over the log whose end LSN is the uint64 at `end_ptr`
    (the core's `signals.wal_end_lsn`); `owner` keeps that memory alive."""

    def __init__(self, end_ptr, owner=None, max_syncs: int = 1, max_linger: float = 0.002):
        out = ffi.new("ps_gcommit **")
        rc = lib.ps_gc_create(end_ptr, 0, max(1, max_syncs), int(max_linger * 1e9), out)
        if rc:
            raise MemoryError("cannot create the group commit") if rc == PS_E_NOMEM \
                else ValueError(f"bad group commit parameters (status {rc})")
        self._owner = owner
        self._end = end_ptr
        self._g = ffi.gc(out[0], lib.ps_gc_destroy)
        self._tls = threading.local()
        self.max_syncs = max(1, max_syncs)

    @classmethod
    def for_core(cls, core, **kw) -> "GroupCommit":
        """The group over `core`'s WAL encoder (its end LSN in the core's signals)."""
        return cls(ffi.addressof(core.signals[0], "wal_end_lsn"), owner=core, **kw)

    def reset(self, durable: int) -> None:
        """Everything below `durable` is durable; no commit may be in flight."""
        lib.ps_gc_reset(self._g, durable)

    def ticket(self):
        """This thread's ticket (reused): pass it to `wait`; `ticket.granted`
        says a round is owed (`done`), even after an interrupted return."""
        try:
            return self._tls.ticket
        except AttributeError:
            t = self._tls.ticket = ffi.new("ps_gc_ticket *")
            return t

    def wait(self, lsn: int, commit: bool, ticket) -> bool:
        """False once `lsn` is durable; True if this thread leads a round
        ([ticket.start, ticket.target)); ValueError past the log's end."""
        g, flags = self._g, _FIRST | _LINGER if commit else _FIRST
        rc = lib.ps_gc_wait(g, lsn, flags, _SLICE_NS, ticket)
        while rc == _AGAIN:
            rc = lib.ps_gc_wait(g, lsn, flags & ~_FIRST, _SLICE_NS, ticket)
        if rc == _DURABLE:
            return False
        if rc == _LEAD:
            return True
        raise ValueError(f"lsn {lsn} is past the end of the log {self._end[0]}")

    def done(self, ticket, ok: bool) -> None:
        """The leader's round ended; `ok`: [start, target) is durable. A ticket
        not granted is ignored, so a `finally` may call it unconditionally."""
        lib.ps_gc_done(self._g, ticket, 1 if ok else 0)

    @property
    def durable(self) -> int:
        """Everything below is durable."""
        return lib.ps_gc_durable(self._g)

    def stats(self) -> dict:
        """rounds, grouped, group_max, round_size, lingered (seconds), waiting."""
        s = ffi.new("ps_gc_stats *")
        lib.ps_gc_stats_get(self._g, s)
        return {"rounds": s.rounds, "grouped": s.grouped, "group_max": s.group_max,
                "round_size": s.round_size, "lingered": s.lingered_ns / 1e9, "waiting": s.waiting}
