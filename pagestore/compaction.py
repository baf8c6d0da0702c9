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
     differences are written, in pieces that fit the copy's page memory:
     nobody reads the copy before it is closed, so they need not be one
     atomic batch, however busy the store was); both are closed, so the
     copy is durable;
  3. the copy's page file is renamed over pages.dat (one atomic rename) and
     the store directory fsynced; compact.tmp/ is removed;
  4. the store is opened again on the new page file and the waiting calls
     go on. The WAL and checkpoint markers stay the store's own: after step
     2 either page file is whole as of the last complete checkpoint, and
     the log holds nothing past it, so recovery accepts either.

A crash anywhere leaves a store that opens with every acknowledged write:
before the rename (a copy caught up in part included), the old page file
with compact.tmp/ beside it (ignored, and removed by the next compact);
after it, the old or the new page file (both whole as of the same
checkpoint) until the directory is durable, then the new one. Crash
points: "compact.copy_durable" (step 2 done, nothing renamed) and
"compact.page_file_renamed" (renamed, directory not fsynced).

Calls and the swap, one rule (`CompactMixin._on_engine`): a call made while
paused waits for the swap to end; a call that took the store's engine
before the pause and meets it closed (ClosedError from its core, a
checkpointer or WAL already dropped) runs again on the new engine, so
nothing a user calls fails because of compact(). The writes (`put`,
`delete`, `put_many`) and `get` keep their own copy of it on their hot
paths (`_swapped_core`). Only what holds state of the old engine ends: a
snapshot, or a scan that delivered its first item, taken before the swap
raises SnapshotTooOldError saying compact() replaced the store's files
(a scan not yet at its first item starts again on the new engine), and a
transaction that read before the swap raises ConflictError at its next
read or commit, which `run_transaction`, `pop` and `setdefault` retry.
"""

from __future__ import annotations

import os
import posixpath
import threading
import time

from pagestore.diskio import PosixFS, layout

from . import _native
from .backup import PAIR_BYTES, batch_bytes, copy_config, copy_pairs, outran, remove_tree
from .errors import SnapshotTooOldError, TransactionTooLargeError
from .snapshot import first_batch

__all__ = ["CompactMixin", "on_swap", "space"]


class CompactMixin:
    """`compact` and the space figures of `stats`, for `Database` (whose
    state, engine and checks these methods use as their own)."""

    _resume: threading.Event | None = None      # set while PAUSED, until the swap ends
    _swap_listener = None                        # `on_swap`

    def compact(self) -> dict:
        """Rewrite the store densely and shrink its page file, while it stays
        open (calls wait for the final swap, or run again after it; a snapshot
        taken before it ends: SnapshotTooOldError); returns the figures before
        and after ("disk_bytes_before", "disk_bytes_after", ...). Writes that
        outgrow `snapshot_memory` while it copies make it raise
        SnapshotTooOldError, the store left as it was. See
        pagestore/compaction.py for how it stays crash-safe and for the calls."""
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

    def _on_engine(self, call, *args):
        """`call(engine, *args)` on the store's engine, the rule of the module
        docstring: a pause is waited out first, and a call that failed on an
        engine compact() has replaced meanwhile runs again on the new one.
        Any other failure on a store closed meanwhile is its ClosedError."""
        while True:
            self._check_open()
            engine = self._engine
            try:
                return call(engine, *args)
            except Exception:  # noqa: BLE001 - re-raised unless the swap caused it
                if not self._replaced(engine):
                    self._check_open()
                    raise

    def _replaced(self, engine) -> bool:
        """True when compact() has swapped `engine` out and the store is open on
        its successor (after waiting for a swap under way to end)."""
        from .database import State
        if self._state is State.PAUSED:
            self._resume.wait()
        return self._engine is not engine and self._state is State.OPEN

    def _held(self, engine):
        """The check before each read of a snapshot taken on `engine`: the
        store's own, then SnapshotTooOldError once compact() has replaced
        that engine (its snapshots ended with it)."""
        def check() -> None:
            self._check_open()
            if self._engine is not engine:
                raise SnapshotTooOldError(f"{self.path}: compact() replaced the store's files after "
                                          "this snapshot was taken; take a new one")
        return check

    def _scan_on(self, engine, lo, hi, reverse):
        """A scan's snapshot on `engine` and its first batch (snapshot.py `first_batch`)."""
        return first_batch(engine, self._held(engine), lo, hi, reverse)

    def _compact(self) -> dict:
        with self._one_at_a_time():
            self._check_writable("compact")
            return _rewrite(self)

    def _one_at_a_time(self) -> threading.Lock:
        """The store's lock for compact() and backup(): a second compaction
        waits for the first, and a backup and a compaction of one store run
        one after the other (a backup's snapshot would end at the swap)."""
        lock = self.__dict__.get("_admin_lock")
        if lock is None:     # setdefault is atomic: two first callers get the same lock
            lock = self.__dict__.setdefault("_admin_lock", threading.Lock())
        return lock

    def _pause(self) -> None:
        from .database import State
        self._resume = threading.Event()
        self._state = State.PAUSED

    def _resume_with(self, engine) -> None:
        """End the pause: on `engine` (None: the store could not be opened again, CLOSED)."""
        from .database import State
        try:
            if engine is not None:
                self._bind(engine)
                if self._swap_listener is not None:
                    self._swap_listener(engine)
        finally:
            self._state = State.OPEN if engine is not None else State.CLOSED
            self._resume.set()

    def _page_cipher(self):
        """The cipher the store's pages are sealed with, or None."""
        return getattr(self._engine, "cipher", None)

    def _close_engine(self) -> None:
        self._engine.close(final_checkpoint=True)

    def _drop(self) -> None:
        """Let go of this store with no I/O, as a killed process would, unless it
        is closed: the copy of a compaction that a simulated crash or an
        interrupt stopped (the next compact() removes its directory)."""
        from .database import State
        if self._state is not State.CLOSED:
            self._abandon()

    def _space(self) -> dict:
        return space(self.fs, self.path, getattr(self._engine, "cipher", None), self.checkpoint_state)


