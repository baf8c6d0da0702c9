"""Open modes: which directory `open` may use, and how (docs/options.md).

Before anything on disk is touched, `open_engine` decides from what is in
the directory:

  missing, or empty          create=True: a new store is made there;
                             create=False or read_only=True: StoreNotFoundError,
                             and nothing is created
  only a store's names       (diskio.layout.STORE_ENTRIES, `*.tmp`): the store is
                             opened (recovered if it needs it)
  anything else              NotAStoreError naming what was found (an LMDB
                             environment, a LevelDB / RocksDB database, SQLite
                             files, or the files themselves); nothing is changed

`read_only=True` opens through `ReadOnlyEngine` (pagestore/readonly.py),
which writes no file; a store that needs recovery is refused there.
"""

from __future__ import annotations

import fnmatch
import posixpath

from pagestore.diskio import layout

from .errors import NotAStoreError, StoreNotFoundError

__all__ = ["open_engine", "foreign_entries", "describe_foreign"]

# What other stores leave in their directories, by file-name pattern.
_SIGNS = (
    ("an LMDB environment", ("data.mdb", "lock.mdb")),
    ("a LevelDB or RocksDB database", ("CURRENT", "MANIFEST-*", "*.ldb", "*.sst", "LOG", "LOG.old*",
                                       "OPTIONS-*", "IDENTITY")),
    ("SQLite files", ("*.db", "*.sqlite", "*.sqlite3", "*.db-wal", "*.db-shm", "*.db-journal",
                      "*-wal", "*-shm", "*-journal")),
)


def foreign_entries(names) -> list[str]:
    """The names of `names` (a directory's entries) a store directory never holds."""
    return sorted(n for n in names if n not in layout.STORE_ENTRIES and not n.endswith(layout.TMP_SUFFIX))


def describe_foreign(names) -> str:
    """What the foreign entries `names` look like: another store's files, or just files."""
    kinds = [kind for kind, patterns in _SIGNS
             if any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns)]
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    if kinds:
        return f"it looks like {' and '.join(kinds)} ({shown})"
    return f"it holds files that are not a pagestore store's ({shown})"


def _entries(fs, path: str):
    """The directory's entries; None when it does not exist."""
    if not fs.exists(path):
        return None
    try:
        return fs.listdir(path)
    except OSError as e:            # a file, or unreadable: not a store directory either way
        raise NotAStoreError(f"{path} is not a directory a store can use ({e.strerror or e})",
                             path, (posixpath.basename(path),)) from None


def check_directory(fs, path: str, *, create: bool, read_only: bool, archive: str | None = None) -> bool:
    """Refuse a directory `open` must not use (see the module docstring); True
    when a store is there already. `archive` (the wal_archive option) may sit
    in the store directory under any name."""
    names = _entries(fs, path)
    own = ()
    if archive and posixpath.dirname(posixpath.abspath(archive)) == posixpath.abspath(path):
        own = (posixpath.basename(posixpath.abspath(archive)),)
    foreign = [n for n in foreign_entries(names or ()) if n not in own]
    if foreign:
        raise NotAStoreError(f"{path} is not a pagestore store: {describe_foreign(foreign)}; "
                             "refusing to open or create a store there (nothing was changed)",
                             path, foreign)
    exists = bool(names) and any(n in names for n in (layout.PAGE_FILE, layout.WAL_DIR, layout.CP_DIR))
    if not exists and (read_only or not create):
        why = "read_only=True" if read_only else "create=False"
        what = "no such directory" if names is None else f"no {layout.PAGE_FILE}, wal/ or cp/"
        raise StoreNotFoundError(f"{path}: no store there ({what}); {why} creates none", path)
    return exists


def open_engine(path: str, config, fs, *, create: bool = True, read_only: bool = False):
    """The engine of the store in `path`, opened in the mode asked for."""
    check_directory(fs, path, create=create, read_only=read_only, archive=config.wal_archive)
    if read_only:
        from .readonly import ReadOnlyEngine
        return ReadOnlyEngine(path, config, fs)
    from .engine import Engine
    return Engine(path, config, fs)
