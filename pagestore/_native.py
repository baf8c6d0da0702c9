"""The thin binding over the C core (docs/native-api.md).

The only importer of the cffi extension `pagestore._core`. It checks
arguments before crossing into C, turns C status codes into exceptions from
`pagestore.errors` (plus `Retry` for the rolled-back writes the caller may
retry after making room), and runs the two Python callbacks the core calls
while it holds its tree lock: `read_page` on a page miss and `wal_segment`
when the WAL needs its next segment.

Hot paths (`get`, `put`, `delete`) are closures bound per Core with the C
function, the core pointer and a per-thread output buffer in locals: one C
call and one `ffi.unpack` per `get`. `close()` must not race with calls.

No memoryview is left exported to cffi where a garbage cycle can reach it
(see `_pin`): long-lived pointers go through the object under the view, and
per-call exports sit in `with` blocks, so a failed call's traceback holds none.
"""

from __future__ import annotations

import os
import pickle
import struct
import threading
import traceback
from array import array

from . import errors as _errors
from ._core import ffi, lib

PS_OK = lib.PS_OK
PS_E_NOMEM = lib.PS_E_NOMEM
PS_E_CKPT_FULL = lib.PS_E_CKPT_FULL
PS_E_CORRUPT = lib.PS_E_CORRUPT
PS_E_IO = lib.PS_E_IO
PS_E_TOO_LARGE = lib.PS_E_TOO_LARGE
PS_E_ARG = lib.PS_E_ARG
PS_E_WAL_FULL = lib.PS_E_WAL_FULL
PS_E_NOT_FOUND = lib.PS_E_NOT_FOUND
PS_E_NEED_SPACE = lib.PS_E_NEED_SPACE
PS_E_CLOSED = lib.PS_E_CLOSED

MAX_KEY = lib.PS_MAX_KEY
MAX_VALUE = lib.PS_MAX_VALUE
MIN_PAGE_SIZE = lib.PS_MIN_PAGE
MAX_PAGE_SIZE = lib.PS_MAX_PAGE

PAGE_META = lib.PS_PAGE_META
PAGE_LEAF = lib.PS_PAGE_LEAF
PAGE_INNER = lib.PS_PAGE_INNER
PAGE_OVERFLOW = lib.PS_PAGE_OVERFLOW
PAGE_FREELIST = lib.PS_PAGE_FREELIST

REC_PUT = lib.PS_REC_PUT
REC_DELETE = lib.PS_REC_DELETE
REC_COMMIT = lib.PS_REC_COMMIT
REC_CHECKPOINT = lib.PS_REC_CHECKPOINT
REC_PAGE_SNAPSHOT = lib.PS_REC_PAGE_SNAPSHOT
REC_PAGE_DELTA = lib.PS_REC_PAGE_DELTA
REC_ROLLBACK = lib.PS_REC_ROLLBACK

OP_PUT = 1
OP_DELETE = 2

# PAGE_SNAPSHOT codecs the C encoder applies (physical_wal): the names of
# recovery_compression. "disabled" logs whole images; every other name drops
# the zeroed free gap (skip_garbage, codec byte 0x81). The general codecs
# (snappy, zstd, lz4) are Python-side and not applied to WAL page images.
SNAPSHOT_CODECS = {"disabled": lib.PS_SNAP_DISABLED, "skip_garbage": lib.PS_SNAP_SKIP_GARBAGE,
                   "snappy": lib.PS_SNAP_SKIP_GARBAGE, "zstd": lib.PS_SNAP_SKIP_GARBAGE,
                   "lz4": lib.PS_SNAP_SKIP_GARBAGE}

_GET_BUF = 64 << 10
_SCAN_CHUNK = 128 << 10
_SIGNAL_FIELDS = tuple(name for name, _ in ffi.typeof("ps_signals").fields)
_VERIFY_FIELDS = tuple(name for name, _ in ffi.typeof("ps_verify_info").fields)
_OP_HDR = struct.Struct("<BII")