def on_swap(db, listener) -> None:
    """From now on compact() calls `listener(engine)` once it has swapped `db`'s
    engine for `engine` (or opened it again after a failed compaction): in
    compact()'s thread, after the store took the new engine and before the
    calls it paused go on. pagestore.aio moves its syncer to the new WAL so."""
    db._swap_listener = listener


def _catch_up(source, target) -> int:
    """Make `target` hold exactly `source`'s pairs; returns how many changed."""
    ops = []
    src, dst = iter(source.scan()), iter(target.scan())
    a, b = next(src, None), next(dst, None)
    while a is not None or b is not None:
        if b is None or (a is not None and a[0] < b[0]):
            ops.append((_native.OP_PUT, a[0], a[1]))
            a = next(src, None)
        elif a is None or b[0] < a[0]:
            ops.append((_native.OP_DELETE, b[0], b""))
            b = next(dst, None)
        else:
            if a[1] != b[1]:
                ops.append((_native.OP_PUT, a[0], a[1]))
            a, b = next(src, None), next(dst, None)
    for piece in _pieces(ops, target.config):
        _apply(target, piece)
    return len(ops)


def _pieces(ops, config):
    """`ops` cut into batches that fit the copy's page memory. The writes made
    while the store was copied fall anywhere in its key space, so each may
    change a leaf of its own (and split it): a batch holds at most an eighth
    of page memory's pages in writes, and no more bytes than a batch of the
    copy (backup.py `batch_bytes`)."""
    most = max(1, config.memory_size // config.page_size // 8)
    most_bytes = batch_bytes(config)
    piece, size = [], 0
    for op in ops:
        n = len(op[1]) + len(op[2]) + PAIR_BYTES
        if piece and (len(piece) >= most or size + n > most_bytes):
            yield piece
            piece, size = [], 0
        piece.append(op)
        size += n
    if piece:
        yield piece


def _apply(target, piece) -> None:
    """Apply `piece` to the copy as one transaction; should it not fit after all
    (one that failed leaves no trace), in two halves, down to single writes."""
    try:
        with target.transaction() as tx:
            for op, key, value in piece:
                if op == _native.OP_PUT:
                    tx.put(key, value)
                else:
                    tx.delete(key)
    except TransactionTooLargeError:
        if len(piece) == 1:
            raise
        half = len(piece) // 2
        _apply(target, piece[:half])
        _apply(target, piece[half:])


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
        except Exception as e:
            target.close()
            remove_tree(fs, tmp)
            if isinstance(e, SnapshotTooOldError):
                raise outran(db, "compact()", "the store is as it was") from e
            raise
        except BaseException:
            target._drop()
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
    except BaseException as stop:
        target._drop()
        if isinstance(stop, KeyboardInterrupt) and engine is None:
            # Ctrl-C: the compaction stops, the store goes on (on whichever
            # page file is whole), as after a failure above
            try:
                engine = Engine(path, db.config, fs)
            except BaseException:  # noqa: BLE001 - the interrupt is the one to raise
                pass
        raise
    finally:                             # a simulated crash: no I/O, CLOSED
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
