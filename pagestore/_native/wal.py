"""Replay's bulk scanner of WAL segments (ps_wal_scan, walscan.c).

`wal_scan` is handed to the WAL reader (wal/reader.py's `scan`) as an
explicit object: a `WalScanner`, callable as the reader calls a scanner,
whose `reads_sealed` says it also takes record-sealed segments.
"""

from __future__ import annotations

import threading

from . import ffi, lib
from .capabilities import CAPABILITIES

__all__ = ["WAL_SCAN_CHUNK", "WalScanner", "wal_scan"]

WAL_SCAN_CHUNK = 4 << 20


def _scan(buf, base_lsn: int, offset: int, segment_size: int, cap: int = WAL_SCAN_CHUNK,
          key=None, salt=None):
    """The valid prefix of simple records of one WAL segment: PUT/DELETE with
    txid 0, and whole transactions written in one piece (their operations up to
    and including the COMMIT whose nops matches; see ps_wal_scan in walscan.c).

    `buf` is the segment (segment_size bytes), `base_lsn` the LSN of its byte 0,
    `offset` where the reader would read next. Returns (count, raw, end_offset):
    `count` records consumed (COMMITs included), `raw` the operations among them
    with block headers removed (at most `cap` bytes, the input of
    `Core.apply_log`), `end_offset` where the reader goes on. The C scanner
    applies the validity rule of docs/wal-format.md and stops before the first
    record that is invalid, not simple, or too big for `cap`; the Python reader
    decides everything at that point. A record or transaction too big for
    `cap` at `offset` is scanned again with room for the whole segment.

    With `key` (32 bytes) and `salt` (8, the segment header's) it reads a
    record-sealed segment (wal/recseal.py; its header's key check is the
    caller's): a record must also authenticate, and `raw` holds the records
    in plaintext form, as `record_opener` returns them. Without libcrypto
    (`CAPABILITIES.gcm` false) it takes nothing: (0, b"", offset).
    """
    if key is not None:
        if len(key) != 32 or salt is None or len(salt) != 8:
            raise ValueError("a sealed WAL scan needs a 32-byte key and an 8-byte salt")
        if not CAPABILITIES.gcm:
            return 0, b"", offset
    if cap > WAL_SCAN_CHUNK:
        scratch = bytearray(cap)               # a rare big transaction: not kept
    else:
        # One scratch per thread, reused: the scanner runs before every record
        # the Python reader takes, and a fresh 4 MiB bytearray per call (it is
        # zeroed) cost 40 us a record, 25x the replay itself.
        scratch = getattr(_scan_tls, "buf", None)
        if scratch is None or len(scratch) < cap:
            scratch = _scan_tls.buf = bytearray(cap)
    out_len = ffi.new("size_t *")
    end = ffi.new("uint64_t *")
    big = ffi.new("int *")
    with ffi.from_buffer(buf) as src:
        if len(src) < segment_size:
            raise ValueError(f"segment buffer of {len(src)} bytes, segment_size {segment_size}")
        n = lib.ps_wal_scan(src, segment_size, base_lsn, offset, ffi.from_buffer(scratch), cap,
                            out_len, end, big, ffi.NULL if key is None else bytes(key),
                            ffi.NULL if salt is None else bytes(salt))
    if n == 0 and big[0] and cap < segment_size:
        return _scan(buf, base_lsn, offset, segment_size, segment_size, key=key, salt=salt)
    if n < 0:
        raise ValueError(f"bad WAL scan arguments (status {n})")
    return n, bytes(memoryview(scratch)[:out_len[0]]), end[0]


_scan_tls = threading.local()


class WalScanner:
    """The C scanner as the WAL reader takes it: `scanner(buf, base_lsn,
    offset, segment_size, key=None, salt=None) -> (count, raw, end_offset)`
    (see `_scan`). `reads_sealed` is True: with a record-sealed segment's key
    and salt it returns the records in plaintext form."""

    reads_sealed = True

    __call__ = staticmethod(_scan)

    def __repr__(self) -> str:
        return "<WalScanner ps_wal_scan>"


#: the scanner of this process (callable like a function)
wal_scan = WalScanner()
