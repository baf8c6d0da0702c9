"""`GroupCommit`: the C group commit of csrc/gcommit.c (ps_gcommit.h).

Implements the WAL's `CommitGate` protocol (wal/gate.py): `wait` sleeps in
C with the GIL released (cffi drops it around the call) until the commit's
LSN is durable or this thread is elected to lead a round; a follower
returns to Python once, covered. The wait is cut into slices so a main
thread blocked in it still sees Ctrl-C.

Rounds in C (`io_enable`, `io_segment`): when the WAL allows it and the
caller passes `io=True`, an elected leader writes and syncs the round's
blocks itself, in C, and `wait` returns False to it as to a follower. A
round C cannot do alone comes back as True, for the WAL's own path; a C
I/O failure raises `wal.gate.RoundFailed`.

`writes(core)`: a durable put or delete and its first wait in one C call
(ps_gc_put, ps_gc_delete), so the GIL is let go once per durable write;
what the wait did not settle goes on through `outcome`.
"""

from __future__ import annotations

import threading

from pagestore.wal.gate import RoundFailed

from . import PS_E_NOMEM, PS_E_NOT_FOUND, ffi, lib

__all__ = ["GroupCommit"]

_DURABLE, _LEAD, _AGAIN, _PAST_END = lib.PS_GC_DURABLE, lib.PS_GC_LEAD, lib.PS_GC_AGAIN, lib.PS_GC_PAST_END
_IO_FAILED = lib.PS_GC_IO_FAILED
_FIRST, _LINGER, _IO, _PY = lib.PS_GC_FIRST, lib.PS_GC_LINGER, lib.PS_GC_IO, lib.PS_GC_PY
_SLICE_NS = 200_000_000


