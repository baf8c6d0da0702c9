"""`ReadOnlyEngine`: the engine of a store opened with `read_only=True`.

It writes no file, creates none and changes no time stamp: the page file is
opened O_RDONLY (the C core reads its pages through that descriptor), the
WAL is read only to see whether anything waits in it, there is no
checkpointer, and the LOCK file is held with a shared flock (O_RDONLY): any
number of read-only opens at once, none while a process has the store open
for writing (StoreLockedError), and no writable open while one is.

After a crash the store needs recovery, which writes (it restores pages,
cuts the WAL's torn tail aside and ends with a checkpoint). A read-only open
does not recover, not even in memory: it refuses with RecoveryNeededError,
and one writable open (and close) makes the store readable again. The test
is the one `python -m pagestore inspect` shows: an interrupted checkpoint,
or any record beyond the CHECKPOINT record the last complete checkpoint
points at, or a WAL that is damaged past that point.
"""

from __future__ import annotations

import errno
import fcntl
import os

from pagestore.diskio import layout
from pagestore.diskio.posix import PosixFS, PosixLock

from .engine import make_core
from .errors import ConfigError, CorruptionError, Error, ReadOnlyError, RecoveryNeededError, StoreLockedError
from .pagefile import PageFile
from .recovering import RecoveringStoreMixin
from .tools import ReadOnlyFS

__all__ = ["ReadOnlyEngine", "pending_recovery"]


def pending_recovery(path: str, cipher=None) -> str | None:
    """Why the store in `path` needs recovery before it can be read, or None.
    Raises CorruptionError when its newest WAL segment was removed or wal/NEWEST is damaged."""
    from .tools import checkpoint_dir, scan_wal, wal_newest_fault, wal_slots
    pages = os.path.join(path, layout.PAGE_FILE)
    if not os.path.exists(pages) or os.path.getsize(pages) == 0:
        return f"{pages} is empty: the store's first open did not finish"
    cpd = checkpoint_dir(path)
    cp = cpd["state"]
    if cp.interrupted is not None:
        return f"checkpoint {cp.interrupted} was interrupted (START without END)"
    if cpd["marker_errors"]:
        return f"a checkpoint marker is damaged ({cpd['marker_errors'][0]['file']})"
    slots, seg_size, _ = wal_slots(path)
    newest = wal_newest_fault(path, slots)
    if newest is not None:          # no recovery brings a removed segment back
        raise CorruptionError(newest[1], newest[0])
    if not slots:
        return None
    if seg_size is None:
        return "the WAL's segments disagree on their size"
    complete = cp.last_complete
    start = cpd["checkpoints"][complete]["start"] if complete is not None else None
    w = scan_wal(slots, seg_size, start.wal_lsn if start is not None else 0, cipher)
    unreplayed = sum(n for name, n in w["types"].items() if name != "CHECKPOINT")
    if unreplayed:
        return f"the WAL holds {unreplayed} record(s) written after the last checkpoint"
    if w["damage"] or w["gaps"] or w["off_chain"]:
        return "the WAL has a torn or damaged tail after the last checkpoint"
    return None


class _NoLog:
    """Stands where the WAL is: a read-only store logs nothing."""

    failure = None
    mode = "read_only"

    def __init__(self, path: str):
        self.path = path

    def commit(self, lsn: int) -> None:
        raise ReadOnlyError(f"{self.path} was opened read_only", self.path, "commit", errno.EROFS)

    flush = commit


class _NoCheckpoints:
    """Stands where the checkpointer is: nothing to checkpoint, ever."""

    @staticmethod
    def running_and_done() -> tuple:
        return False, 0


class ReadOnlyEngine(RecoveringStoreMixin):
    """What a `Database` opened with read_only=True holds (see the module docstring)."""

    def __init__(self, path: str, config, fs):
        if not isinstance(fs, PosixFS):
            raise ConfigError("option 'read_only': needs the real file system (diskio.PosixFS)",
                              option="read_only")
        self.path, self.config, self.fs = path, config, fs
        self.core = self.pages = self.cipher = None
        self.wal, self.checkpointer, self.throttle = _NoLog(path), _NoCheckpoints(), None
        self.lock = self._shared_lock()
        try:
            self._open()
        except BaseException:
            self.release()
            raise

    def _shared_lock(self) -> PosixLock | None:
        path = os.path.join(self.path, layout.LOCK)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None                # never opened for writing: no one to exclude
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(f"{self.path} is open for writing (in another process, or by a "
                                   "store of this process that was not closed): a read_only open "
                                   "is refused until it is closed") from None
        return PosixLock(path, fd)      # a forked child drops its copy, as for a writer's lock

    def _open(self) -> None:
        cfg = self.config
        if cfg.encryption_key is not None:
            from .cipher import Cipher
            self.cipher = Cipher.from_option(cfg.encryption_key)
        why = pending_recovery(self.path, self.cipher)
        if why is not None:
            raise RecoveryNeededError(f"{self.path} needs recovery ({why}); recovering writes files, "
                                      "so open it once without read_only (and close it) first", self.path)
        self.pages = PageFile(ReadOnlyFS(), self.path, cfg.page_size, self.cipher)
        self.core = make_core(cfg, self.cipher, self.pages, self._no_segment)
        self.signals = self.core.signals
        self.check_header()
        self.open_existing()
        self.recovery = {"action": "read_only", "pages_restored": 0, "records_replayed": 0}

    def _no_segment(self, seq: int):
        raise ReadOnlyError(f"{self.path} was opened read_only", self.path, "log", errno.EROFS)

    def retry(self, r, fn, *args, read: bool = False):
        """Page memory had no slot to read into: every page is clean here, so
        only pins hold them; say so instead of waiting."""
        raise Error(f"{self.path}: no page memory to read into ({r}); open with a larger memory_size") from r

    def stats(self) -> dict:
        """The core's figures (a read-only store has no WAL, checkpointer or throttle)."""
        out = self.core.stats()
        out.update(read_only=True, recovery=dict(self.recovery))
        return out

    def shut(self) -> None:
        """Refuse every core call from now on."""
        if self.core is not None:
            self.core.shut()

    def close(self, final_checkpoint: bool = True) -> None:
        """Release the page memory, the page file and the shared lock (nothing to write)."""
        self.shut()
        self.release()

    abandon = close

    def release(self) -> None:
        """Release what is still held (idempotent)."""
        core, pages, lock = self.core, self.pages, self.lock
        self.pages, self.lock = None, None
        for end in (core and core.close, pages and pages.close, lock and lock.release):
            if end:
                try:
                    end()
                except Exception:  # noqa: BLE001 - releasing after a failure must not mask it
                    pass
