"""Steps 1-4 of a checkpoint (checkpointer.py's state diagram), a mixin of `Checkpointer`.

`_begin` is step 1 and makes the `Attempt` (attempt.py) a failed try is
resumed from; `_before_start` is steps 2-4, run again on a resumed try until
START is durable. They use the checkpointer's source, WAL, pool, options and
progress, and change its `state`.
"""

from __future__ import annotations

import errno

from . import pool
from .attempt import Attempt, FileRemoved
from .format import START, Marker, parse_name, recovery_file_name
from .markers import remove_quietly, write_marker

__all__ = ["CheckpointSteps"]


class CheckpointSteps:
    """Steps 1-4 of `Checkpointer._run` (no state of its own)."""

    def _begin(self, reason: str, covering: int) -> Attempt:
        """Step 1, a new checkpoint: its id, pages and replay pointer."""
        # A page file or needed segment removed under the running store still
        # takes writes through its descriptor, into a file no reopen finds:
        # a checkpoint would make that loss durable. Fail, naming the file.
        self._progress.set_phase("begin")
        for part in (self.sink, self.wal):
            gone = part.missing()
            if gone is not None:
                raise FileRemoved(errno.ENOENT, "removed while the store was open", gone)
        fs, clock, cid = self.fs, self.clock, self._next_id
        self._next_id += 1
        t0 = clock()
        stats = {"checkpoint_id": cid, "reason": reason, "recovery_data": self.recovery_data,
                 "compression": self.codec.name, "recovery_files": 0, "recovery_bytes": 0,
                 "gap_fallbacks": 0, "priority_chunks": 0, "recovery_write_seconds": 0.0}

        # Step 1: the source snapshots its dirty set under the checkpoint write
        # lock and logs the CHECKPOINT record; it measures the hold itself.
        self._progress.set_phase("begin")
        snap = self.source.begin(cid)
        # Writers copy-on-write from the moment begin releases its lock: the
        # throttle must see this checkpoint running before anything else here
        # (sorting 30,000 ids took long enough for a writer to fill a 1 MiB
        # buffer while the policies, seeing no checkpoint, let it).
        n = len(snap.page_ids)
        with self._progress.lock:
            p = self._progress
            p.running, p.checkpoint_pages, p.pages_written = True, n, 0
            # With no recovery phase the throttle's progress formula must see
            # it as done, or it would throttle against work that never comes.
            p.recovery_pages_written = 0 if self.recovery_data == "checkpoint" else n
        page_ids = sorted(snap.page_ids)   # O(n) when already sorted, as promised
        lsn = snap.wal_lsn
        stats.update(pages=len(page_ids), wal_lsn=lsn, lock_seconds=snap.lock_seconds)
        fs.crash_point("checkpoint.after_lock")

        return Attempt(cid, page_ids, lsn, stats, covering, t0)

    def _before_start(self, a: Attempt) -> float:
        """Steps 2-4: replay pointer durable, recovery files, START. Returns fsync seconds."""
        fs, clock, fsync = self.fs, self.clock, 0.0
        cid, page_ids, lsn, stats = a.cid, a.page_ids, a.lsn, a.stats
        # Step 2: the replay pointer must be durable before START names it.
        t = clock()
        self.wal.flush(lsn)
        stats["wal_flush_seconds"] = clock() - t
        fs.crash_point("checkpoint.after_wal_fsync")

        # Step 3: the previous checkpoint is complete (END durable), so its
        # recovery files, and those of attempts that crashed before START,
        # are no longer needed: they become this checkpoint's files or go.
        t = clock()
        files = 0
        if self.recovery_data == "checkpoint" and page_ids:
            files = pool.recovery_file_count(len(page_ids), self.threads, self.chunk_pages)
        self._recycle_recovery_files(cid, files)
        stats["recovery_delete_seconds"] = clock() - t
        t = clock()                                   # the write phase alone, as IEP-113 reports it
        if self.recovery_data == "checkpoint" and page_ids:
            self._progress.set_phase("recovery_files")
            r = pool.write_recovery_files(self._pool, fs, self.cpdir, self.source, self.codec, cid, page_ids,
                                          workers=self.threads, chunk_pages=self.chunk_pages,
                                          page_size=self.page_size, progress=self._progress, clock=clock,
                                          cipher=self.cipher, framing=self.framing)
            td = clock()
            fs.fsync_dir(self.cpdir)                  # the new files' names
            fsync += r["fsync_seconds"] + clock() - td
            stats.update(recovery_files=r["files"], recovery_bytes=r["bytes"], gap_fallbacks=r["gap_fallbacks"])
            stats["recovery_write_seconds"] = clock() - t
        self.state = "RECOVERY_FILES_SYNCED"
        fs.crash_point("checkpoint.after_recovery_fsync")

        # Step 4 (invariant 2: every recovery file is durable by now).
        start = Marker(START, cid, lsn, len(page_ids), self._last_lsn, stats["recovery_files"], self.recovery_data)
        write_marker(fs, self.cpdir, start)
        self.state = "START_WRITTEN"
        fs.crash_point("checkpoint.after_start_marker")

        return fsync

    def _recycle_recovery_files(self, cid: int, files: int) -> None:
        """Rename unneeded recovery files to this checkpoint's first `files` names,
        make the renames durable, and remove the rest.

        Overwriting a file's allocated blocks is cheaper than writing a new
        file (recovery_file.py). The renames are durable before a byte of
        the new records is written, so after a crash a half-overwritten file
        carries this checkpoint's name: recovery files without START, which
        recovery ignores. Under the old name it would pass for a completed
        checkpoint's damaged file (`verify` would report it).
        """
        fs, cpdir = self.fs, self.cpdir
        old, mine = [], set()
        for name in fs.listdir(cpdir):
            parsed = parse_name(name)
            if parsed is None or parsed[1] != "RECOVERY":
                continue
            if parsed[0] == cid and parsed[2] < files:
                mine.add(parsed[2])         # a failed try of this checkpoint made it
            else:
                old.append(name)
        # the largest first: most blocks to overwrite, least to allocate
        old.sort(key=lambda name: fs.size(f"{cpdir}/{name}"))
        renamed = False
        for w in range(files):
            if w not in mine and old:
                fs.rename(f"{cpdir}/{old.pop()}", f"{cpdir}/{recovery_file_name(cid, w)}")
                renamed = True
        if renamed:
            fs.fsync_dir(cpdir)
        fs.crash_point("checkpoint.after_recovery_reuse")
        for name in old:
            remove_quietly(fs, f"{cpdir}/{name}")
