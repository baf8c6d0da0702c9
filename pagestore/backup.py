"""`Database.backup(dest)`: a hot, consistent copy of an open store.

The copy is one moment of the store: a snapshot (pagestore/snapshot.py)
taken when `backup` is called, so every write acknowledged before the call
is in it and none that starts after it, while writers go on. Its key-value
pairs are written in key order into a new store at `dest`, opened with the
source's options (page size, encryption key, ...; no WAL archive), which is
then closed: its last checkpoint makes it whole and durable, and it opens
and verifies like any store (`python -m pagestore verify DEST`). Being
written afresh, the copy holds no free pages (like LMDB's compacting copy).

Writers outpacing the copy make the snapshot keep before-images; past the
`snapshot_memory` option it is dropped and `backup` raises
SnapshotTooOldError (a larger `snapshot_memory` lets it through). On any
failure the files the copy made at `dest` are removed again.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import time

from pagestore.diskio import PosixFS

from . import faults
from .errors import Error, NotAStoreError, SnapshotTooOldError

__all__ = ["PAIR_BYTES", "BackupMixin", "backup", "batch_bytes", "copy_pairs", "outran", "remove_tree"]

BATCH_BYTES = 1 << 20       # one put_many of the copy, at most (batch_bytes)
PAIR_BYTES = 16             # a pair's cell header and slot in its leaf, with slack: what a
                            # batch is charged for a pair beside its key and value bytes


class BackupMixin:
    """`backup`, for `Database`."""

    def backup(self, dest) -> dict:
        """Write a consistent copy of the store, as of this call, to the new
        directory `dest` (missing or empty) while writers go on; returns
        {"path", "keys", "bytes", "seconds"}. The copy opens and verifies on
        its own (pagestore/backup.py). A `dest` that is a file, not empty or
        a symbolic link to nothing (itself or a directory above it) raises
        NotAStoreError, an empty path ConfigError, before anything is
        written. A compact() of the store waits for it, or it for one (the
        copy's snapshot would not outlive the compaction's swap). Writes that
        outgrow `snapshot_memory` while it copies make it raise
        SnapshotTooOldError, nothing left at `dest`."""
        with self._one_at_a_time():
            return backup(self, dest)


def batch_bytes(config) -> int:
    """The bytes of one put_many of a copy into a store of options `config`:
    1 MiB, or an eighth of its page memory when that is less (a batch must
    fit in page memory, whose pages it holds until it commits)."""
    return min(BATCH_BYTES, config.memory_size // 8)


def copy_pairs(pairs, target) -> tuple[int, int]:
    """put_many every (key, value) of `pairs`, in key order, into `target` in
    batches that fit its page memory (`batch_bytes`); (keys, bytes)."""
    keys = size = 0
    most = batch_bytes(target.config)
    batch, batch_bytes_now = [], 0
    for k, v in pairs:
        batch.append((k, v))
        batch_bytes_now += len(k) + len(v) + PAIR_BYTES
        if batch_bytes_now >= most:
            target.put_many(batch)
            keys, size = keys + len(batch), size + batch_bytes_now
            batch, batch_bytes_now = [], 0
    if batch:
        target.put_many(batch)
        keys, size = keys + len(batch), size + batch_bytes_now
    return keys, size


def remove_tree(fs, path: str) -> None:
    """Remove every file under `path` (directories too, on the real file system)."""
    if not fs.exists(path):
        return
    try:
        names = fs.listdir(path)
    except OSError:
        fs.remove(path)
        return
    for name in names:
        remove_tree(fs, posixpath.join(path, name))
    if isinstance(fs, PosixFS):
        os.rmdir(path)


def copy_config(db):
    """The source's options for a copy: everything but a WAL archive (the copy's
    log must not land in the source's archive)."""
    return dataclasses.replace(db.config, wal_archive=None)


def _entries(fs, dest: str):
    """The names in `dest`, None when it does not exist; NotAStoreError when it
    is a file or cannot be listed (a backup needs a directory of its own)."""
    if not fs.exists(dest):
        return None
    try:
        return fs.listdir(dest)
    except OSError as e:
        raise NotAStoreError(f"backup destination {dest} is not a directory a store can use "
                             f"({e.strerror or e}): a backup makes a new store", dest,
                             (posixpath.basename(dest),)) from None


def _refuse_dangling_link(dest: str) -> None:
    """NotAStoreError when `dest`, or a directory above it, is a symbolic link
    to a path that does not exist: the copy would be made wherever the link
    points, so rather than create its target, `backup` names the link."""
    path = dest
    while True:
        if os.path.islink(path) and not os.path.exists(path):
            where = "" if path == dest else f": {path} above it"
            raise NotAStoreError(
                f"backup destination {dest}{where} is a symbolic link to {os.path.realpath(path)}, which does "
                "not exist: create the directory it points to, or choose another destination",
                dest, ())
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


def backup(db, dest) -> dict:
    """See `BackupMixin.backup`."""
    t0 = time.perf_counter()
    from .database import store_path
    dest = store_path(dest, absolute=isinstance(db.fs, PosixFS), what="backup: the destination path",
                      option="dest")
    snap = db.snapshot()                # the moment the copy is of: before any check can wait
    try:
        keys, size = _copy(db, snap, dest)
    except SnapshotTooOldError as e:
        raise outran(db, "backup", f"nothing is left at {dest}") from e
    except Exception as e:  # noqa: BLE001 - an inner layer's failure becomes a pagestore.Error
        faults.reraise(e, "backup")
    finally:
        snap.release()
    return {"path": dest, "keys": keys, "bytes": size, "seconds": time.perf_counter() - t0}


def outran(db, operation: str, left: str) -> SnapshotTooOldError:
    """The error of a backup or compaction whose copy's snapshot was dropped:
    the writes made meanwhile outgrew `snapshot_memory`."""
    mib = db.config.snapshot_memory / (1 << 20)
    return SnapshotTooOldError(
        f"{operation} of {db.path}: the writes made while it copied the store outgrew snapshot_memory "
        f"({mib:g} MiB), which its consistent copy needs; {left}. Run it when writes are quieter, or "
        f"open the store with a larger snapshot_memory")


def _copy(db, snap, dest: str) -> tuple[int, int]:
    """Check `dest`, write `snap`'s pairs into a new store there; (keys, bytes).
    On a failure after the checks, what it created at `dest` is removed."""
    from .database import Database
    fs = db.fs
    real = os.path.realpath if isinstance(fs, PosixFS) else posixpath.abspath   # a symlink may lead inside
    if (real(dest) + "/").startswith(real(db.path) + "/"):
        raise Error(f"backup destination {dest} is inside the store {db.path}: choose another directory")
    if isinstance(fs, PosixFS):
        _refuse_dangling_link(dest)
    names = _entries(fs, dest)
    existed = names is not None
    if names:
        raise NotAStoreError(f"backup destination {dest} is not empty: a backup makes a new store",
                             dest, names)
    try:
        target = Database(dest, copy_config(db), fs)
        try:
            keys, size = copy_pairs(snap.scan(), target)
        finally:
            target.close()
        fs.fsync_dir(posixpath.dirname(posixpath.abspath(dest)))
    except Exception:
        try:
            remove_tree(fs, dest) if not existed else [remove_tree(fs, posixpath.join(dest, n))
                                                       for n in fs.listdir(dest)]
        except Exception:  # noqa: BLE001 - the copy's own failure is the one to report
            pass
        raise
    return keys, size