class NativeError(_errors.Error):
    """A C core status that is not one of the typed errors. `code` is the status."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class Retry(_errors.Error):
    """A write the core rolled back completely (page memory full, checkpoint
    buffer full, or no WAL segment). `code` is the status; `page` the page id
    that could not be copied into the checkpoint buffer (PS_E_CKPT_FULL)."""

    def __init__(self, code: int, page: int = 0):
        names = {PS_E_NOMEM: "page memory is full of dirty or in-checkpoint pages",
                 PS_E_CKPT_FULL: f"checkpoint buffer full (page {page})",
                 PS_E_WAL_FULL: "no WAL segment could be had"}
        super().__init__(names.get(code, f"status {code}"))
        self.code = code
        self.page = page


class _Callbacks:
    """What the C callbacks reach through their handle (no link back to Core)."""

    __slots__ = ("read_page", "wal_segment", "page_size", "tls", "wal_keep", "seg_size")

    def __init__(self, read_page, wal_segment, page_size):
        self.read_page = read_page
        self.wal_segment = wal_segment
        self.page_size = page_size
        self.tls = threading.local()
        self.wal_keep = []
        self.seg_size = 0


def _pin(buf):
    """(keep, ptr, n): a writable uint8_t * over `buf`'s n bytes, valid while
    `keep` lives.

    A memoryview is pinned through the object under it, never exported to
    cffi itself: CPython 3.11's collector, breaking a garbage cycle that holds
    a memoryview still exported to a live cdata, drops the view's buffer and
    then crashes releasing the export (gh-77894, fixed in 3.12). A store that
    failed to open, or was dropped without close(), is such a cycle: the
    exception's frames, the store, its core, the WAL segment's view."""
    if not isinstance(buf, memoryview):
        keep = ffi.from_buffer("uint8_t[]", buf, require_writable=True)
        return keep, keep, len(keep)
    view = ffi.from_buffer("uint8_t[]", buf, require_writable=True)
    try:
        keep = ffi.from_buffer("uint8_t[]", buf.obj, require_writable=True)
    except (TypeError, ValueError, BufferError):   # no contiguous object under it
        return view, view, len(view)
    try:
        off = int(ffi.cast("uintptr_t", view)) - int(ffi.cast("uintptr_t", keep))
        n = len(view)
    finally:
        ffi.release(view)
    if off < 0 or off + n > len(keep):
        raise ValueError("the buffer's view lies outside the object it views")
    return keep, keep + off, n


# An exception that escapes a callback before its `try` (a signal handler's
# KeyboardInterrupt runs at any bytecode) is caught by cffi: `error=-1` makes
# the callback fail instead of "succeed" with nothing done (a stale page slot
# then failed its page-id check), and `onerror` keeps the exception for the
# caller to raise, per thread, since it has no handle to reach the core by.
_late = threading.local()


def _late_error(_exc_type, exc, _tb):
    _late.exc = _kept(exc)


def _kept(e: BaseException) -> BaseException:
    """`e`, to re-raise once C has unwound, without the locals of the frames it
    passed through: a buffer a frame had exported (a signal lands between any
    two bytecodes) would sit in a garbage cycle with its memoryview, which
    CPython 3.11's collector crashes on (see `_pin`). Line numbers stay."""
    traceback.clear_frames(e.__traceback__)
    return e


def _take_error(cb):
    """The exception a callback kept for this thread (its own, else a late one)."""
    exc = getattr(cb.tls, "exc", None)
    if exc is not None:
        cb.tls.exc = None
        return exc
    exc = getattr(_late, "exc", None)
    if exc is not None:
        _late.exc = None
    return exc


@ffi.def_extern(error=-1, onerror=_late_error)
def ps_py_read_page(handle, page_id, buf):
    cb = ffi.from_handle(handle)
    try:
        if cb.read_page is None:
            raise _errors.CorruptionError(f"page {page_id} is not in memory and there is no page file")
        cb.read_page(page_id, memoryview(ffi.buffer(buf, cb.page_size)))
        return 0
    except BaseException as e:  # noqa: BLE001 - re-raised by the caller after C unwinds
        cb.tls.exc = _kept(e)
        return -1


@ffi.def_extern(error=-1, onerror=_late_error)
def ps_py_wal_segment(handle, seq, base_out):
    cb = ffi.from_handle(handle)
    try:
        buf = None if cb.wal_segment is None else cb.wal_segment(seq)
        if buf is None:
            return -1
        keep, ptr, n = _pin(buf)
        if n < cb.seg_size:
            raise ValueError(f"WAL segment {seq}: buffer of {n} bytes, need {cb.seg_size}")
        cb.wal_keep = [cb.wal_keep[-1], keep] if cb.wal_keep else [keep]
        base_out[0] = ptr
        return 0
    except BaseException as e:  # noqa: BLE001 - re-raised by the caller after C unwinds
        cb.tls.exc = _kept(e)
        return -1


