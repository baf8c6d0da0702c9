"""`Committing`: the WAL's durability per mode and its group-commit rounds.

A base class of `Wal` (wal/log.py), kept apart for size; it runs on the
Wal's state (gate, segments, publish lock, failure). `commit(lsn)` is the
mode's: nothing (log_only/background on a shared mapping), a publish (on
the simulator), or a group commit (fsync): the gate (wal/gate.py) elects
a leader who makes [start, target) durable while the others wait.

Rounds in C: in fsync mode on posix files with the pwrite path (records not
sealed in Python), the segments the encoder writes are registered with the
C gate (`_register`), and an elected leader pwrites + fdatasyncs its round
there, without coming back to Python, while no crash point is armed: a
durable put is then one call, the core's write and the gate's wait
together (`WaitedWrites`). Every other round (two
segments, zeros being written ahead by the grower, a crash point armed)
takes the Python path (`_round`). Both publish under the gate's publish
lock, which also guards `published`; the gate keeps `durable`. A round that
failed in C is `RoundFailed`, recorded as the log's failure (`round_failed`).
"""

from __future__ import annotations

import os

from pagestore.diskio.errors import make_error

from .gate import RoundFailed

__all__ = ["Committing", "WaitedWrites"]


class Committing:
    """Commit, flush and group-commit rounds of `Wal` (see the module docstring)."""

    __slots__ = ()

    # -- commit per mode ---------------------------------------------------------------
    def _commit_nothing(self, lsn: int) -> None:
        """log_only/background on posix: the record already sits in the page cache."""

    def _commit_publish(self, lsn: int) -> None:
        """log_only/background on the simulator: hand the new bytes to the OS."""
        if lsn > self._published:
            self._publish_upto(self._end_lsn())

    def _commit_fsync(self, lsn: int) -> None:
        """fsync: return once `lsn` is durable; concurrent callers share fsyncs."""
        if lsn > self._gate.durable:
            self._flush(lsn, linger=True)
        else:
            self._already += 1  # covered by a round it did not wait for (unlocked: a statistic)

    def flush(self, lsn: int | None = None) -> int:
        """Make the log durable up to `lsn` (default: all written); returns the durable LSN."""
        self._flush(self._end_lsn() if lsn is None else lsn)
        return self._gate.durable

    def _flush(self, lsn: int, linger: bool = False) -> None:
        """Group commit: lead a sync round or wait, in the gate, for one that covers `lsn`.

        The gate (wal/gate.py) elects at most `max_syncs` leaders at once; a
        leader syncs [start, target) and reports back, whatever happened (a
        KeyboardInterrupt included), or every later commit would wait for a
        round no one leads. On failure every waiter retries and meets the
        error itself as the next leader.
        """
        gate = self._gate
        ticket = gate.ticket()
        # a round in C passes no crash point: not while one is armed
        self._lead_or_wait(gate.wait, (lsn, linger, ticket, self._io and not self.fs.crash_points_armed),
                     ticket)

    def finish_waited(self, rc: int, lsn: int, ticket, commit: bool) -> None:
        """The rest of a commit whose first wait ran in the same C call as its
        write (`WaitedWrites`), `rc` that wait's outcome: lead the round it
        was granted, or wait on, as `_flush` would have."""
        self._lead_or_wait(self._gate.outcome,
                     (rc, lsn, commit, ticket, self._io and not self.fs.crash_points_armed), ticket)

    def _lead_or_wait(self, wait, args, ticket) -> None:
        # `wait(*args)` says whether this thread leads a round (the gate's wait)
        ok = False
        try:
            try:
                if not wait(*args):
                    return
            except RoundFailed as failed:
                raise self.round_failed(failed) from None
            self._round(ticket)
            ok = True
        finally:
            # granted is set before the wait returns: an interrupt on the way
            # back from it still reports the round (done ignores a ticket
            # that was not granted)
            if ticket.granted:
                self._gate.done(ticket, ok)
        self._after_round()

    def waited_writes(self, core) -> "WaitedWrites | None":
        """Writes of `core` that wait for their commit in the same C call, or
        None when the gate cannot (a gate without `writes`)."""
        return WaitedWrites(self, self._gate, self._io, core) if hasattr(self._gate, "writes") else None

    def lead_round(self, ticket) -> None:
        """Do the round the gate granted `ticket` on the Python path (one the C
        syncer of pagestore.aio hands over), and report it to the gate
        whatever happens."""
        ok = False
        try:
            self._round(ticket)
            ok = True
        finally:
            if ticket.granted:
                self._gate.done(ticket, ok)
        self._after_round()

    def _round(self, ticket) -> None:
        self.fs.crash_point("wal.round_elected")
        self._sync_range(ticket.start, ticket.target)

    def _after_round(self) -> None:
        if self._pwrite and self._durable // self.segment_size > self._released:
            self._release_written()

    def syncer_gate(self):
        """The C gate when its rounds can run in C and no crash point is armed
        (pagestore.aio's syncer then runs in C), else None."""
        return self._gate if self._io and not self.fs.crash_points_armed else None

    def _release_written(self) -> None:
        """pwrite path: drop the buffers of segments wholly below `durable`.

        They are written and synced, and the encoder has moved on. Under
        `_pub_lock`, so no publish is reading them (a later publish starts
        at `published` >= `durable`); first the C gate forgets them, once
        no round in C uses them (before the lock, which such a round takes).
        """
        if self._io:
            self._gate.io_forget(self._durable // self.segment_size)
        with self._pub_lock:
            upto = self._durable // self.segment_size
            if upto > self._released:
                self._segs.release(upto)
                self._released = upto

    def _register(self, seq: int, buf) -> None:
        if self._io:
            self._gate.io_segment(seq, self._segs.live[seq].file.fileno(), buf)

    @property
    def _published(self) -> int:
        # the gate keeps it: its C leaders publish too (under the publish lock)
        return self._gate.published

    @_published.setter
    def _published(self, lsn: int) -> None:
        self._gate.published = lsn

    @property
    def _durable(self) -> int:
        return self._gate.durable


    def round_failed(self, failed: RoundFailed) -> BaseException:
        """A round written in C failed: record it as the log's failure (as the
        Python path does) and return that failure, for the caller to raise."""
        live = self._segs.live.get(failed.seq)
        path = live.file.path if live is not None else self.dir
        what = "fdatasync" if failed.during_sync else "pwrite"
        self._fail(make_error(failed.err, f"{what} of the WAL: {os.strerror(failed.err)}", path), failed.acked)
        with self._pub_lock:
            self._handed_end = max(self._handed_end, failed.handed)
        return self._failure

    def durable_cell(self):
        """The C gate's cell holding the durable LSN (see `GroupCommit.durable_cell`),
        or None with a Python gate."""
        cell = getattr(self._gate, "durable_cell", None)
        return cell() if cell is not None else None

    def _io_off(self) -> None:
        # no round in C from now on, and none using a segment file or buffer
        if self._io:
            self._gate.io_enable(False)
            self._gate.io_forget()


class WaitedWrites:
    """A put or delete and its commit's first wait in one call into the C gate
    (`GroupCommit.writes`): a durable write releases the GIL once, not once
    for the write and again for the wait.

    `flags(sync)` is 0 where the two-step way (the core's write, then the
    WAL's `commit` or `flush`) must be taken: a write not durable by mode
    and without `sync`, or a `sync=True` write while a crash point is armed
    (the store's "wal.sync_write_logged" lies between its two steps). Else
    the caller calls `put`/`delete` with those flags and its `ticket()`; a
    nonzero outcome (a round to lead, a slice run out, a failure) goes to
    `finish(rc, ticket.lsn, ticket, sync)`, which raises as the WAL's commit.
    """

    __slots__ = ("put", "delete", "ticket", "always", "_wal", "_fs", "_flags", "_done")

    def __init__(self, wal: "Committing", gate, io: bool, core):
        self.put, self.delete = gate.writes(core)
        self.ticket = gate.ticket
        self._done = gate.done
        self._wal, self._fs = wal, wal.fs
        self.always = wal.mode == "fsync"      # every commit waits (fsync mode)
        f = gate.wait_flags
        # (commit, rounds in C allowed), (commit, a crash point armed), (sync=True)
        self._flags = (f(True, io), f(True, False), f(False, io))

    def flags(self, sync: bool) -> int:
        """The first wait's flags for a write (see the class docstring), 0: two steps."""
        armed = self._fs.crash_points_armed
        if sync:
            return 0 if armed else self._flags[2]
        if not self.always:
            return 0
        return self._flags[1] if armed else self._flags[0]

    def finish(self, rc: int, lsn: int, ticket, sync: bool) -> None:
        """The rest of the commit after a nonzero outcome `rc` of `put`/`delete`."""
        self._wal.finish_waited(rc, lsn, ticket, not sync)

    def release(self, ticket) -> None:
        """Report a round `ticket` was granted and that was not led (an
        interrupt came first): the waiters retry, and one of them leads it."""
        self._done(ticket, False)
