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

from .errors import Error, NotAStoreError

__all__ = ["BackupMixin", "backup", "copy_pairs", "remove_tree"]

BATCH_BYTES = 1 << 20       # one put_many of the copy: small next to any page memory


class BackupMixin:
    """`backup`, for `Database`."""

    def backup(self, dest) -> dict:
        """Write a consistent copy of the store, as of this call, to the new
        directory `dest` (missing or empty) while writers go on; returns
        {"path", "keys", "bytes", "seconds"}. The copy opens and verifies on
        its own (pagestore/backup.py)."""
        return backup(self, dest)


def copy_pairs(pairs, target) -> tuple[int, int]:
    """put_many every (key, value) of `pairs` into `target` in batches; (keys, bytes)."""
    keys = size = 0
    batch, batch_bytes = [], 0
    for k, v in pairs:
        batch.append((k, v))
        batch_bytes += len(k) + len(v)
        if batch_bytes >= BATCH_BYTES:
            target.put_many(batch)
            keys, size = keys + len(batch), size + batch_bytes
            batch, batch_bytes = [], 0
    if batch:
        target.put_many(batch)
        keys, size = keys + len(batch), size + batch_bytes
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


def backup(db, dest) -> dict:
    """See `BackupMixin.backup`."""
    from .database import Database
    t0 = time.perf_counter()
    dest, fs = os.fspath(dest), db.fs
    snap = db.snapshot()                # the moment the copy is of: before any check can wait
    try:
        inside = posixpath.abspath(dest) + "/"
        if inside.startswith(posixpath.abspath(db.path) + "/"):
            raise Error(f"backup destination {dest} is inside the store {db.path}: choose another directory")
        existed = fs.exists(dest)
        if existed and fs.listdir(dest):
            raise NotAStoreError(f"backup destination {dest} is not empty: a backup makes a new store",
                                 dest, fs.listdir(dest))
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
    finally:
        snap.release()
    return {"path": dest, "keys": keys, "bytes": size, "seconds": time.perf_counter() - t0}
