"""How `pagestore.aio`'s `AsyncDatabase` ends, and how its syncer follows
compact(): a mixin of `AsyncDatabase` (pagestore/aio.py), whose state it
uses as its own.

Closing runs in a thread of its own, once, to its end: a cancelled
`close()` stops only its caller's wait; every `close()`, from any event
loop, awaits the same `concurrent.futures.Future`. The thread stops the
syncer (its last round covers every write made before close began), has
the store's loop settle the awaits it left (or settles them itself when
that loop is stopped or closed), then closes the `Database`.

compact() swaps the store's engine while calls are paused and tells the
surface (`compaction.on_swap`): the syncer of the old WAL is stopped and a
new one started on the new WAL, in compact()'s thread, never waiting for
the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading

from .errors import ClosedError

__all__ = ["Lifecycle"]


class Lifecycle:
    """`close` and the syncer's move at compact()'s swap, for `AsyncDatabase`."""

    async def close(self) -> None:
        """Let the writes in flight become durable, then checkpoint and close;
        later operations raise ClosedError. The closing runs in a thread of
        its own and, once begun, to its end: cancelling a `close()` (a
        timeout, a task group, a shutdown) stops only that call's wait.
        Every `close()` -- a second one meanwhile, or one from another event
        loop, also after the store's own loop has closed -- waits for that
        same closing, and raises its error if it failed."""
        closer = self._closer
        if closer is None:
            self._closing = True
            closer = self._closer = concurrent.futures.Future()
            closer.set_running_or_notify_cancel()      # nobody's cancel() stops it
            try:
                threading.Thread(target=self._close_now, name="pagestore-aio-close").start()
            except RuntimeError:             # no new thread at interpreter shutdown
                self._close_now()
        await _outcome(closer)

    def _close_now(self) -> None:
        """The closing, in its own thread: the syncer's last round, the awaits
        it leaves settled on the loop, then the Database's close."""
        try:
            try:
                with self._syncer_lock:
                    if self._syncer is not None:
                        self._wake.set()
                        if self._efd >= 0:
                            self._gate.syncer_stop(True)
                        self._syncer.join()
                self._on_loop(self._settle)
            finally:
                self._db.close()            # whatever happened above: the store ends closed
        except BaseException as exc:        # noqa: BLE001 - raised by every close()
            self._closer.set_exception(exc)
        else:
            self._closer.set_result(None)

    def _settle(self) -> None:
        """After the syncer's end: complete the awaits its last rounds covered,
        fail the rest; stop watching the eventfd."""
        if self._loop.is_closed():
            self._pending.clear()           # their loop is gone, and nothing awaits them
        if self._efd >= 0:
            self._loop.remove_reader(self._efd)
            if self._error is None:
                self._complete(self._gate.durable)
            os.close(self._efd)
            self._efd = -1
        if self._pending:
            self._fail(ClosedError(f"store {self._db.path} closed before the write was durable"))

    def _on_loop(self, call) -> None:
        """Run `call()` on the store's loop, after what the syncer queued there
        (from the closing thread; waits for it). A loop that is closed, or
        stopped with the call still queued, runs nothing more: then here."""
        loop, done, lock, ran = self._loop, threading.Event(), threading.Lock(), []

        def once() -> None:
            with lock:
                if ran:
                    return
                ran.append(True)
            try:
                call()
            finally:
                done.set()
        try:
            loop.call_soon_threadsafe(once)
        except RuntimeError:                # closed
            once()
            return
        while not done.wait(0.05):
            if not loop.is_running():
                once()
        done.wait()

    # -- compact() ---------------------------------------------------------------
    def _on_swap(self, engine) -> None:
        """compact() swapped the store's engine for `engine` (called in its
        thread, before the calls it paused go on): the syncer moves to the
        new WAL. The writes still awaited from before the swap were made
        durable by the old engine's close, below every LSN of the new log,
        so the new syncer's first round completes them. Never waits for
        the loop (which may be blocked in a paused call)."""
        with self._syncer_lock:
            if self._closer is not None or self._syncer is None:
                return                      # closing: its syncer is stopped already
            old, self._wal = self._wal, engine.wal    # (a Python syncer on the old WAL ends on seeing it)
            if self._efd >= 0:
                self._gate.syncer_stop(True)
            self._wake.set()
            self._syncer.join()
            if old.failure is not None:
                # the old log failed (compact() raises it): what it had not
                # made durable is gone, and the new log's LSNs are past it --
                # its awaits fail, as after a failed round, and no syncer follows
                self._wal = old
                self._tell(self._fail, old.failure)
                return
            wal = engine.wal
            target = self._sync_loop
            if self._efd >= 0:
                gate = wal.syncer_gate()
                if gate is not None:
                    gate.syncer_stop(False)
                    self._idle, self._gate = gate.syncer_idle_cell(), gate
                    target = self._c_sync_loop
                else:                       # (a crash point armed since the open) rounds in Python
                    self._idle = (0,)       # no kick of the old gate: the loop drops the eventfd
                    self._tell(self._drop_eventfd, self._efd)
            self._syncer = threading.Thread(target=target, name="pagestore-aio-syncer", daemon=True)
            self._syncer.start()
            self._wake.set()                # a first round over what the swap left waiting

    def _drop_eventfd(self, efd: int) -> None:
        """On the loop: stop watching `efd` (the syncer now runs in Python)."""
        if self._efd == efd:
            self._loop.remove_reader(efd)
            os.close(efd)
            self._efd = -1
            self._wake.set()



async def _outcome(closer: concurrent.futures.Future) -> None:
    """Await `closer` (set by the closing thread) from the running loop: a
    cancelled wait leaves it running; the outcome is told to a loop only
    if that loop still runs."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def tell(_closer) -> None:
        try:
            loop.call_soon_threadsafe(_wake_waiter, waiter)
        except RuntimeError:                # that loop closed meanwhile: nobody waits
            pass
    closer.add_done_callback(tell)
    await waiter
    closer.result()                         # the closing's error, if it failed


def _wake_waiter(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)