def _u64_array(page_ids):
    """A uint64_t[] cdata over page_ids (array('Q'), numpy uint64, or any iterable)."""
    if isinstance(page_ids, array) and page_ids.typecode == "Q":
        return ffi.from_buffer("uint64_t[]", page_ids), len(page_ids)
    try:
        mv = memoryview(page_ids)
        if mv.format in ("Q", "<Q", "=Q", "L") and mv.itemsize == 8 and mv.c_contiguous:
            return ffi.from_buffer("uint64_t[]", mv), len(mv)
    except TypeError:
        pass
    a = array("Q", page_ids)
    return ffi.from_buffer("uint64_t[]", a), len(a)


class Core:
    """One C core: page memory, B+tree, WAL encoder, checkpoint hooks."""

    def __init__(self, page_size: int, memory_size: int, checkpoint_buffer_size: int,
                 page_reserve: int = 0, read_page=None, wal_segment=None,
                 physical_wal: bool = False, snapshot_codec: str = "disabled"):
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
        self._cb = _Callbacks(read_page, wal_segment, page_size)
        self._handle = ffi.new_handle(self._cb)
        out = ffi.new("ps_core **")
        rc = lib.ps_create(page_size, memory_size, checkpoint_buffer_size, page_reserve,
                           1 if physical_wal else 0, self._handle, ffi.NULL, out)
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
        self.physical_wal = bool(physical_wal)
        self._tls = threading.local()
        self._wal_buf = None
        self._bind()

    # -- errors ----------------------------------------------------------------
    def _raise(self, rc: int, key_len: int = 0, value_len: int = 0):
        if rc == PS_E_CLOSED:
            raise _errors.ClosedError("the store was closed during the operation")
        exc = _take_error(self._cb)
        if exc is not None:
            raise exc
        if rc in (PS_E_NOMEM, PS_E_CKPT_FULL, PS_E_WAL_FULL):
            raise Retry(rc, lib.ps_blocked_page(self._c) if rc == PS_E_CKPT_FULL else 0)
        msg = ffi.string(lib.ps_errmsg(self._c)).decode("utf-8", "replace")
        if rc == PS_E_CORRUPT:
            e = _errors.CorruptionError(msg or "page failed its checks")
            e.page = lib.ps_bad_page(self._c)
            raise e
        if rc == PS_E_TOO_LARGE:
            if value_len > MAX_VALUE:
                raise _errors.ValueTooLargeError(f"value of {value_len} bytes (MAX_VALUE {MAX_VALUE})")
            if key_len > self.max_key:
                raise _errors.KeyTooLargeError(
                    f"key of {key_len} bytes (max {self.max_key} with {self.page_size}-byte pages)")
            raise _errors.ValueTooLargeError("record too large for one WAL segment")
        if rc == PS_E_ARG:
            raise ValueError(msg or "bad argument to the C core")
        raise NativeError(msg or f"C core status {rc}", rc)

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
        keep, ptr, n = _pin(buf)
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
        n = lib.ps_count(self._c)
        if n < 0:                     # PS_E_CLOSED: closed while called
            self._raise(int(n))
        return n

    def height(self) -> int:
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
        ids, n = _u64_array(page_ids)
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

    def page_image(self, page_id: int):
        """The page as it is in page memory (crc field 0), or None if not resident."""
        out = bytearray(self.page_size)
        rc = lib.ps_read_live_page(self._c, page_id, ffi.from_buffer(out))
        return bytes(out) if rc == PS_OK else None

    # -- checkpoint hooks --------------------------------------------------------
    def ckpt_begin(self, checkpoint_id: int, payload: bytes = b""):
        """Snapshot + flag the dirty pages, log CHECKPOINT; returns (page_ids, lsn),
        lsn being where the CHECKPOINT record starts (0 without WAL)."""
        ids_p = ffi.new("uint64_t **")
        n_p = ffi.new("uint64_t *")
        lsn_p = ffi.new("uint64_t *")
        rc = lib.ps_ckpt_begin(self._c, checkpoint_id, payload, len(payload), ids_p, n_p, lsn_p)
        if rc:
            self._raise(rc)
        ids = array("Q")
        if n_p[0]:
            ids.frombytes(ffi.buffer(ids_p[0], n_p[0] * 8))
        return ids, lsn_p[0]

    def ckpt_copy(self, page_ids, out) -> None:
        """Checkpoint images (COW copy or live page) of page_ids into out, CRC stamped."""
        ids, n = _u64_array(page_ids)
        with ids, ffi.from_buffer("uint8_t[]", out, require_writable=True) as dst:
            if len(dst) < n * self.page_size:
                raise ValueError(f"out holds {len(dst)} bytes, {n} pages need {n * self.page_size}")
            rc = lib.ps_ckpt_copy(self._c, ids, n, dst)
        if rc:
            self._raise(rc)

    def ckpt_copy_frame(self, page_ids, codec: int, out) -> tuple[int, int]:
        """`ckpt_copy` then `frame_recovery_records`, one page at a time without the
        intermediate images buffer; returns (bytes framed into out, gap fallbacks)."""
        if codec not in frame_recovery_records.codecs:
            raise ValueError(f"codec {codec} is not framed in C")
        ids, n = _u64_array(page_ids)
        fallbacks = ffi.new("uint64_t *")
        with ids, ffi.from_buffer("uint8_t[]", out, require_writable=True) as dst:
            if len(dst) < n * (self.page_size + 18):
                raise ValueError(f"out holds {len(dst)} bytes, {n} records may need "
                                 f"{n * (self.page_size + 18)}")
            got = lib.ps_ckpt_copy_frame(self._c, ids, n, int(codec), dst, len(dst), fallbacks)
        if got < 0:
            self._raise(int(got))
        return int(got), fallbacks[0]

    def ckpt_release(self, page_ids) -> None:
        """Pages written in place: clear their in-checkpoint flag, free COW copies."""
        ids, n = _u64_array(page_ids)
        with ids:
            lib.ps_ckpt_release(self._c, ids, n)

    def ckpt_end(self) -> None:
        lib.ps_ckpt_end(self._c)

    def ckpt_pages_with_copy(self) -> array:
        """In-checkpoint page ids that hold a copy-on-write image, ascending
        (the checkpointer writes these first when the buffer is nearly full:
        each one written and released frees a buffer page)."""
        cap = self.signals.cow_capacity
        ids = array("Q", bytes(8 * cap))
        n_p = ffi.new("size_t *")
        rc = lib.ps_ckpt_pages_with_copy(self._c, ffi.from_buffer("uint64_t[]", ids), cap, n_p)
        if rc:
            self._raise(rc)
        del ids[n_p[0]:]
        return ids

    def set_page_fd(self, fd: int) -> None:
        """Page misses pread this fd (a plain posix page file); -1 goes back to `read_page`."""
        lib.ps_set_page_fd(self._c, int(fd))

    def set_throttle_thresholds(self, cow_fraction: float, dirty_fraction: float) -> None:
        lib.ps_set_throttle_thresholds(self._c, float(cow_fraction), float(dirty_fraction))

    @property
    def blocked_page(self) -> int:
        return lib.ps_blocked_page(self._c)

    @property
    def bad_page(self) -> int:
        return lib.ps_bad_page(self._c)

    def stats(self) -> dict:
        s = self.signals
        out = {name: getattr(s, name) for name in _SIGNAL_FIELDS}
        out["max_key"] = self.max_key
        out["max_inline_value"] = self.max_inline
        return out