class _PublishLock:
    """The group's publish lock (a C mutex the C leaders take too), as a context manager."""

    __slots__ = ("_g",)

    def __init__(self, g):
        self._g = g

    def __enter__(self):
        lib.ps_gc_pub_lock(self._g)      # GIL released while it waits
        return self

    def __exit__(self, *exc):
        lib.ps_gc_pub_unlock(self._g)
        return False


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
        self._durable = lib.ps_gc_durable_ptr(self._g)
        self._tls = threading.local()
        self._bufs: dict = {}            # seq -> the registered buffer's cffi view (kept alive)
        self._bufs_lock = threading.Lock()
        self._pub_lock = _PublishLock(self._g)
        self.max_syncs = max(1, max_syncs)

    @classmethod
    def for_core(cls, core, **kw) -> "GroupCommit":
        """The group over `core`'s WAL encoder (its end LSN in the core's signals)."""
        return cls(ffi.addressof(core.signals[0], "wal_end_lsn"), owner=core, **kw)

    def reset(self, durable: int) -> None:
        """Everything below `durable` is durable (and published); no commit may be in flight."""
        lib.ps_gc_reset(self._g, durable)

    def ticket(self):
        """This thread's ticket (reused): pass it to `wait`; `ticket.granted`
        says a round is owed (`done`), even after an interrupted return."""
        try:
            return self._tls.ticket
        except AttributeError:
            t = self._tls.ticket = ffi.new("ps_gc_ticket *")
            return t

    def wait(self, lsn: int, commit: bool, ticket, io: bool = False, first: bool = True) -> bool:
        """False once `lsn` is durable; True if this thread leads a round
        ([ticket.start, ticket.target)) that Python must do; ValueError past
        the log's end; `RoundFailed` after a round written in C failed.
        `io`: a round this thread leads may be written and synced in C;
        `first`: False when the commit already waited once (`outcome`)."""
        g, flags = self._g, self.wait_flags(commit, io)
        rc = lib.ps_gc_wait(g, lsn, flags if first else flags & ~_FIRST, _SLICE_NS, ticket)
        while rc == _AGAIN:
            rc = lib.ps_gc_wait(g, lsn, flags & ~_FIRST, _SLICE_NS, ticket)
        return self._verdict(rc, lsn)

    def _verdict(self, rc: int, lsn: int) -> bool:
        """A settled wait's code as `wait` returns it: False durable, True lead; raises."""
        if rc == _DURABLE:
            return False
        if rc == _LEAD:
            return True
        if rc == _IO_FAILED:
            raise self.failure()
        raise ValueError(f"lsn {lsn} is past the end of the log {self._end[0]}")

    def writes(self, core):
        """(put, delete): `core`'s write and this group's wait in one C call
        (ps_gc_put / ps_gc_delete), so a durable write releases the GIL once.

        `put(key, value, flags, ticket)` and `delete(key, flags, ticket)` take
        bytes keys and values, `flags` from `wait_flags`, and this thread's
        `ticket()`. They raise as `core.put` / `core.delete` when the write
        failed (nothing written, nothing waited for); delete returns -1 for
        an absent key. Otherwise they return the wait's outcome with the
        record's end LSN in `ticket.lsn`: 0 once durable, or a code for
        `outcome` (a round this thread must lead, a slice run out, a failure).
        """
        c, g, raise_ = core.pointer, self._g, core.raise_status
        _put, _delete, NOT_FOUND = lib.ps_gc_put, lib.ps_gc_delete, PS_E_NOT_FOUND

        def put(key, value, flags, ticket):
            """Insert or replace, then wait (see `writes`)."""
            r = _put(g, c, key, len(key), value, len(value), flags, _SLICE_NS, ticket)
            if r >= 0:
                return r
            raise_(r, len(key), len(value))

        def delete(key, flags, ticket):
            """Remove, then wait (see `writes`); -1 if the key was absent."""
            r = _delete(g, c, key, len(key), flags, _SLICE_NS, ticket)
            if r >= 0:
                return r
            if r == NOT_FOUND:
                return -1
            raise_(r, len(key))

        return put, delete

    @staticmethod
    def wait_flags(commit: bool, io: bool) -> int:
        """The flags of a first wait as `wait(lsn, commit, ticket, io)` passes them."""
        return (_FIRST | _LINGER if commit else _FIRST) | (_IO if io else 0) | _PY

    def outcome(self, rc: int, lsn: int, commit: bool, ticket, io: bool) -> bool:
        """What `wait` would have returned, from the first wait's code `rc`
        (a `writes` call's): False once durable (waiting again if the slice
        ran out), True for a round this thread must lead; raises as `wait`."""
        if rc == _AGAIN:
            return self.wait(lsn, commit, ticket, io, first=False)
        return self._verdict(rc, lsn)

    def done(self, ticket, ok: bool) -> None:
        """The leader's round ended; `ok`: [start, target) is durable. A ticket
        not granted is ignored, so a `finally` may call it unconditionally."""
        lib.ps_gc_done(self._g, ticket, 1 if ok else 0)

    @property
    def durable(self) -> int:
        """Everything below is durable."""
        return self._durable[0]

    def durable_cell(self):
        """The durable LSN's C cell (`const volatile uint64_t *`, only grows),
        for C code that reads it without a call: in fsync mode it is the
        acknowledged end."""
        return self._durable

    # -- rounds in C -----------------------------------------------------------
    def io_enable(self, on: bool, segment_size: int = 0, direct: bool = False) -> None:
        """Let leaders that pass io=True do their rounds in C (segments of
        `segment_size`, O_DIRECT files if `direct`); off waits for rounds in flight."""
        if lib.ps_gc_io_enable(self._g, 1 if on else 0, segment_size, 1 if direct else 0):
            raise ValueError(f"bad segment size {segment_size} for rounds in C")

    def io_segment(self, seq: int, fd: int, buffer) -> None:
        """Register segment `seq`: its file descriptor and the writable buffer
        the encoder fills (kept alive here until forgotten)."""
        view = ffi.from_buffer(buffer, require_writable=True)
        if lib.ps_gc_io_segment(self._g, seq, fd, ffi.cast("uint8_t *", view)):
            raise ValueError(f"cannot register WAL segment {seq} (fd {fd})")
        with self._bufs_lock:
            self._bufs = {s: v for s, v in self._bufs.items() if s > seq - 2}
            self._bufs[seq] = view

    def io_zeroing(self, seq: int, on: bool) -> None:
        """The WAL's grower writes zeros ahead in segment `seq` (or stopped):
        meanwhile that segment's rounds go to the WAL's own path."""
        lib.ps_gc_io_zeroing(self._g, seq, 1 if on else 0)

    def io_forget(self, before_seq: int = 2**64 - 1) -> None:
        """Forget the registered segments below `before_seq` (all by default),
        once no C round uses them: their buffers and files may then go."""
        lib.ps_gc_io_forget(self._g, min(before_seq, 2**64 - 1))
        with self._bufs_lock:
            self._bufs = {s: v for s, v in self._bufs.items() if s >= before_seq}

    def publish_lock(self) -> _PublishLock:
        """The lock every publish of the log holds (C rounds take it too)."""
        return self._pub_lock

    @property
    def published(self) -> int:
        """Everything below was handed to the OS (read and set under `publish_lock`)."""
        return lib.ps_gc_published(self._g)

    @published.setter
    def published(self, lsn: int) -> None:
        lib.ps_gc_set_published(self._g, lsn)

    def failure(self) -> RoundFailed | None:
        """The first failure of a round written in C, or None."""
        f = ffi.new("ps_gc_io_failure *")
        lib.ps_gc_io_failure_get(self._g, f)
        if not f.err:
            return None
        return RoundFailed(f.err, f.seq, f.acked, f.handed, bool(f.during_sync))

    # -- the asyncio syncer -------------------------------------------------------
    def syncer(self, efd: int, slice_s: float, ticket) -> str:
        """Run the syncer (ps_gc_syncer) until it has something for Python:
        "again" (the slice ran out idle), "lead" (a round for Python: do it,
        then `done`), "stopped"; raises `RoundFailed`."""
        rc = lib.ps_gc_syncer(self._g, efd, int(slice_s * 1e9), ticket)
        if rc == _AGAIN:
            return "again"
        if rc == _LEAD:
            return "lead"
        if rc == _DURABLE:
            return "stopped"
        raise self.failure() or RoundFailed(5, 0, self.durable, self.durable, False)

    def kick(self) -> None:
        """Wake the syncer: a write wants to be durable."""
        lib.ps_gc_kick(self._g)

    def go(self) -> None:
        """The writers the syncer's last round released have written again:
        its next round may start (it lingers for this, as a leader does)."""
        lib.ps_gc_go(self._g)

    def syncer_idle_cell(self):
        """The syncer's "asleep" flag (`const volatile int *`): a writer that
        reads it after its write calls `kick` only when it is set."""
        return lib.ps_gc_syncer_idle_ptr(self._g)

    def syncer_stop(self, stop: bool = True) -> None:
        """Ask the syncer to make everything written durable and return (or allow it to run again)."""
        lib.ps_gc_syncer_stop(self._g, 1 if stop else 0)

    def set_spin(self, seconds: float) -> None:
        """How long a covered committer at the head of the ready queue waits,
        spinning, for a caller from Python to pass it the GIL before it
        returns on its own (default 50 us; ps_gcommit.h, "The GIL baton")."""
        lib.ps_gc_set_spin(self._g, max(0, int(seconds * 1e9)))

    def stats(self) -> dict:
        """rounds, grouped, group_max, round_size, lingered (seconds), waiting,
        handoffs and spin_outs (the GIL's turns, see `wait_flags`),
        and the rounds done in C: io_rounds, io_fsyncs, io_pwrites, io_pwrite_bytes."""
        s = ffi.new("ps_gc_stats *")
        lib.ps_gc_stats_get(self._g, s)
        io = ffi.new("ps_gc_io_stats *")
        lib.ps_gc_io_stats_get(self._g, io)
        return {"rounds": s.rounds, "grouped": s.grouped, "group_max": s.group_max,
                "round_size": s.round_size, "lingered": s.lingered_ns / 1e9, "waiting": s.waiting,
                "handoffs": s.handoffs, "spin_outs": s.spin_outs,
                "io_rounds": io.rounds, "io_fsyncs": io.fsyncs, "io_pwrites": io.pwrites,
                "io_pwrite_bytes": io.pwrite_bytes}
