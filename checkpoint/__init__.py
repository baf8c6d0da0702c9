"""checkpoint: IEP-113 checkpoints of opaque pages (DESIGN.md §3, docs/checkpoint.md).

`Checkpointer` runs the protocol against a PageSource / PageSink handed in by
`pagestore` (the Protocols of `contracts`); `format` holds the recovery-file and marker formats that
`recovery` reads back; `compression` the page codecs. Nothing here knows what
is inside a page beyond the common header's free gap.
"""

from .checkpointer import DEFAULT_INTERVAL, DEFAULT_THREADS, STATES, Checkpointer, CheckpointerError
from .compression import CODECS, PageCodec
from .contracts import PageSink, PageSource, RecoveryFraming, Snapshot
from .format import MarkerCorrupt, RecoveryFileCorrupt

__all__ = ["Checkpointer", "CheckpointerError", "DEFAULT_INTERVAL", "DEFAULT_THREADS", "STATES",
           "CODECS", "PageCodec", "MarkerCorrupt", "RecoveryFileCorrupt",
           "PageSource", "PageSink", "Snapshot", "RecoveryFraming"]