# -- batches --------------------------------------------------------------------

def pack_ops(ops) -> bytes:
    """Pack (op, key, value) triples (op 1 put, 2 delete) for Core.apply_batch."""
    hdr = _OP_HDR.pack
    parts = []
    ext = parts.extend
    for op, k, v in ops:
        if op == OP_DELETE:
            ext((hdr(2, len(k), 0), k))
        elif op == OP_PUT:
            ext((hdr(1, len(k), len(v)), k, v))
        else:
            raise ValueError(f"unknown op {op!r}")
    return b"".join(parts)


def pack_puts(items, key=bytes, value=bytes) -> bytes:
    """Pack (key, value) pairs as puts; `key`/`value` convert anything not bytes.

    The bulk-load path: one pass, no intermediate triples (pack_ops's format)."""
    hdr = _OP_HDR.pack
    parts = []
    ext = parts.extend
    for k, v in items:
        if type(k) is not bytes:
            k = key(k)
        if type(v) is not bytes:
            v = value(v)
        ext((hdr(1, len(k), len(v)), k, v))
    return b"".join(parts)


def unpack_ops(data: bytes):
    """The (op, key, value) triples of a packed batch (inverse of pack_ops)."""
    mv = memoryview(data)
    off, n = 0, len(mv)
    while off < n:
        op, kl, vl = _OP_HDR.unpack_from(mv, off)
        off += 9
        yield op, bytes(mv[off:off + kl]), bytes(mv[off + kl:off + kl + vl])
        off += kl + vl


