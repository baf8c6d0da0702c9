"""recovery: make the page files consistent after a crash (DESIGN.md §3 table).

`recover()` decides from the markers in cp/ whether pages must be restored
(from recovery files, or from WAL page records in legacy mode) and returns
where logical WAL replay starts; `open_store()` (opening.py) is the whole
open sequence around it: restore, replay, and the checkpoint that ends
recovery, against a `RecoveringStore` the store hands in. It knows pages only
as opaque images.
"""

from .contracts import RecoveringStore
from .opening import Opened, PagesLost, open_store
from .physical import PageRecordsInvalid, rebuild_from_wal
from .restore import MarkerCorrupt, RecoveryError, RecoveryFileCorrupt, RecoveryResult, recover

__all__ = ["recover", "RecoveryResult", "RecoveryError", "RecoveryFileCorrupt", "MarkerCorrupt",
           "PageRecordsInvalid", "rebuild_from_wal", "open_store", "Opened", "PagesLost",
           "RecoveringStore"]
