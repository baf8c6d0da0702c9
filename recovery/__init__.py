"""recovery: make the page files consistent after a crash (DESIGN.md §3 table).

`recover()` decides from the markers in cp/ whether pages must be restored
(from recovery files, or from WAL page records in legacy mode) and returns
where logical WAL replay starts. It knows pages only as opaque images.
"""

from .physical import PageRecordsInvalid, rebuild_from_wal
from .restore import MarkerCorrupt, RecoveryError, RecoveryFileCorrupt, RecoveryResult, recover

__all__ = ["recover", "RecoveryResult", "RecoveryError", "RecoveryFileCorrupt", "MarkerCorrupt",
           "PageRecordsInvalid", "rebuild_from_wal"]