# -- WAL scanning ----------------------------------------------------------------------

WAL_SCAN_CHUNK = 4 << 20


def wal_scan(buf, base_lsn: int, offset: int, segment_size: int, cap: int = WAL_SCAN_CHUNK,
             key=None, salt=None):
    """The valid prefix of simple records of one WAL segment: PUT/DELETE with
    txid 0, and whole transactions written in one piece (their operations up to
    and including the COMMIT whose nops matches; see ps_wal_scan in walenc.c).

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
    (`wal_seal_available()` false) it takes nothing: (0, b"", offset).
    """
    if key is not None:
        if len(key) != 32 or salt is None or len(salt) != 8:
            raise ValueError("a sealed WAL scan needs a 32-byte key and an 8-byte salt")
        if not lib.ps_wal_seal_available():
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
        return wal_scan(buf, base_lsn, offset, segment_size, segment_size, key=key, salt=salt)
    if n < 0:
        raise ValueError(f"bad WAL scan arguments (status {n})")
    return n, bytes(memoryview(scratch)[:out_len[0]]), end[0]


wal_scan.reads_sealed = True   # wal/reader.py: takes a record-sealed segment's key and salt
_scan_tls = threading.local()


# -- page helpers -------------------------------------------------------------------

def crc32c(data, crc: int = 0) -> int:
    """CRC32C of data (hardware when available), chained from crc."""
    with ffi.from_buffer(data) as buf:
        return lib.ps_crc32c(crc, buf, len(buf))


def crc32c_software(data, crc: int = 0) -> int:
    with ffi.from_buffer(data) as buf:
        return lib.ps_crc32c_sw(crc, buf, len(buf))


def crc32c_hardware_available() -> bool:
    return bool(lib.ps_crc32c_hw_available())


def seal_page(buf, page_id: int, page_size: int | None = None) -> None:
    """Stamp the page id and CRC into a page image (writable buffer)."""
    with ffi.from_buffer("uint8_t[]", buf, require_writable=True) as p:
        ps = len(p) if page_size is None else page_size
        if ps > len(p) or ps < 32:
            raise ValueError("buffer shorter than the page")
        lib.ps_seal_page(p, ps, page_id)


def check_page(buf, page_id: int) -> bool:
    """True if the on-disk image passes its CRC and page-id checks."""
    with ffi.from_buffer("uint8_t[]", buf) as p:
        return len(p) >= 32 and bool(lib.ps_check_page(p, len(p), page_id))


_META = struct.Struct("<8sII QQQQ II")


def file_header_info(head):
    """Fields of the meta page (page 0) from its first bytes, or None if the
    magic is not ours. Does not check the CRC (head may be a partial page)."""
    head = bytes(head[:32 + _META.size])
    if len(head) < 32 + _META.size:
        return None
    magic, version, page_size, root, page_count, free_head, key_count, height, reserve = \
        _META.unpack_from(head, 32)
    if magic != b"PAGESTOR":
        return None
    return {"format_version": version, "page_size": page_size, "root": root,
            "page_count": page_count, "freelist_head": free_head, "key_count": key_count,
            "height": height, "page_reserve": reserve,
            "checkpoint_id": struct.unpack_from("<Q", head, 16)[0]}


__all__ = [
    "Core", "Retry", "NativeError", "pack_ops", "unpack_ops", "seal_page", "check_page",
    "seal_pages", "seal_records", "open_pages",
    "file_header_info", "crc32c", "crc32c_software", "crc32c_hardware_available",
    "MAX_KEY", "MAX_VALUE", "wal_scan",
]


