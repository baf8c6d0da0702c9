"""The store directory's file names: one grammar for writers, readers and tools.

Every name a store writes, or a reader or tool looks for, is built and parsed
here. It sits in diskio, the lowest layer, because the WAL, the checkpointer,
recovery, the facade and the tools all name files and may all import diskio;
nothing here touches a file.

    <store>/LOCK                                 flock of the process that has the store open
    <store>/pages.dat                            the page file (docs/page-format.md)
    <store>/wal/seg-<slot:08d>.wal               WAL slot files; the slot number is not the
                                                 segment's seq (its header says which seq)
    <store>/wal/seg-<slot:08d>.wal.tail-<lsn>    set aside by recovery: a torn tail or a
                                                 slot off the log's chain, cut at lsn
    <store>/wal/NEWEST                           the newest segment the writer began (wal/newest.py)
    <store>/cp/<id:016d>-START.bin               checkpoint markers (docs/recovery-files.md)
    <store>/cp/<id:016d>-END.bin
    <store>/cp/<id:016d>-RECOVERY-<writer:03d>.bin   recovery files, one per writer thread
    <archive>/seg-<seq:016d>.wal                 a trimmed segment, copied (docs/wal-archive.md)
    <archive>/seg-<first seq:016d>.walc          archived segments compacted into one file
    <any>.tmp                                    a file being written atomically: never read
    <store>/compact.tmp/                         a compacted copy being built (a store of its own);
                                                 only its pages.dat is ever renamed into place

Every name a store directory may hold is in STORE_ENTRIES (or ends in .tmp):
opening refuses a directory holding anything else, as not a store's.

Zero padding makes names sort in id order. A name this grammar does not parse
is not the store's to interpret: scans skip it (temp files, copies an
operator put aside).
"""

from __future__ import annotations

import re

__all__ = [
    "LOCK", "PAGE_FILE", "WAL_DIR", "NEWEST", "CP_DIR", "ARCHIVE_DIR", "TMP_SUFFIX", "COMPACT_DIR", "STORE_ENTRIES",
    "slot_name", "parse_slot", "tail_name", "parse_tail",
    "marker_name", "recovery_file_name", "parse_cp_name",
    "archive_name", "compacted_name", "parse_archive_name",
]

LOCK = "LOCK"
PAGE_FILE = "pages.dat"
WAL_DIR = "wal"
NEWEST = "NEWEST"             # in WAL_DIR: names the newest segment begun (wal/newest.py)
CP_DIR = "cp"
ARCHIVE_DIR = "archive"       # where `inspect` looks for an archive when none is named
TMP_SUFFIX = ".tmp"
COMPACT_DIR = "compact.tmp"
STORE_ENTRIES = frozenset((LOCK, PAGE_FILE, WAL_DIR, CP_DIR, ARCHIVE_DIR, COMPACT_DIR))

_SLOT = re.compile(r"^seg-(\d{8})\.wal$")
_TAIL = re.compile(r"^(seg-\d{8}\.wal)\.tail-(\d+)$")
_CP = re.compile(r"^(\d{16})-(START|END|RECOVERY-(\d{3}))\.bin$")
_ARCHIVED = re.compile(r"^seg-(\d{16})\.(wal|walc)$")


def slot_name(number: int) -> str:
    """File name of WAL slot `number`."""
    return f"seg-{number:08d}.wal"


def parse_slot(name: str) -> int | None:
    """The slot number of a WAL slot file name, or None."""
    m = _SLOT.match(name)
    return int(m.group(1)) if m else None


def tail_name(slot_file: str, stop_lsn: int) -> str:
    """The name (or path: it only appends) of a slot file set aside at `stop_lsn`."""
    return f"{slot_file}.tail-{stop_lsn}"


def parse_tail(name: str) -> tuple[str, int] | None:
    """(slot file name, stop lsn) of a set-aside file name, or None."""
    m = _TAIL.match(name)
    return (m.group(1), int(m.group(2))) if m else None


def marker_name(checkpoint_id: int, kind: str) -> str:
    """File name of a checkpoint's "START" or "END" marker in cp/."""
    if kind not in ("START", "END"):
        raise ValueError(f"marker kind must be 'START' or 'END', got {kind!r}")
    return f"{checkpoint_id:016d}-{kind}.bin"


def recovery_file_name(checkpoint_id: int, writer: int) -> str:
    """File name of writer thread `writer`'s recovery file of a checkpoint in cp/."""
    return f"{checkpoint_id:016d}-RECOVERY-{writer:03d}.bin"


def parse_cp_name(name: str) -> tuple[int, str, int | None] | None:
    """(checkpoint_id, "START" | "END" | "RECOVERY", writer or None), or None."""
    m = _CP.match(name)
    if m is None:
        return None
    if m.group(3) is not None:
        return int(m.group(1)), "RECOVERY", int(m.group(3))
    return int(m.group(1)), m.group(2), None


def archive_name(seq: int) -> str:
    """File name of the archived copy of segment `seq`."""
    return f"seg-{seq:016d}.wal"


def compacted_name(first_seq: int) -> str:
    """File name of a compacted archive file whose first segment is `first_seq`."""
    return f"seg-{first_seq:016d}.walc"


def parse_archive_name(name: str) -> tuple[int, str] | None:
    """(seq, "wal" | "walc") of an archive file name, or None."""
    m = _ARCHIVED.match(name)
    return (int(m.group(1)), m.group(2)) if m else None
