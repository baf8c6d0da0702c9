"""`Core`: one C core — page memory, B+tree, WAL encoder and checkpoint hooks.

Binds core.c, btree.c, pagemem.c and walenc.c's encoder (csrc/ps_api.h has
each call's contract: lock, callbacks, return, ownership). Arguments are
checked before crossing into C; C statuses become errors of
`pagestore.errors` (`_raise`), or `Retry` for the writes the core rolled
back and the caller may retry after making room.

Hot paths (`get`, `put`, `delete`) are closures bound per Core with the C
function, the core pointer and a per-thread output buffer in locals: one C
call and one `ffi.unpack` per `get`. `close()` must not race with calls.
"""

from __future__ import annotations

import pickle
import threading

from .. import errors as _errors
from . import (CODEC_DISABLED, CODEC_SKIP_GARBAGE, MAX_PAGE_SIZE, MAX_VALUE, MIN_PAGE_SIZE,
               PS_E_CKPT_FULL, PS_E_CLOSED, PS_E_CORRUPT, PS_E_NEED_SPACE, PS_E_NOMEM,
               PS_E_NOT_FOUND, PS_E_TOO_LARGE, PS_E_ARG, PS_E_WAL_FULL, PS_OK, ffi, lib)
from .batches import unpack_ops
from .buffers import pin, u64_array
from .callbacks import Callbacks, take_error
from .checkpointing import CheckpointHooks
from .mvcc import SnapshotHooks
from .status import NativeError, Retry

__all__ = ["Core", "SNAPSHOT_CODECS", "too_large"]

# PAGE_SNAPSHOT codecs the C encoder applies (physical_wal): the names of
# recovery_compression. "disabled" logs whole images; every other name drops
# the zeroed free gap (skip_garbage, codec byte 0x81). The general codecs
# (snappy, zstd, lz4) are Python-side and not applied to WAL page images.
SNAPSHOT_CODECS = {"disabled": CODEC_DISABLED, "skip_garbage": CODEC_SKIP_GARBAGE,
                   "snappy": CODEC_SKIP_GARBAGE, "zstd": CODEC_SKIP_GARBAGE,
                   "lz4": CODEC_SKIP_GARBAGE}

_GET_BUF = 64 << 10
_SCAN_CHUNK = 128 << 10
_SIGNAL_FIELDS = tuple(name for name, _ in ffi.typeof("ps_signals").fields)
_VERIFY_FIELDS = tuple(name for name, _ in ffi.typeof("ps_verify_info").fields)


def too_large(key_len: int, value_len: int, max_key: int, page_size: int) -> _errors.Error:
    """The error of a write of these sizes that the core refuses as too large
    (PS_E_TOO_LARGE): a value over MAX_VALUE, else a key over `max_key` (the
    longest key of a core of `page_size`-byte pages), else a record larger
    than one WAL segment. Transactions raise it too, before their commit."""
    if value_len > MAX_VALUE:
        return _errors.ValueTooLargeError(f"value of {value_len} bytes (MAX_VALUE {MAX_VALUE})")
    if key_len > max_key:
        return _errors.KeyTooLargeError(f"key of {key_len} bytes (max {max_key} with {page_size}-byte pages)")
    return _errors.ValueTooLargeError("record too large for one WAL segment")


