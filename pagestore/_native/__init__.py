"""The thin binding over the C core, one module per C area (docs/native-api.md).

This package is the only importer of the cffi extension `pagestore._core`
(and fastget.py of the read path's extension `pagestore._fastget`);
everything else in pagestore imports the binding from here. Its modules
follow the C files they bind:

    core.py       Core: page memory, B+tree, WAL encoder, checkpoint hooks (core.c, btree.c, ...)
    callbacks.py  the two Python callbacks the core calls under its tree lock
    batches.py    the packed-operations format of Core.apply_batch
    wal.py        replay's bulk scanner of WAL segments (walscan.c)
    framing.py    recovery-file records in bulk (recframe.c)
    sealing.py    AES-256-GCM of pages and recovery-file records (pageseal.c)
    paging.py     page CRC stamps, the meta page, in-place page writes (crc32c.c, pagemem.c)
    gcommit.py    GroupCommit: group commit's wait, in C (gcommit.c)
    reads.py      get_many: point gets in bulk, one C call per batch (getmany.c)
    fastget.py    point gets with the GIL held, over the extension pagestore._fastget (fastget.c)
    capabilities.py  what the C core could load here (liblz4, libcrypto, AES-NI, SSE4.2)
    testing.py    entry points only tests call (csrc/ps_test.h)

The format facts below come from csrc/ps_api.h, the one place they are
written: Python code of this package reads them here instead of restating
them (the layers under pagestore keep their own and a test pins them equal).
"""

from __future__ import annotations

from .._core import ffi as ffi, lib   # ffi: the area modules take it from here

# -- status codes --------------------------------------------------------------
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

# -- limits --------------------------------------------------------------------
MAX_KEY = lib.PS_MAX_KEY
MAX_VALUE = lib.PS_MAX_VALUE
MIN_PAGE_SIZE = lib.PS_MIN_PAGE
MAX_PAGE_SIZE = lib.PS_MAX_PAGE

# -- pages (docs/page-format.md) ------------------------------------------------
PAGE_FORMAT = lib.PS_PAGE_FORMAT
META_FORMAT_VERSION = lib.PS_META_VERSION
PAGE_HEADER_SIZE = lib.PS_PAGE_HEADER_SIZE
PH_CRC = lib.PS_PH_CRC
PH_TYPE = lib.PS_PH_TYPE
PH_FORMAT = lib.PS_PH_FORMAT
PH_PAGE_ID = lib.PS_PH_PAGE_ID
PH_CHECKPOINT_ID = lib.PS_PH_CHECKPOINT_ID
PH_FREE_LO = lib.PS_PH_FREE_LO
PH_FREE_HI = lib.PS_PH_FREE_HI
PH_RESERVED = lib.PS_PH_RESERVED
MH_MAGIC = lib.PS_MH_MAGIC
MH_VERSION = lib.PS_MH_VERSION
MH_PAGE_SIZE = lib.PS_MH_PAGE_SIZE
MH_ROOT = lib.PS_MH_ROOT
MH_PAGE_COUNT = lib.PS_MH_PAGE_COUNT
MH_FREE_HEAD = lib.PS_MH_FREE_HEAD
MH_KEY_COUNT = lib.PS_MH_KEY_COUNT
MH_HEIGHT = lib.PS_MH_HEIGHT
MH_RESERVE = lib.PS_MH_RESERVE
MH_END = lib.PS_MH_END
SEALED_PAGE_TRAILER = lib.PS_SEALED_PAGE_TRAILER

PAGE_META = lib.PS_PAGE_META
PAGE_LEAF = lib.PS_PAGE_LEAF
PAGE_INNER = lib.PS_PAGE_INNER
PAGE_OVERFLOW = lib.PS_PAGE_OVERFLOW
PAGE_FREELIST = lib.PS_PAGE_FREELIST

# -- WAL (docs/wal-format.md) ----------------------------------------------------
WAL_BLOCK = lib.PS_WAL_BLOCK
WAL_BLOCK_HDR = lib.PS_WAL_BLOCK_HDR
WAL_REC_HDR = lib.PS_WAL_REC_HDR
REC_PUT = lib.PS_REC_PUT
REC_DELETE = lib.PS_REC_DELETE
REC_COMMIT = lib.PS_REC_COMMIT
REC_CHECKPOINT = lib.PS_REC_CHECKPOINT
REC_PAGE_SNAPSHOT = lib.PS_REC_PAGE_SNAPSHOT
REC_PAGE_DELTA = lib.PS_REC_PAGE_DELTA
REC_ROLLBACK = lib.PS_REC_ROLLBACK

# -- codecs and recovery-file records (docs/recovery-files.md) --------------------
CODEC_DISABLED = lib.PS_CODEC_DISABLED
CODEC_SKIP_GARBAGE = lib.PS_CODEC_SKIP_GARBAGE
CODEC_SNAPPY = lib.PS_CODEC_SNAPPY
CODEC_ZSTD = lib.PS_CODEC_ZSTD
CODEC_LZ4 = lib.PS_CODEC_LZ4
SNAP_GAP_BIT = lib.PS_SNAP_GAP_BIT
RECFILE_HEADER_SIZE = lib.PS_RECFILE_HEADER_SIZE
RECORD_HEADER_SIZE = lib.PS_RECORD_HEADER_SIZE
RECORD_CRC_SPAN = lib.PS_RECORD_CRC_SPAN
RECORD_GAP_SKIPPED = lib.PS_RECORD_GAP_SKIPPED
RECORD_ENCRYPTED = lib.PS_RECORD_ENCRYPTED
RECORD_SEAL_OVERHEAD = lib.PS_RECORD_SEAL_OVERHEAD
RECORD_MAX_OVER_PAGE = lib.PS_RECORD_MAX_OVER_PAGE

# The area modules read the names above from this package: imported last.
from .status import NativeError, Retry  # noqa: E402
from .capabilities import CAPABILITIES, Capabilities, lz4_available, wal_seal_available  # noqa: E402
from .batches import OP_DELETE, OP_PUT, pack_ops, pack_puts, unpack_ops  # noqa: E402
from .core import SNAPSHOT_CODECS, Core  # noqa: E402
from .wal import WAL_SCAN_CHUNK, WalScanner, wal_scan  # noqa: E402
from .framing import (RecordFramer, compact_pages, frame_record_heads,  # noqa: E402
                      frame_recovery_records, parse_recovery_records)
from .sealing import open_pages, seal_pages, seal_records  # noqa: E402
from .paging import check_page, file_header_info, pwrite_pages, seal_page  # noqa: E402
from .gcommit import GroupCommit  # noqa: E402
from .reads import get_many  # noqa: E402
from .fastget import SLOW, get_method, reader  # noqa: E402

__all__ = [
    "Core", "Retry", "NativeError", "SNAPSHOT_CODECS", "Capabilities", "CAPABILITIES",
    "pack_ops", "pack_puts", "unpack_ops", "OP_PUT", "OP_DELETE",
    "WalScanner", "wal_scan", "WAL_SCAN_CHUNK", "wal_seal_available", "lz4_available",
    "RecordFramer", "frame_recovery_records", "compact_pages", "frame_record_heads",
    "parse_recovery_records", "seal_pages", "seal_records", "open_pages",
    "seal_page", "check_page", "file_header_info", "pwrite_pages", "GroupCommit", "get_many", "SLOW", "reader", "get_method",
    "MAX_KEY", "MAX_VALUE", "MIN_PAGE_SIZE", "MAX_PAGE_SIZE", "PAGE_HEADER_SIZE",
    "RECORD_HEADER_SIZE", "RECFILE_HEADER_SIZE",
]
