"""`Database.compact()`: hand free pages back, so the page file shrinks, online.

Deleting keys frees pages into the page file's freelist; new pages reuse
them, but the file never gets shorter. `compact` writes the store afresh,
densely, and puts that page file in place of the old one:

  1. online: a snapshot's pairs are copied into a new store built in
     <store>/compact.tmp/ (backup.py's copy) while writers go on;
  2. paused (calls wait, state PAUSED): the store is closed -- its last
     checkpoint makes pages.dat hold every write so far, with nothing left
     to replay in the WAL -- and reopened to bring the copy up to date with
     the writes made during step 1 (both walked in key order; only the
     differences are written); both are closed, so the copy is durable;
  3. the copy's page file is renamed over pages.dat (one atomic rename) and
     the store directory fsynced; compact.tmp/ is removed;
  4. the store is opened again on the new page file and the waiting calls
     go on. The WAL and checkpoint markers stay the store's own: after step
     2 either page file is whole as of the last complete checkpoint, and
     the log holds nothing past it, so recovery accepts either.

A crash anywhere leaves a store that opens with every acknowledged write:
before the rename, the old page file with compact.tmp/ beside it (ignored,
and removed by the next compact); after it, the old or the new page file
(both whole as of the same checkpoint) until the directory is durable,
then the new one. Crash points: "compact.copy_durable" (step 2 done, nothing
renamed) and "compact.page_file_renamed" (renamed, directory not fsynced).

While paused, a call that had already reached the old C core gets
ClosedError from it and runs again on the new one (`swapped`). Snapshots,
scans in progress and transactions opened before the pause belong to the
closed core: they raise ClosedError afterwards.
"""

from __future__ import annotations

import os
import posixpath
import threading
import time

from pagestore.diskio import PosixFS, layout

from .backup import copy_config, copy_pairs, remove_tree

__all__ = ["CompactMixin", "space"]

_ONE_AT_A_TIME = threading.Lock()       # a second compact() waits for the first


class CompactMixin:
    """`compact` and the space figures of `stats`, for `Database` (whose
    state, engine and checks these methods use as their own)."""

    _resume: threading.Event | None = None      # set while PAUSED, until the swap ends

    def compact(self) -> dict:
        """Rewrite the store densely and shrink its page file, while it stays
        open (calls wait for the final swap); returns the figures before and
        after ("disk_bytes_before", "disk_bytes_after", ...). See
        pagestore/compaction.py for how it stays crash-safe."""
        return self._compact()

    def _wait_resumed(self) -> None:
        """A call that found the store PAUSED: wait for the swap, then check again."""
        if self._resume is not None:
            self._resume.wait()
        self._check_open()

    def _swapped_core(self) -> bool:
        """A ClosedError from the core: True when compact() replaced that core and
        the store is open again, so the call may run again on the new one."""
        from .database import State
        if self._state is State.PAUSED:
            self._resume.wait()
        core = self._engine.core
        return self._state is State.OPEN and core is not None and not core.closed

    def _compact(self) -> dict:
        with _ONE_AT_A_TIME:
            self._check_writable("compact")
            return _rewrite(self)

    def _pause(self) -> None:
        from .database import State
        self._resume = threading.Event()
        self._state = State.PAUSED

    def _resume_with(self, engine) -> None:
        """End the pause: on `engine` (None: the store could not be opened again, CLOSED)."""
        from .database import State
        if engine is not None:
            self._bind(engine)
        self._state = State.OPEN if engine is not None else State.CLOSED
        self._resume.set()

    def _page_cipher(self):
        """The cipher the store's pages are sealed with, or None."""
        return getattr(self._engine, "cipher", None)

    def _close_engine(self) -> None:
        self._engine.close(final_checkpoint=True)

    def _space(self) -> dict:
        return space(self.fs, self.path, getattr(self._engine, "cipher", None), self.checkpoint_state)


def _catch_up(source, target) -> int:
    """Make `target` hold exactly `source`'s pairs; returns how many changed."""
    puts, deletes = [], []
    src, dst = iter(source.scan()), iter(target.scan())
    a, b = next(src, None), next(dst, None)
    while a is not None or b is not None:
        if b is None or (a is not None and a[0] < b[0]):
            puts.append(a)
            a = next(src, None)
        elif a is None or b[0] < a[0]:
            deletes.append(b[0])
            b = next(dst, None)
        else:
            if a[1] != b[1]:
                puts.append(a)
            a, b = next(src, None), next(dst, None)
    copy_pairs(puts, target)
    for k in deletes:
        target.delete(k)
    return len(puts) + len(deletes)


