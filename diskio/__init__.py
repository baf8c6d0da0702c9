"""diskio: the one file-system layer of pagestore (docs/diskio-api.md).

Every open, read, write, fsync, rename, directory fsync, mmap and lock in the
project goes through a `FileSystem`: `PosixFS` (buffered or O_DIRECT) or
`SimFS` (the in-memory crash simulator). Named crash points are registered in
`CRASH_POINTS`. `layout` is the grammar of the store directory's file names.
This package imports nothing else of the project.
"""

from .aligned import ALIGNMENT, aligned_buffer, is_aligned
from .base import File, FileSystem, Lock, Mapping
from .crashpoints import CRASH_POINTS
from .errors import DiskIOError, FileExistsDiskError, LockedError, NotFoundError, SimulatedCrash
from .posix import CRASH_ENV, PosixFS
from .sim import SimFS, SimSnapshot
from .simcrash import CrashReport

__all__ = [
    "ALIGNMENT",
    "CRASH_ENV",
    "CRASH_POINTS",
    "CrashReport",
    "DiskIOError",
    "File",
    "FileExistsDiskError",
    "FileSystem",
    "Lock",
    "LockedError",
    "Mapping",
    "NotFoundError",
    "PosixFS",
    "SimFS",
    "SimSnapshot",
    "SimulatedCrash",
    "aligned_buffer",
    "is_aligned",
]
