"""A checkpoint that failed and is resumed: what the checkpointer keeps between tries.

Once `source.begin` has flagged a checkpoint's pages, the page source holds
them until `finish`; ending it early would mark pages clean that are on
disk nowhere. So a checkpoint that fails (a full disk, an I/O error) is not
dropped: the checkpointer keeps this `Attempt` and, after a backoff, runs it
again from where it stood -- the same id, pages and replay pointer; the
recovery files and START again if START was not durable yet, else only the
pages not written and released so far, then END. Retrying forever cannot
wedge the store: every try is a fresh set of file operations. Two failures
are not retried (`is_fatal`): a failed sync of the page file, a
read-only file system, and a file removed under the running store.
"""

from __future__ import annotations

import errno

from pagestore.diskio.errors import NotFoundError

__all__ = ["Attempt", "FileRemoved", "RecordingSource", "BACKOFF_FIRST", "BACKOFF_MAX", "backoff", "is_fatal",
           "waited_for"]

BACKOFF_FIRST = 0.05      # seconds before the first retry of a failed checkpoint
BACKOFF_MAX = 2.0         # the longest wait between retries


def backoff(failures: int) -> float:
    """Seconds to wait after the `failures`-th consecutive failure (doubling, capped)."""
    return min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** max(0, failures - 1))


# reasons of checkpoints whose failure a caller meets as it waits for them
_WAITED = frozenset({"user", "close", "explicit", "recovery", "page memory full"})


def waited_for(reason: str) -> bool:
    """A caller waits for a checkpoint of `reason` (its ","-joined requests) and sees its failure."""
    return any(r in _WAITED for r in reason.split(","))


class FileRemoved(NotFoundError):
    """The page file or a segment the log still needs was removed under the
    running store: its descriptor still takes writes, into a file no reopen
    will find, so a checkpoint must not make that loss look durable."""


def is_fatal(exc: BaseException, phase: str) -> bool:
    """A failure in `phase` that must not be retried.

    After a failed sync of the page file its written pages may be gone from
    the page cache (PostgreSQL's fsync finding) while memory holds them
    released and clean, so a retry would write END over pages that are on
    disk nowhere; a read-only file system takes nothing more; a page file
    or segment removed under the store (`FileRemoved`) does not come back.
    Either way only
    a reopen (restoring the checkpoint from its recovery files, START being
    durable) is safe.
    """
    return (phase == "page_fsync" or isinstance(exc, FileRemoved)
            or getattr(exc, "errno", None) == errno.EROFS)


class Attempt:
    """One begun checkpoint: id, its pages (ascending), replay pointer, figures,
    whether START is durable, the pages written and released, and the
    requests it covers."""

    __slots__ = ("cid", "page_ids", "lsn", "stats", "started", "released", "covering", "t0")

    def __init__(self, cid: int, page_ids: list, lsn: int, stats: dict, covering: int, t0: float):
        self.cid, self.page_ids, self.lsn, self.stats = cid, page_ids, lsn, stats
        self.started = False
        self.released: set = set()
        self.covering, self.t0 = covering, t0

    def remaining(self) -> list:
        """The pages not yet written in place and released, ascending."""
        if not self.released:
            return self.page_ids
        return [p for p in self.page_ids if p not in self.released]


class RecordingSource:
    """The `PageSource` calls the page writers make, passed through, with the
    released page ids noted in the attempt (a resumed try skips them)."""

    def __init__(self, source, attempt: Attempt):
        self._source, self._attempt = source, attempt

    def copy_pages(self, page_ids, out) -> None:
        """As `PageSource.copy_pages`."""
        self._source.copy_pages(page_ids, out)

    def release(self, page_ids) -> None:
        """As `PageSource.release`, noting the ids."""
        self._source.release(page_ids)
        self._attempt.released.update(page_ids)

    def checkpoint_buffer(self) -> tuple:
        """As `PageSource.checkpoint_buffer`."""
        return self._source.checkpoint_buffer()

    def pages_with_copy(self):
        """As `PageSource.pages_with_copy`."""
        return self._source.pages_with_copy()