def _rewrite(db) -> dict:
    """`CompactMixin.compact`'s steps (the module docstring)."""
    from .database import Database
    from .engine import Engine
    fs, path = db.fs, db.path
    tmp = posixpath.join(path, layout.COMPACT_DIR)
    before = db._space()
    t0 = time.perf_counter()
    remove_tree(fs, tmp)                 # what an interrupted compaction left
    # 1. the bulk of the copy, online
    with db.snapshot() as snap:
        target = Database(tmp, copy_config(db), fs)
        try:
            copy_pairs(snap.scan(), target)
        except BaseException:
            target.close()
            remove_tree(fs, tmp)
            raise
    # 2.-4. paused
    t_pause = time.perf_counter()
    db._pause()
    engine = None
    try:
        db._close_engine()
        with Database(path, db.config, fs) as reader:
            changed = _catch_up(reader, target)
        target.close()
        _adopt(fs, path, tmp, db.config.page_size, db._page_cipher())
        fs.crash_point("compact.copy_durable")
        fs.rename(posixpath.join(tmp, layout.PAGE_FILE), posixpath.join(path, layout.PAGE_FILE))
        fs.crash_point("compact.page_file_renamed")
        fs.fsync_dir(path)
        fs.fsync_dir(tmp)
        remove_tree(fs, tmp)
        wal_freed = _release_spare_segments(fs, path)
        engine = Engine(path, db.config, fs)
    except Exception:
        # The old engine is closed; what is on disk is a whole store (the
        # old page file or the new one): open it again if it will.
        try:
            target.close()
            engine = Engine(path, db.config, fs)
        except Exception:  # noqa: BLE001 - the compaction's own error is the one to raise
            pass
        raise
    finally:                             # a simulated crash or an interrupt: no I/O, CLOSED
        db._resume_with(engine)
    paused = time.perf_counter() - t_pause
    after = db._space()
    return {"disk_bytes_before": before["disk_bytes"], "disk_bytes_after": after["disk_bytes"],
            "free_pages_before": before["free_pages"], "free_pages_after": after["free_pages"],
            "changed_while_copying": changed, "wal_bytes_released": wal_freed, "paused_seconds": paused,
            "seconds": time.perf_counter() - t0}


def _adopt(fs, path: str, tmp: str, page_size: int, cipher) -> None:
    """Stamp the copy's meta page with the store's last complete checkpoint id.

    The copy numbered its own checkpoints; page 0 names the one that last
    wrote it, and an open refuses a page file written by a checkpoint its
    cp/ has no marker of (MarkersLost). Once renamed over pages.dat the copy
    is the store's, as of that checkpoint: page 0 must say so, or a copy
    that checkpointed more often than the store leaves a store no open
    accepts. Runs before the rename, so a crash leaves the old page file."""
    from pagestore.checkpoint.markers import cp_dir, scan
    from pagestore.checkpoint.page_header import stamp_checkpoint_id
    from . import _native
    from .pagefile import PageFile
    last = scan(fs, cp_dir(path)).last_complete
    if last is None:
        return
    pages = PageFile(fs, tmp, page_size, cipher)
    try:
        buf = bytearray(page_size)
        pages.read_page(0, buf)
        stamp_checkpoint_id(buf, last)
        _native.seal_page(buf, 0, page_size)
        pages.write_pages([0], buf)
        pages.sync()
    finally:
        pages.close()


def _release_spare_segments(fs, path: str) -> int:
    """With the store closed: give back the blocks of the WAL slot files
    recovery will not read (wholly before the last complete checkpoint's
    pointer, or never written), leaving them blank (all zero, sparse): the log
    takes them up again as new when it needs a segment. Returns the bytes of
    their apparent size. On the real file system only (the readers are os-based)."""
    if not isinstance(fs, PosixFS):
        return 0
    from .tools import checkpoint_dir, wal_slots
    cpd = checkpoint_dir(path)
    complete = cpd["state"].last_complete
    start = cpd["checkpoints"][complete]["start"] if complete is not None else None
    slots, seg_size, _ = wal_slots(path)
    if start is None or seg_size is None:
        return 0
    freed = 0
    for slot in slots:
        spare = slot.blank if slot.header is None else slot.header.seq < start.wal_lsn // seg_size
        if spare and slot.size:
            f = fs.open(slot.path)
            try:
                f.truncate(0)               # drops the blocks; at full length again
                f.truncate(slot.size)       # it reads as a never-written (blank) slot
                f.fsync()
            finally:
                f.close()
            freed += slot.size
    return freed


def _blocks(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:           # removed meanwhile (a WAL segment, a recovery file)
                pass
    return total


def space(fs, path: str, cipher, checkpoint_state) -> dict:
    """`disk_bytes`: blocks the store's files take on disk (st_blocks, WAL and
    checkpoint files included); from the page file as of the last checkpoint:
    `free_pages` (on the freelist, its own pages included), `live_bytes`
    (pages holding the tree, meta page included), `page_file_bytes`. None
    where the store is not on the real file system or the freelist is unreadable."""
    out = {"disk_bytes": None, "page_file_bytes": None, "live_bytes": None, "free_pages": None}
    if not isinstance(fs, PosixFS):
        return out
    from .tools import free_pages, page_file
    out["disk_bytes"] = _blocks(path)
    for _ in range(20):            # a checkpoint writing pages meanwhile: read again
        ckpt = checkpoint_state()
        if ckpt[0]:
            time.sleep(0.005)
            continue
        pf = page_file(path, cipher)
        if pf["info"] is None:
            return out
        fl = free_pages(pf, cipher) if pf["info"]["freelist_head"] else (0, 0)
        if checkpoint_state() == ckpt:
            break
    else:
        return out
    out["page_file_bytes"] = pf["size"]
    if fl is not None:
        free = fl[0] + fl[1]
        out["free_pages"] = free
        out["live_bytes"] = (pf["pages_on_disk"] - free) * pf["page_size"]
    return out
