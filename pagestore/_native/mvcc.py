"""The snapshot and validated-commit calls of a `Core` (mvcc.c).

A snapshot is a handle into the core's undo log (csrc/mvcc.c explains the
log); these methods turn its statuses into errors: PS_E_SNAP_OLD into
`SnapshotTooOldError`, PS_E_CONFLICT into `ConflictError`, the rest as every
Core call does (`Retry` for a read or commit the caller may retry after
making room). Snapshot scans return the tree's batch and the overlay of keys
changed since the snapshot; `pagestore.snapshot` merges them.
"""

from __future__ import annotations

import pickle

from .. import errors as _errors
from . import MAX_KEY, PS_E_NEED_SPACE, PS_E_NOT_FOUND, ffi, lib

__all__ = ["SnapshotHooks"]

_GET_BUF = 4096
_SCAN_CHUNK = 128 << 10
_INFO_FIELDS = tuple(name for name, _ in ffi.typeof("ps_snap_info").fields)


class SnapshotHooks:
    """Mixed into `Core`: needs its `_c` (the core pointer), `_tls` and `_raise`."""

    def _snap_raise(self, rc: int, key_len: int = 0):
        if rc == lib.PS_E_SNAP_OLD:
            raise _errors.SnapshotTooOldError(
                "the snapshot was dropped: the writes since it was taken outgrew the "
                "'snapshot_memory' option (take a new snapshot, or raise the option)")
        if rc == lib.PS_E_CONFLICT:
            raise _errors.ConflictError(
                "the transaction read keys that another commit changed after it read them; "
                "nothing of it was applied (run it again)")
        self._raise(rc, key_len)

    def snap_open(self, limit: int) -> int:
        """A new snapshot's handle; the undo log it pins is bounded by `limit` bytes."""
        r = lib.ps_snap_open(self._c, limit)
        if r < 0:
            self._snap_raise(r)
        return r

    def keep_unacknowledged(self, cell=None, owner=None) -> None:
        """From now on every write keeps its before-image until the acknowledged
        end covers its record, so `fence` can undo it (undolog.c). The end is
        read from `cell` (a uint64 pointer that only grows, kept alive by
        `owner`, e.g. the group commit's durable LSN), else advanced by `acknowledge`."""
        # C reads the cell for as long as the core lives: hold what owns it
        self._acked = ffi.new("uint64_t *") if cell is None else ffi.cast("uint64_t *", cell)
        self._acked_owner = owner
        rc = lib.ps_undo_keep(self._c, self._acked)
        if rc:
            self._raise(rc)

    def acknowledge(self, lsn: int) -> None:
        """Every write whose records end at or before `lsn` is acknowledged by the log."""
        acked = self._acked
        if lsn > acked[0]:      # unlocked: a racing smaller store only keeps images longer
            acked[0] = lsn

    def fence(self, acked_end: int | None) -> int:
        """The log failed: undo every write whose records end past `acked_end`
        (None: none) and refuse writes from now on; returns the WAL's end then."""
        r = lib.ps_wal_fence(self._c, (1 << 64) - 1 if acked_end is None else acked_end)
        if r < 0:
            self._raise(r)
        return r

    def snap_close(self, snap: int) -> None:
        """End a snapshot (too old or not); a store closed meanwhile already ended it."""
        lib.ps_snap_close(self._c, snap)

    def snap_get(self, snap: int, key: bytes):
        """The value of key as of the snapshot, or None."""
        tls = self._tls
        try:
            buf = tls.snap_gbuf
        except AttributeError:
            buf = tls.snap_gbuf = ffi.new("char[]", _GET_BUF)
        n = lib.ps_snap_get(self._c, snap, key, len(key), buf, _GET_BUF)
        if n > _GET_BUF:
            # a snapshot's value never changes: one retry with its size is enough
            buf = ffi.new("char[]", n)
            n = lib.ps_snap_get(self._c, snap, key, len(key), buf, n)
        if n >= 0:
            return ffi.unpack(buf, n)
        if n == PS_E_NOT_FOUND:
            if len(key) > MAX_KEY:      # the core says "not found"; refused as ps_get refuses it
                self._raise(lib.PS_E_TOO_LARGE, len(key))
            return None
        self._snap_raise(n, len(key))

    def snap_scan_batch(self, snap: int, lo, lo_incl, hi, hi_incl, reverse, max_bytes):
        """(items, overlay): the tree's batch now, as `scan_batch`, and the keys within
        the bounds changed since the snapshot with their values then (None: absent)."""
        tls = self._tls
        max_bytes = min(max_bytes, _SCAN_CHUNK)
        cap = max(64 << 10, 2 * max_bytes + 4096)
        buf = getattr(tls, "snap_sbuf", None)
        if buf is None or len(buf) < cap:
            buf = tls.snap_sbuf = ffi.new("char[]", cap)
            tls.snap_ovl = ffi.new("char[]", 4096)
            tls.snap_lens = ffi.new("size_t[2]")
        ovl, lens = tls.snap_ovl, tls.snap_lens
        while True:
            n = lib.ps_snap_scan(self._c, snap, b"" if lo is None else lo, 0 if lo is None else len(lo),
                                 lo is not None, bool(lo_incl),
                                 b"" if hi is None else hi, 0 if hi is None else len(hi),
                                 hi is not None, bool(hi_incl), bool(reverse), max_bytes,
                                 buf, len(buf), lens, ovl, len(ovl), lens + 1)
            if n >= 0:
                items = pickle.loads(ffi.buffer(buf, lens[0]))
                return items, (pickle.loads(ffi.buffer(ovl, lens[1])) if lens[1] else ())
            if n != PS_E_NEED_SPACE:
                self._snap_raise(n)
            if lens[1] > len(ovl):
                ovl = tls.snap_ovl = ffi.new("char[]", lens[1] + 4096)
            else:
                buf = tls.snap_sbuf = ffi.new("char[]", lens[0] + 4096)

    def snap_count(self, snap: int) -> int:
        """The number of keys as of the snapshot."""
        n = lib.ps_snap_count(self._c, snap)
        if n < 0:
            self._snap_raise(n)
        return n

    def snap_stats(self) -> dict:
        """open, oldest_age_ns, bytes, entries, too_old (mvcc.c's ps_snap_info)."""
        info = ffi.new("ps_snap_info *")
        rc = lib.ps_snap_stats(self._c, info)
        if rc:
            self._snap_raise(rc)
        return {name: getattr(info, name) for name in _INFO_FIELDS}

    def txn_commit(self, snap: int, reads: bytes, ops: bytes, txid: int = 0) -> int:
        """apply_batch(ops) only if nothing `reads` names changed since snapshot
        `snap`, checked in the same hold; ConflictError otherwise (nothing applied)."""
        r = lib.ps_txn_commit(self._c, snap, reads, len(reads), ops, len(ops), txid)
        if r >= 0:
            return r
        self._snap_raise(r)
