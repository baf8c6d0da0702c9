"""A checkpoint that failed in the background is reported to the next write.

A checkpoint the store starts by itself (the interval, the WAL's size, dirty
pages) has no caller to raise to. When one fails after the last one had
succeeded, the store moves to `State.CHECKPOINT_FAILED`; the next write
(put, delete, put_many, a transaction's commit, sync, checkpoint, compact)
raises that failure's typed error once, naming the checkpoint's file, and
is not applied; the store is OPEN again and later writes go on while the checkpointer retries
with backoff (checkpoint/attempt.py). Reads never see it. Linux reports a
failed write-back the same way: once, to the next fsync that can see it.
Costs the hot path nothing: a write already looks at the state.

A fatal failure -- the page file's sync failed, or the file system is
read-only -- is not retried (checkpoint/checkpointer.py says why): the store
moves to `State.FAILED` as after a WAL failure, the core refuses writes at
once, and every write raises it until the store is reopened, which restores
that checkpoint from its recovery files.
"""

from __future__ import annotations

import weakref

from . import faults

__all__ = ["CheckpointReports"]


class CheckpointReports:
    """Mixed into `Database`: needs its `_state` and the engine's checkpointer."""

    _unreported: BaseException | None = None

    def _watch_checkpoints(self, engine) -> None:
        """Have `engine`'s checkpointer tell this store of a failure no caller saw."""
        ref = weakref.ref(self)      # the checkpointer must not keep the store alive

        def failed(exc: BaseException, fatal: bool) -> None:
            db = ref()
            if db is not None:
                db._checkpoint_failed(exc, fatal)

        engine.checkpointer.on_failure = failed

    def _checkpoint_failed(self, exc: BaseException, fatal: bool) -> None:
        from .database import State
        if fatal:
            if self._failure is None:          # a write the fence refuses names it
                self._failure = faults.translate(exc, "checkpoint")
            try:
                self._engine.core.fence(None)      # no write is taken from now on
            except Exception:  # noqa: BLE001 - closed meanwhile: nothing to refuse
                pass
            if self._state in (State.OPEN, State.CHECKPOINT_FAILED):
                self._state = State.FAILED
            return
        self._unreported = exc
        if self._state is State.OPEN:
            self._state = State.CHECKPOINT_FAILED

    def _report_checkpoint(self, operation: str):
        """The error the write `operation` raises (once) for the unreported failure."""
        from .database import State
        exc, self._unreported = self._unreported, None
        if self._state is State.CHECKPOINT_FAILED:
            self._state = State.OPEN
        return faults.background_failure(exc, operation)