def pwrite_pages(fd: int, page_ids, images, page_size: int) -> int:
    """Write page images in place through `fd`, without the GIL (pagemem.c); bytes
    written. Raises OSError (with errno) on a failed write; ids must ascend."""
    ids, n = _u64_array(page_ids)
    with ids, ffi.from_buffer(images) as src:
        if len(src) < n * page_size:
            raise ValueError(f"images hold {len(src)} bytes, {n} pages need {n * page_size}")
        got = lib.ps_pwrite_pages(int(fd), ids, n, src, page_size)
    if got < 0:
        raise OSError(int(-got), os.strerror(int(-got)))
    return int(got)


# -- recovery-file records (recframe.c; format in checkpoint/format.py) ------------

def frame_recovery_records(page_ids, images, page_size: int, codec: int, out) -> tuple[int, int]:
    """Recovery-file records of `page_ids` (images back to back) into `out`, no cipher.

    `codec`: one of `frame_recovery_records.codecs` (0 disabled, 1 skip_garbage,
    and 4 lz4 in its fast mode when the system's liblz4.so.1 loads). Returns
    (bytes written, gap fallbacks). Byte-identical to the Python framing of
    checkpoint/recovery_file.py; runs without the GIL.
    """
    if codec not in frame_recovery_records.codecs:
        raise ValueError(f"codec {codec} is not framed in C")
    ids, n = _u64_array(page_ids)
    fallbacks = ffi.new("uint64_t *")
    with ids, ffi.from_buffer(images) as src, \
            ffi.from_buffer("uint8_t[]", out, require_writable=True) as dst:
        if len(src) < n * page_size:
            raise ValueError(f"images hold {len(src)} bytes, {n} pages need {n * page_size}")
        got = lib.ps_recframe(src, ids, n, page_size, int(codec), dst, len(dst), fallbacks)
    if got < 0:
        raise ValueError(f"out holds {len(out)} bytes, {n} records may need {n * (page_size + 18)}")
    return got, fallbacks[0]


def seal_pages(key: bytes, key_id: int, ad_prefix: bytes, page_ids, images, out, page_size: int) -> None:
    """AES-256-GCM sealed images (pagestore/cipher.py's page format) of the plain
    pages `images` into `out`, without the GIL (pageseal.c). ValueError names the
    first page whose last 32 bytes are not zero. Needs wal_seal_available()."""
    ids, n = _u64_array(page_ids)
    bad = ffi.new("uint64_t *")
    with ids, ffi.from_buffer(images) as src, \
            ffi.from_buffer("uint8_t[]", out, require_writable=True) as dst:
        if len(src) < n * page_size or len(dst) < n * page_size:
            raise ValueError(f"{n} pages need {n * page_size} bytes in and out, "
                             f"got {len(src)} and {len(dst)}")
        rc = lib.ps_seal_pages(key, key_id, ad_prefix, len(ad_prefix), ids, n, src, dst, page_size, bad)
    if rc == lib.PS_E_CORRUPT:
        raise ValueError(f"page {page_ids[bad[0]]}: the last 32 bytes of a plain page must be zero "
                         "(they are not encrypted)")
    if rc < 0:
        raise RuntimeError(f"sealing pages failed (code {rc}): libcrypto or getrandom")


def open_pages(keytab: bytes, ad_prefix: bytes, first_id: int, buf, page_size: int,
               zero_bad: bool) -> tuple[int, int | None]:
    """Open the sealed pages first_id.. of `buf` in place, without the GIL
    (pageseal.c). Returns (pages opened, index of the first page that does not
    authenticate or None); with `zero_bad` such pages are zeroed and skipped."""
    bad = ffi.new("uint64_t *")
    with ffi.from_buffer("uint8_t[]", buf, require_writable=True) as p:
        got = lib.ps_open_pages(keytab, ad_prefix, len(ad_prefix), first_id, len(p) // page_size, p,
                                page_size, 1 if zero_bad else 0, bad)
    if got == lib.PS_E_CORRUPT:
        return int(bad[0]), int(bad[0])
    if got < 0:
        raise RuntimeError(f"opening pages failed (code {got}): libcrypto")
    return int(got), None


