"""What the checkpointer calls: its page source, page sink and framing fast path.

These Protocols are the whole contract between `checkpoint` and the layer
above it (`pagestore` implements them over the C core in
`pagestore/page_source.py` and `pagestore/pagefile.py`; the tests' fakes
implement them in Python); the WAL it calls is a `wal.WalHandle`
(wal/contracts.py). The checkpointer and its writer pool call exactly the
methods listed there and here and nothing else, so an object that satisfies these
Protocols can be checkpointed (`isinstance` works: they are runtime-checkable).

Threads: `begin` and `finish` are called by the checkpointer thread only;
`copy_pages`, `copy_frame`, `release`, `write_pages` by up to `threads` writer
threads at once; `checkpoint_buffer` and `pages_with_copy` by any writer while
it picks its next chunk. No method is called with the checkpointer's
condition held (lock order: docs/architecture.md).
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

__all__ = ["Snapshot", "PageSource", "PageSink", "RecoveryFraming"]


@runtime_checkable
class Snapshot(Protocol):
    """What `PageSource.begin` returns: the checkpoint's page set and replay pointer."""

    page_ids: Sequence[int]       # every page of the checkpoint (sorted or not)
    wal_lsn: int                  # the LSN of the CHECKPOINT record: the replay pointer
    lock_seconds: float           # how long the source held its write lock


@runtime_checkable
class PageSource(Protocol):
    """Where a checkpoint's page images come from (DESIGN.md §3 steps 1, 3, 5, 6)."""

    page_size: int

    def begin(self, checkpoint_id: int) -> Snapshot:
        """Step 1, under the source's write lock: fix the dirty set, log CHECKPOINT."""

    def copy_pages(self, page_ids, out) -> None:
        """The checkpoint image of each page (its copy-on-write copy or the live
        page) into `out`, `page_size` bytes each, CRC stamped."""

    def release(self, page_ids) -> None:
        """The pages are on disk: drop their copies; they are clean (evictable) now."""

    def finish(self) -> None:
        """The checkpoint is over (END durable)."""

    def checkpoint_buffer(self) -> tuple:
        """(bytes or pages used, capacity, peak) of the copy-on-write buffer."""

    def pages_with_copy(self) -> Sequence[int]:
        """In-checkpoint pages holding a copy-on-write copy (written first when the buffer fills)."""


@runtime_checkable
class PageSink(Protocol):
    """Where pages go in place (step 5) and where recovery restores them."""

    def missing(self) -> str | None:
        """The page file's path if it was removed under the running store, else None."""

    def write_pages(self, page_ids, images) -> None:
        """Write `len(page_ids)` images of `page_size` bytes each at their pages."""

    def sync(self) -> None:
        """Make every page written so far durable."""


@runtime_checkable
class RecoveryFraming(Protocol):
    """The optional C fast path for recovery-file records (checkpoint/recovery_file.py).

    Handed to the `Checkpointer` as an explicit object (or None: the Python
    framing, which is the reference the fast path is tested against).
    """

    def frame_records(self, page_ids, images, page_size: int, codec: int, out) -> tuple:
        """Frame plain records of `images` into `out`: (bytes, gap fallbacks). `codec` is
        the codec's `PageCodec.frame_code` (its id, with lz4's acceleration)."""

    def compact_pages(self, images, n: int, page_size: int, compact, lens, flags) -> int:
        """Remove the free gap of `n` pages in bulk; returns gap fallbacks."""

    def frame_heads(self, out, page_ids, codecs, flags, lens) -> None:
        """Write every record header and CRC around already placed payloads."""

    def copy_frame(self, page_ids, codec: int, out) -> tuple:
        """`PageSource.copy_pages` and `frame_records` in one pass: (bytes, gap fallbacks)."""
