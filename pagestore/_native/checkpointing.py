"""The checkpoint hooks of a `Core` (DESIGN.md §3 steps 1, 3, 5, 6; core.c).

What the checkpointer's page source calls, through the store's adapter:
`ckpt_begin` under the tree write lock (step 1), `ckpt_copy` /
`ckpt_copy_frame` by the writer threads under the read lock page by page
(step 3), `ckpt_release` as pages land in place (step 5) and `ckpt_end`
(step 6). One checkpoint at a time: `ckpt_begin` before `ckpt_end` raises
ValueError.
"""

from __future__ import annotations

from array import array

from . import RECORD_HEADER_SIZE, ffi, lib
from .buffers import u64_array
from .capabilities import CAPABILITIES

__all__ = ["CheckpointHooks"]


class CheckpointHooks:
    """Mixed into `Core`: needs its `_c` (the core pointer), `page_size`,
    `signals` and `_raise`."""

    def ckpt_begin(self, checkpoint_id: int):
        """Snapshot + flag the dirty pages, log CHECKPOINT; returns (page_ids, lsn),
        lsn being where the CHECKPOINT record starts (0 without WAL)."""
        ids_p = ffi.new("uint64_t **")
        n_p = ffi.new("uint64_t *")
        lsn_p = ffi.new("uint64_t *")
        rc = lib.ps_ckpt_begin(self._c, checkpoint_id, ids_p, n_p, lsn_p)
        if rc:
            self._raise(rc)
        ids = array("Q")
        if n_p[0]:
            ids.frombytes(ffi.buffer(ids_p[0], n_p[0] * 8))
        return ids, lsn_p[0]

    def ckpt_copy(self, page_ids, out) -> None:
        """Checkpoint images (COW copy or live page) of page_ids into out, CRC stamped."""
        ids, n = u64_array(page_ids)
        with ids, ffi.from_buffer("uint8_t[]", out, require_writable=True) as dst:
            if len(dst) < n * self.page_size:
                raise ValueError(f"out holds {len(dst)} bytes, {n} pages need {n * self.page_size}")
            rc = lib.ps_ckpt_copy(self._c, ids, n, dst)
        if rc:
            self._raise(rc)

    def ckpt_copy_frame(self, page_ids, codec: int, out) -> tuple[int, int]:
        """`ckpt_copy` then `frame_recovery_records` (framing.py), one page at a time without the
        intermediate images buffer; returns (bytes framed into out, gap fallbacks)."""
        if codec & 0xFF not in CAPABILITIES.framed_codecs:     # bits 8-23: lz4's acceleration
            raise ValueError(f"codec {codec & 0xFF} is not framed in C")
        ids, n = u64_array(page_ids)
        fallbacks = ffi.new("uint64_t *")
        per = self.page_size + RECORD_HEADER_SIZE
        with ids, ffi.from_buffer("uint8_t[]", out, require_writable=True) as dst:
            if len(dst) < n * per:
                raise ValueError(f"out holds {len(dst)} bytes, {n} records may need {n * per}")
            got = lib.ps_ckpt_copy_frame(self._c, ids, n, int(codec), dst, len(dst), fallbacks)
        if got < 0:
            self._raise(int(got))
        return int(got), fallbacks[0]

    def ckpt_release(self, page_ids) -> None:
        """Pages written in place: clear their in-checkpoint flag, free COW copies."""
        ids, n = u64_array(page_ids)
        with ids:
            lib.ps_ckpt_release(self._c, ids, n)

    def ckpt_end(self) -> None:
        """The checkpoint is over: every page still flagged is released."""
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
