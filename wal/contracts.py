"""What the layers above call on the WAL: a WAL handle and a segment source.

`WalHandle` is what the checkpointer calls (steps 2 and 6 of a checkpoint,
DESIGN.md §3); `wal.Wal` implements both Protocols.

The encoder appends records straight into a segment buffer; when one is
full it asks for the next through the `ps_py_wal_segment` callback, which
the store routes to a `SegmentSource` (`wal.Wal` is one). The callback runs
inside the C core's tree write lock (docs/architecture.md, lock order), so
`segment_for` may take the WAL's segment lock and may do I/O when no spare
segment is ready, but must not call back into the core or wait for the
checkpointer.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["WalHandle", "SegmentSource"]


@runtime_checkable
class WalHandle(Protocol):
    """The two WAL calls a checkpoint makes, from the checkpointer thread."""

    def flush(self, lsn: int):
        """Make the log durable up to `lsn` (the CHECKPOINT record), before START names it."""

    def trim(self, lsn: int) -> None:
        """Records before `lsn` are no longer needed (after END is durable: invariant 3)."""

    def missing(self) -> str | None:
        """The path of a segment file the log still needs that was removed
        under the running store, or None (checked before each checkpoint)."""


@runtime_checkable
class SegmentSource(Protocol):
    """Gives the encoder the writable buffer of segment `seq`, and its disk space."""

    def segment_for(self, seq: int):
        """The buffer of segment `seq` (prepared ahead, or created now)."""

    def reserve(self, seq: int, need: int) -> int:
        """Bytes [0, need) of segment `seq` allocated on disk (`ps_py_wal_grow`,
        when a record would pass the allocated end); the new allocated end,
        or an OSError (ENOSPC) with nothing allocated for the record."""