class Core(CheckpointHooks, SnapshotHooks):
    """One C core: page memory, B+tree, WAL encoder, and the checkpoint hooks
    of `CheckpointHooks` (checkpointing.py)."""

    def __init__(self, page_size: int, memory_size: int, checkpoint_buffer_size: int,
                 page_reserve: int = 0, read_page=None, wal_segment=None,
                 physical_wal: bool = False, snapshot_codec: str = "disabled", wal_grow=None):
        if snapshot_codec not in SNAPSHOT_CODECS:
            raise ValueError(f"snapshot_codec must be one of {sorted(SNAPSHOT_CODECS)}, got {snapshot_codec!r}")
        if page_size < MIN_PAGE_SIZE or page_size > MAX_PAGE_SIZE or page_size & (page_size - 1):
            raise ValueError(f"page_size must be a power of two in {MIN_PAGE_SIZE}..{MAX_PAGE_SIZE}")
        if memory_size // page_size < 8:
            raise ValueError("memory_size must hold at least 8 pages")
        if page_reserve < 0 or page_reserve > page_size // 4 or page_reserve % 8:
            raise ValueError("page_reserve must be a multiple of 8 and at most page_size/4")
        if checkpoint_buffer_size < 0:
            raise ValueError("checkpoint_buffer_size must be >= 0")
        self.page_size = page_size
        self._cb = Callbacks(read_page, wal_segment, page_size, wal_grow)
        self._handle = ffi.new_handle(self._cb)
        out = ffi.new("ps_core **")
        rc = lib.ps_create(page_size, memory_size, checkpoint_buffer_size, page_reserve,
                           1 if physical_wal else 0, self._handle, out)
        if rc != PS_OK:
            raise MemoryError(f"cannot create the C core (status {rc})") if rc == PS_E_NOMEM \
                else ValueError(f"bad C core parameters (status {rc})")
        # Freed only when nothing can call it any more: the hot-path closures
        # hold this pointer, and one may be called after close() (ps_close
        # makes it return PS_E_CLOSED instead of touching freed memory). The
        # destructor runs when the pointer object is deallocated, which in a
        # garbage cycle comes after every __del__ (a store's __del__ closes it
        # through this core). A weakref finalizer would run before them.
        self._c = ffi.gc(out[0], lib.ps_destroy)
        # In the core's struct (ps_close keeps it): valid as long as self._c,
        # and written by the core's prefault thread until ps_destroy stops it.
        self.signals = lib.ps_get_signals(self._c)
        self.closed = False
        self.set_snapshot_codec(snapshot_codec)
        self.max_key = lib.ps_max_key(self._c)
        self.max_inline = lib.ps_max_inline(self._c)
        self._tls = threading.local()
        self._bind()

    # -- errors ----------------------------------------------------------------
    def _raise(self, rc: int, key_len: int = 0, value_len: int = 0):
        if rc == PS_E_CLOSED:
            raise _errors.ClosedError("the store was closed during the operation")
        exc = take_error(self._cb)
        if exc is not None:
            raise exc
        if rc in (PS_E_NOMEM, PS_E_CKPT_FULL, PS_E_WAL_FULL):
            raise Retry(rc, lib.ps_blocked_page(self._c) if rc == PS_E_CKPT_FULL else 0,
                        lib.ps_rollback_need() if rc == PS_E_NOMEM else 0)
        msg = ffi.string(lib.ps_errmsg(self._c)).decode("utf-8", "replace")
        if rc == PS_E_CORRUPT:
            e = _errors.CorruptionError(msg or "page failed its checks")
            e.page = lib.ps_bad_page(self._c)
            raise e
        if rc == PS_E_TOO_LARGE:
            raise too_large(key_len, value_len, self.max_key, self.page_size)
        if rc == PS_E_ARG:
            raise ValueError(msg or "bad argument to the C core")
        raise NativeError(msg or f"C core status {rc}", rc)

    def raise_status(self, rc: int, key_len: int = 0, value_len: int = 0):
        """Raise what status `rc` of a write of these sizes means, as the core's
        own calls do (for a binding that calls the core's C functions itself)."""
        self._raise(rc, key_len, value_len)

    # -- hot paths ---------------------------------------------------------------
    def _bind(self):
        c, tls, raise_ = self._c, self._tls, self._raise
        _get, _put, _delete, _unpack = lib.ps_get, lib.ps_put, lib.ps_delete, ffi.unpack
        new, cap0, NOT_FOUND = ffi.new, _GET_BUF, PS_E_NOT_FOUND

        def get(key):
            """The value of key, or None."""
            try:
                buf = tls.gbuf
            except AttributeError:
                buf = tls.gbuf = new("char[]", cap0)
            n = _get(c, key, len(key), buf, cap0)
            if n >= 0:
                if n <= cap0:
                    return _unpack(buf, n)
                big = new("char[]", n)
                n2 = _get(c, key, len(key), big, n)
                while n2 > n:                       # replaced meanwhile by a larger value
                    n = n2
                    big = new("char[]", n)
                    n2 = _get(c, key, len(key), big, n)
                if n2 >= 0:
                    return _unpack(big, n2)
                n = n2
            if n == NOT_FOUND:
                return None
            raise_(n, len(key))

        def put(key, value):
            """Insert or replace; returns the end LSN of its WAL record (0 without WAL)."""
            r = _put(c, key, len(key), value, len(value))
            if r >= 0:
                return r
            raise_(r, len(key), len(value))

        def delete(key):
            """Remove key; returns the end LSN of its record, or -1 if it was absent."""
            r = _delete(c, key, len(key))
            if r >= 0:
                return r
            if r == NOT_FOUND:
                return -1
            raise_(r, len(key))

        self.get, self.put, self.delete = get, put, delete

    # -- lifetime --------------------------------------------------------------
    def format_new(self) -> None:
        """Build the meta page and an empty root leaf in memory (a new store)."""
        rc = lib.ps_format_new(self._c)
        if rc:
            self._raise(rc)

    def open_existing(self, page_count: int) -> None:
        """Read the meta page (page 0) through read_page; page_count is the file's."""
        rc = lib.ps_open_existing(self._c, page_count)
        if rc:
            self._raise(rc)

    def wal_attach(self, buf, seg_size: int, seq: int, offset: int, prev_end_lsn: int,
                   write_header: bool) -> None:
        """Append WAL records into buf (segment seq) from offset on."""
        keep, ptr, n = pin(buf)
        if n < seg_size:
            raise ValueError(f"segment buffer of {n} bytes, segment_size {seg_size}")
        self._cb.seg_size = seg_size
        rc = lib.ps_wal_attach(self._c, ptr, seg_size, seq, offset, prev_end_lsn,
                               1 if write_header else 0)
        if rc:
            self._raise(rc)
        self._cb.wal_keep = [keep]

    def wal_set_unmap(self, on: bool) -> None:
        """Let the encoder unmap the segment ranges it has written (MADV_DONTNEED).
        Only for segment buffers that are shared mappings of their files: on
        any other buffer it would zero the data."""
        lib.ps_wal_set_unmap(self._c, 1 if on else 0)

    def wal_set_key(self, key: bytes, key_id: int) -> None:
        """Seal every WAL record with AES-256-GCM under `key` (32 bytes) from the
        next wal_attach on; key_id 1..255 goes in the segment headers, 0 stops
        sealing. Only while no WAL is attached (before wal_attach, or after
        wal_disable); needs `wal_seal_available()`."""
        if not 0 <= key_id <= 255:
            raise ValueError(f"key_id must be in 0..255, got {key_id}")
        rc = lib.ps_wal_set_key(self._c, ffi.from_buffer("uint8_t[]", key), len(key), key_id)
        if rc:
            self._raise(rc)

    def wal_reserve_tags(self, key_id: int) -> None:
        """Lay WAL records out sealed under key id 1..255 without sealing them (0
        stops): the Python sealer of wal/recseal.py seals them in place before
        they are written. For a core without libcrypto; before wal_attach."""
        rc = lib.ps_wal_reserve_tags(self._c, key_id)
        if rc:
            self._raise(rc)

    def set_snapshot_codec(self, name: str) -> None:
        """PAGE_SNAPSHOT codec of the physical mode from now on (SNAPSHOT_CODECS)."""
        if name not in SNAPSHOT_CODECS:
            raise ValueError(f"snapshot_codec must be one of {sorted(SNAPSHOT_CODECS)}, got {name!r}")
        rc = lib.ps_set_snapshot_codec(self._c, SNAPSHOT_CODECS[name])
        if rc:
            self._raise(rc)
        self.snapshot_codec = name

    def wal_disable(self) -> None:
        """Log nothing from now on (tests of the tree alone)."""
        lib.ps_wal_disable(self._c)
        self._cb.wal_keep = []

    def shut(self) -> None:
        """Wait for the operations in flight; later ones raise ClosedError. The
        checkpoint calls keep working (a clean close checkpoints after this)."""
        lib.ps_shut(self._c)

    def close(self) -> None:
        """Free the page memory once the operations in flight are done; calls made
        after return ClosedError (the struct itself goes with the last reference)."""
        if not self.closed:
            self.closed = True
            lib.ps_close(self._c)
            self.get = self.put = self.delete = self._closed
            # C writes no more records: unpin the WAL segments, so the WAL can
            # unmap them (an exported buffer cannot be closed: fd and mapping leaked)
            self._cb.wal_keep = []

    @staticmethod
    def _closed(*_args):
        raise _errors.ClosedError("the C core is closed")

    # No __del__: the pointer's destructor (ps_destroy) frees the core when the
    # last reference goes.

    # -- batches, replay, records -----------------------------------------------
    def apply_batch(self, ops: bytes, txid: int = 0) -> int:
        """Apply packed ops atomically; returns the end LSN of the COMMIT record.

        txid 0 picks a fresh one (the WAL end LSN, which never repeats)."""
        r = lib.ps_apply_batch(self._c, ops, len(ops), txid)
        if r >= 0:
            return r
        if r == PS_E_TOO_LARGE:
            for op, k, v in unpack_ops(ops):
                if len(k) > self.max_key or len(v) > MAX_VALUE:
                    self._raise(r, len(k), len(v))
        self._raise(r)

    def apply_log(self, records) -> int:
        """Replay raw PUT/DELETE records (block headers removed) without logging.
        `records` is bytes or any contiguous bytes-like object (a bytearray from
        `wal_scan`)."""
        if type(records) is bytes:
            r = lib.ps_apply_log(self._c, records, len(records))
        else:
            with ffi.from_buffer(records) as buf:
                r = lib.ps_apply_log(self._c, buf, len(buf))
        if r >= 0:
            return r
        self._raise(r)

    def log_record(self, type: int, payload: bytes) -> int:  # noqa: A002 - the doc's name
        """Append a Python-made record; returns its end LSN (0 without WAL)."""
        r = lib.ps_log_record(self._c, type, payload, len(payload))
        if r >= 0:
            return r
        self._raise(r)

    def scan_batch(self, lo, lo_incl, hi, hi_incl, reverse, max_bytes) -> list:
        """Items (key, value) in order within the bounds (None = unbounded): at
        least one if any exists, about max_bytes of keys and values at most.
        Batches are capped at _SCAN_CHUNK bytes: a batch that fits in cache
        unpickles about twice as fast as a 1 MiB one."""
        tls = self._tls
        if max_bytes > _SCAN_CHUNK:
            max_bytes = _SCAN_CHUNK
        cap = max(64 << 10, 2 * max_bytes + 4096)
        buf = getattr(tls, "sbuf", None)
        if buf is None or len(buf) < cap:
            buf = tls.sbuf = ffi.new("char[]", cap)
            tls.slen = ffi.new("size_t *")
        outlen = tls.slen
        while True:
            n = lib.ps_scan(self._c, b"" if lo is None else lo, 0 if lo is None else len(lo),
                            lo is not None, bool(lo_incl),
                            b"" if hi is None else hi, 0 if hi is None else len(hi),
                            hi is not None, bool(hi_incl), bool(reverse), max_bytes,
                            buf, len(buf), outlen)
            if n >= 0:
                return pickle.loads(ffi.buffer(buf, outlen[0]))
            if n != PS_E_NEED_SPACE:
                self._raise(n)
            buf = tls.sbuf = ffi.new("char[]", outlen[0] + 4096)

    def count(self) -> int:
        """The number of keys."""
        n = lib.ps_count(self._c)
        if n < 0:                     # PS_E_CLOSED: closed while called
            self._raise(int(n))
        return n

    def height(self) -> int:
        """The tree height (1: the root is a leaf)."""
        n = lib.ps_height(self._c)
        if n < 0:
            self._raise(int(n))
        return n

    def verify(self) -> dict:
        """Walk every reachable page and the freelist; raises CorruptionError."""
        info = ffi.new("ps_verify_info *")
        rc = lib.ps_verify(self._c, info)
        if rc:
            self._raise(rc)
        return {name: getattr(info, name) for name in _VERIFY_FIELDS}

    def stash(self, page_ids, images) -> int:
        """Before `open_existing`: keep page images just restored in place as
        clean resident pages (recovery's restore feeds each batch it writes), so
        replay does not miss on them. Images failing their checks are skipped;
        stops when page memory has no free slot. Returns how many were kept."""
        ids, n = u64_array(page_ids)
        with ids, ffi.from_buffer(images) as buf:
            if len(buf) < n * self.page_size:
                raise ValueError(f"{n} page ids but {len(buf)} bytes of images")
            r = lib.ps_stash_pages(self._c, ids, buf, n)
        if r < 0:
            self._raise(r)
        return r

    def preload(self, first_page_id: int, images) -> int:
        """Install on-disk page images (consecutive ids from first_page_id, as read
        from the page file) into free slots; returns how many were installed.
        Never evicts: stops when page memory has no free slot. Pages already in
        memory, beyond the page count, or failing their checksum / page-id check
        are skipped (a later miss reads and reports them through read_page)."""
        with ffi.from_buffer(images) as buf:
            r = lib.ps_preload(self._c, first_page_id, buf, len(buf) // self.page_size)
        if r < 0:
            self._raise(r)
        return r

    def set_page_fd(self, fd: int) -> None:
        """Page misses pread this fd (a plain posix page file); -1 goes back to `read_page`."""
        lib.ps_set_page_fd(self._c, int(fd))

    def set_page_key(self, keytab: bytes | None, ad_prefix: bytes = b"") -> None:
        """Page misses open sealed pages in C with these keys (`Cipher.page_opener`);
        None: no keys. A page that does not authenticate still goes to `read_page`."""
        rc = lib.ps_set_page_key(self._c, ffi.NULL if keytab is None else keytab, ad_prefix,
                                 len(ad_prefix))
        if rc < 0:
            self._raise(rc)

    def set_throttle_thresholds(self, cow_fraction: float, dirty_fraction: float) -> None:
        """`signals.throttle_hint` is set while the checkpoint buffer use or the
        dirty pages reach these fractions of their capacity (0: that signal off)."""
        lib.ps_set_throttle_thresholds(self._c, float(cow_fraction), float(dirty_fraction))

    @property
    def blocked_page(self) -> int:
        """The page of the last PS_E_CKPT_FULL (that `Retry.page` also names)."""
        return lib.ps_blocked_page(self._c)

    @property
    def bad_page(self) -> int:
        """The page of the last PS_E_CORRUPT (that `CorruptionError.page` also names)."""
        return lib.ps_bad_page(self._c)

    @property
    def pointer(self):
        """The `ps_core *` itself, for the bindings of csrc/ps_test.h
        (testing.py); valid while this Core lives."""
        return self._c

    def stats(self) -> dict:
        """Every field of `signals`, `max_key`, `max_inline_value`, and page
        memory in bytes: `page_memory_size` (reserved), `page_memory_used`
        (holding pages), `page_memory_dirty`, `page_memory_resident` (page
        memory and checkpoint buffer touched so far: the part the store costs
        in RAM; it stays until close)."""
        s = self.signals
        out = {name: getattr(s, name) for name in _SIGNAL_FIELDS}
        out["max_key"] = self.max_key
        out["max_inline_value"] = self.max_inline
        page = self.page_size
        total, cow_total = s.slots_total * page, s.cow_capacity * page
        out["page_memory_size"] = total
        out["page_memory_used"] = s.slots_used * page
        out["page_memory_dirty"] = s.dirty_pages * page
        out["page_memory_resident"] = (
            min(max(s.slots_touched * page, s.prefaulted_bytes), total)
            + min(max(s.cow_touched * page, s.cow_prefaulted_bytes), cow_total))
        return out
