"""What recovery needs from the store it opens, as a Protocol.

Recovery (recovery/opening.py) may import only `checkpoint`, `wal` and
`diskio`; the page file and the C core belong to `pagestore`, which hands
them in as one `RecoveringStore` (pagestore/engine.py implements it). The
methods are called in the order of DESIGN.md §3's recovery table, from the
opening thread only, before any other thread exists.
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol, runtime_checkable

__all__ = ["RecoveringStore"]


@runtime_checkable
class RecoveringStore(Protocol):
    """The page file and page memory of a store being opened."""

    page_size: int
    pages_path: str                    # the page file, for messages
    # The C scanner of simple WAL records (wal.reader.committed_raw), or None.
    wal_scanner: Optional[Callable]

    # -- restore (a checkpoint.PageSink, plus what restoring needs) ----------
    def write_pages(self, page_ids, images) -> None:
        """Write restored images in place and keep them resident for the replay."""

    def sync(self) -> None:
        """Make the restored pages durable."""

    def seal_page(self, buf, page_id: int, page_size: int) -> None:
        """Stamp page id and CRC into an image rebuilt from WAL page records."""

    def parse_recovery_records(self, buf, page_size: int, images, ids) -> tuple:
        """Decode recovery records in bulk (checkpoint.recovery_file's parser)."""

    # -- the page file and the core ----------------------------------------------
    def is_new(self) -> bool:
        """The page file is empty or was just created."""

    def checkpoint_of_page_file(self) -> int:
        """The id of the checkpoint that last wrote the page file's meta page
        (its page header), 0 when it cannot be read."""

    def check_header(self) -> None:
        """Page 0 says the file is ours, with our page size; raises otherwise."""

    def format_new(self) -> None:
        """Build an empty store in page memory."""

    def open_existing(self) -> None:
        """Read the meta page of the page file into the core."""

    def page_count(self) -> int:
        """Pages in the page file."""

    def preload(self) -> None:
        """Read the page file sequentially into free page memory."""

    # -- replay and the WAL -----------------------------------------------------
    def apply_log(self, raw: bytes) -> int:
        """Apply committed raw WAL records; returns how many. Raises the store's
        configuration error when page memory cannot hold the pages they dirty."""

    def use_wal(self, wal) -> None:
        """Take ownership of the opened `wal.Wal` (the store closes it)."""

    def attach_wal(self) -> None:
        """Replay is over: hand the WAL's write position to the encoder."""
