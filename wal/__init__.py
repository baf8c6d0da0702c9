"""wal: the logical write-ahead log (docs/wal-format.md, docs/wal.md).

`format` is the on-disk format shared by writer and reader (and the C
encoder); `segments` owns the slot files; `reader` reads records back
(`record` reads one) and `stop` tells a clean end or a torn tail from
damage; `log.Wal` ties them together with the three
durability modes and group commit; `archive` and `compact` keep trimmed
segments, compacted, and read them back (docs/wal-archive.md). Imports only
`diskio`, the stdlib, `crc32c` and `cramjam`.
"""

from .format import (BLOCK, CHECKPOINT, COMMIT, DELETE, PAGE_DELTA, PAGE_SNAPSHOT, PUT, ROLLBACK,
                     WINDOW, StreamWriter, encode_record)
from .archive import Archive, iter_archive, rebuild, wal_end
from .compact import CompactedFile, finish_interrupted
from .contracts import SegmentSource, WalHandle
from .history import LogHistory, SegmentSizeMismatch
from .log import DEFAULT_FLUSH_INTERVAL, DEFAULT_SEGMENT_SIZE, MODES, Wal
from .reader import Record, RecoveryReport, SegmentMissing, WalRecoveryWarning, committed_records

__all__ = [
    "BLOCK", "CHECKPOINT", "COMMIT", "DELETE", "PAGE_DELTA", "PAGE_SNAPSHOT", "PUT", "ROLLBACK",
    "WINDOW", "StreamWriter", "encode_record", "DEFAULT_FLUSH_INTERVAL", "DEFAULT_SEGMENT_SIZE",
    "MODES", "Wal", "Record", "RecoveryReport", "SegmentMissing", "WalRecoveryWarning", "committed_records",
    "Archive", "iter_archive", "rebuild", "wal_end", "CompactedFile", "finish_interrupted",
    "LogHistory", "SegmentSizeMismatch", "SegmentSource", "WalHandle",
]