def seal_records(key: bytes, key_id: int, checkpoint_id: int, writer: int, offset: int, buf,
                 start: int, end: int) -> int:
    """Seal, in place and without the GIL, the plain recovery-file records in
    buf[start:end] (checkpoint/format.py's ENCRYPTED form; `offset` is the file
    offset of buf[start]); returns the new end. ValueError when buf is too short
    (nothing changed) or the records are malformed."""
    with ffi.from_buffer("uint8_t[]", buf, require_writable=True) as p:
        size = len(p)
        if not 0 <= start <= end <= size:
            raise ValueError(f"records [{start}, {end}) outside a buffer of {size} bytes")
        got = lib.ps_seal_records(key, key_id, checkpoint_id, writer, offset, p + start, end - start,
                                  size - start)
    if got == lib.PS_E_NEED_SPACE:
        raise ValueError(f"buffer of {size} bytes too short for the sealed records")
    if got == lib.PS_E_CORRUPT:
        raise ValueError("malformed or already sealed recovery-file records")
    if got < 0:
        raise RuntimeError(f"sealing records failed (code {got}): libcrypto or getrandom")
    return start + int(got)


def wal_seal_available() -> bool:
    """True when libcrypto is loaded for the C encoder's sealed WAL records."""
    return bool(lib.ps_wal_seal_available())


def lz4_available() -> bool:
    """True when the system's liblz4.so.1 is loaded for the lz4 codec's C framing."""
    return bool(lib.ps_lz4_available())


#: the codecs `frame_recovery_records` and `Core.ckpt_copy_frame` take (the
#: writers fall back to the Python framing for the others)
frame_recovery_records.codecs = (0, 1, 4) if lz4_available() else (0, 1)


def compact_pages(images, n: int, page_size: int, out, lens, flags) -> int:
    """The skip_garbage form of `n` pages (images back to back) into `out` at a
    stride of page_size: lens (array('I')) and flags (bytearray: GAP_SKIPPED or
    0) per page. Returns the gap fallbacks (pages stored whole). For the
    compressing codecs' framing in checkpoint/recovery_file.py."""
    with ffi.from_buffer(images) as src, ffi.from_buffer("uint8_t[]", out, require_writable=True) as dst:
        if len(src) < n * page_size or len(dst) < n * page_size or len(lens) < n or len(flags) < n:
            raise ValueError(f"buffers too small for {n} pages")
        got = lib.ps_compact_pages(src, n, page_size, dst,
                                   ffi.from_buffer("uint32_t[]", lens, require_writable=True),
                                   ffi.from_buffer("uint8_t[]", flags, require_writable=True))
    if got < 0:
        raise ValueError(f"bad page size {page_size}")
    return got


def frame_record_heads(buf, page_ids, codecs, flags, lens) -> int:
    """Fill in the header and CRC of each recovery-file record laid out in `buf`
    (an 18-byte gap, then lens[i] payload bytes, per page). Returns the bytes
    the records span."""
    ids, n = _u64_array(page_ids)
    with ids, ffi.from_buffer("uint8_t[]", buf, require_writable=True) as dst:
        got = lib.ps_frame_heads(dst, len(dst), n, ids, ffi.from_buffer("uint8_t[]", codecs),
                                 ffi.from_buffer("uint8_t[]", flags), ffi.from_buffer("uint32_t[]", lens))
    if got < 0:
        raise ValueError("records do not fit in buf")
    return got


def parse_recovery_records(buf, page_size: int, images, ids) -> tuple[int, int]:
    """Decode the leading valid records of `buf` that C decodes (disabled,
    skip_garbage, and lz4 where `lz4_available()`) into `images` / `ids`.

    `ids` is a writable uint64 buffer (array('Q')); as many records as it has
    room for are taken. Returns (records, bytes consumed); it stops at the
    first record that is incomplete in `buf`, of another codec, encrypted or in
    any way invalid, which the caller's Python reader then takes.
    """
    used = ffi.new("size_t *")
    with ffi.from_buffer(buf) as src, ffi.from_buffer("uint8_t[]", images, require_writable=True) as out, \
            ffi.from_buffer("uint64_t[]", ids, require_writable=True) as idv:
        cap = min(len(idv), len(out) // page_size)
        got = lib.ps_recparse(src, len(src), page_size, out, idv, cap, used)
    if got < 0:
        raise ValueError(f"bad page size {page_size}")
    return got, used[0]
