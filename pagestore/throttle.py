"""Where writers meet the throttling policy and the limits of memory.

The C core raises a hint flag when the checkpoint buffer or the dirty pages
pass a low threshold; only then does a writer build the policy's signals and
ask how long to park. Parking happens here, after the operation, outside
every lock (DESIGN.md §6). When the core had to roll a write back because the
checkpoint buffer was full (a *stall*) or page memory held nothing evictable,
`make_room` waits for the checkpointer to free what is missing.
"""

from __future__ import annotations

import threading
import time

from pagestore import throttling
from pagestore.throttling.signals import snapshot as _snapshot
from pagestore.throttling.trigger import DirtyTrigger

from . import _native
from .errors import ClosedError
from .shortfall import room_needed

_monotonic = time.monotonic

# The core raises its hint from these fractions on; below them no policy parks.
HINT_COW_FRACTION = 0.25
HINT_DIRTY_FRACTION = 0.5


def evictable(s) -> int:
    """Page-memory slots a write could take now: free or clean (a page both in
    the running checkpoint and dirtied again counts twice, so this errs low)."""
    return int(s.slots_total) - int(s.dirty_pages) - int(s.ckpt_pages)


class Throttle:
    """The open store's writer throttle: asks the policy, parks writers, waits for room (see the
    module docstring)."""

    # Longest single wait for released pages before the write is retried;
    # the retry loop repeats it, so it bounds the polling, not the wait.
    NOMEM_WAIT = 0.1
    # Longest wait of a batch for a requested checkpoint to begin (before_batch).
    BEGIN_WAIT = 1.0
    # With a policy's check_interval: ask again early once the buffer moved this much.
    CHECK_COW_STEP = 0.01

    def __init__(self, store, policy):
        """`store` is the open store's engine (pagestore/engine.py): its `core`,
        `signals`, `checkpointer` and `config` are read here."""
        self._store = store
        self.policy = policy
        # A policy that parks in quanta (the default) may be asked less often
        # than once per write: building its signals and running it costs
        # ~5 us of Python, which every write paid while the hint was up --
        # most writes of a checkpoint once a quarter of the buffer holds
        # copies -- and took the median put in a checkpoint from ~1.5 to
        # ~6-9 us. It is still asked at once when the buffer has moved by
        # `CHECK_COW_STEP` of its capacity since its last answer, so a fast
        # writer cannot outrun it into a full buffer. The Ignite baselines
        # declare no interval: they are asked on every write, as in Ignite.
        self._every = float(policy.check_interval)
        self._local = threading.local()
        self._lock = threading.Lock()
        self.parks = 0
        self.park_seconds = 0.0
        self.park_seconds_max = 0.0
        self.stalls = 0
        self.batch_waits = 0
        self.nomem_waits = 0
        # Dirty pages start a checkpoint at checkpoint_dirty_fraction, or earlier
        # when writers would use up the clean slots before it frees any
        # (throttling/trigger.py). It runs in `check`, only while the hint is
        # up, so the hint must be up from the trigger's floor on.
        self._trigger = DirtyTrigger(store.config.checkpoint_dirty_fraction)
        store.core.set_throttle_thresholds(
            HINT_COW_FRACTION, min(HINT_DIRTY_FRACTION, self._trigger.floor))

    def signals(self, ckpt=None) -> "throttling.Signals":
        """The policy's inputs now: the core's counters and the checkpointer's phase progress."""
        s = self._store.signals
        p = (ckpt or self._store.checkpointer).phase_progress()
        running, pages = p["running"], p["checkpoint_pages"]
        recovered, written = p["recovery_pages_written"], p["pages_written"]
        if not running and s.ckpt_pages:
            # The core has begun a checkpoint (writers copy-on-write from here)
            # and the checkpointer has not said so yet: the pages flagged now
            # are all of them, none written (the counts above are the last
            # checkpoint's).
            running, pages, written = True, s.ckpt_pages, 0
            recovered = 0 if self._store.config.recovery_data == "checkpoint" else pages
        # positional, in Signals' field order (throttling.snapshot: ~1 us, not ~3)
        return _snapshot(
            s.cow_used, s.cow_capacity, s.dirty_pages, s.slots_total,
            running, pages, recovered, written, s.pages_dirtied,
            None,     # in_checkpoint_page: unknown per write, policies assume it is
            None,     # writer: the calling thread
            p["phase"], p["phase_elapsed"], p["checkpoint_elapsed"], p["last_phase_seconds"],
            0)        # dirty_limit: none (a write that finds no evictable page waits instead)

    def check(self) -> None:
        """Ask the policy once; park if it says so; start a checkpoint if dirty is high."""
        db = self._store
        s = db.signals
        ckpt = db.checkpointer
        if ckpt is None:
            # The store closed after this write was applied: nothing is left
            # to throttle for, and the write stands (raising now would report
            # an applied write as failed).
            return
        # Before the policy's interval below: one put_many can dirty thousands
        # of pages, so skipping the trigger for an interval let page memory
        # fill before a checkpoint was asked for.
        if not ckpt.pending() and self._trigger.due(s.dirty_pages, s.slots_total, s.pages_dirtied,
                                                    _monotonic(), ckpt.release_lead()):
            # One pending request is enough: a checkpoint serves every request
            # made before it began, and asking on every write would only
            # contend for the checkpointer's lock.
            ckpt.request("dirty pages")
        if self._every:
            mine, now = self._local, _monotonic()
            step = self.CHECK_COW_STEP * s.cow_capacity
            if now < mine.__dict__.get("due", 0.0) and abs(s.cow_used - mine.cow) < step:
                return
            mine.due, mine.cow = now + self._every, s.cow_used
        park = self.policy.park_seconds(self.signals(ckpt), time.monotonic())
        if park > 0:
            # A writer held back while a checkpoint runs: it must not also be
            # held back by that checkpoint's spread schedule (checkpoint/pacing.py).
            ckpt.hurry("park")
            time.sleep(park)
            with self._lock:
                self.parks += 1
                self.park_seconds += park
                if park > self.park_seconds_max:
                    self.park_seconds_max = park

    def before_batch(self, writes: int) -> None:
        """Before a batch of up to `writes` changed pages that may not fit in
        the page memory free or clean now: ask for a checkpoint of the dirty
        pages, and let it begin first.

        A batch holds the core until its last write, so no checkpoint can
        begin while it runs. Short of slots, it would wait for pages that no
        running checkpoint will release, fail, roll back and start again.
        Waiting for the checkpoint to begin costs the batch the checkpointer's
        wake-up, or the rest of the checkpoint running now; the batch then
        takes the slots this one releases as it writes them."""
        db = self._store
        ckpt, s = db.checkpointer, db.signals
        if ckpt is None or evictable(s) >= writes:
            return
        if not s.dirty_pages:           # nothing a new checkpoint would clean
            return
        began = s.checkpoint_id         # the core's begin sets it, under the lock a batch holds
        if not ckpt.pending():
            ckpt.request("page memory full")
        with self._lock:
            self.batch_waits += 1
        deadline = _monotonic() + self.BEGIN_WAIT
        while (s.checkpoint_id == began and evictable(s) < writes and ckpt.failed is None
               and _monotonic() < deadline):
            time.sleep(0.0002)

    def make_room(self, retry) -> None:
        """Wait until the write the core rolled back can succeed."""
        db = self._store
        if db.checkpointer is None:
            # closed while the write waited: it was rolled back, so it fails whole
            raise ClosedError("the store was closed while a write waited for room")
        if retry.code == _native.PS_E_CKPT_FULL:
            with self._lock:
                self.stalls += 1
            # The buffer only holds copies of pages of the running checkpoint;
            # each page it writes in place frees one.
            db.checkpointer.hurry("stall")
            used = db.signals.cow_used
            deadline = time.monotonic() + 0.05
            while db.signals.cow_used >= used and time.monotonic() < deadline:
                time.sleep(0.0002)
        elif retry.code == _native.PS_E_NOMEM:
            with self._lock:
                self.nomem_waits += 1
            # Page memory is all dirty or in the checkpoint. A page becomes
            # clean, hence evictable, once the checkpoint has written it in
            # place and released it: wait until it released about as many as
            # the write needs (retried after one chunk, a batch of thousands
            # of writes failed again and again, each time rolled back whole),
            # or until it ended, not for a whole new checkpoint (which would
            # also wait out the one running). Without a running checkpoint,
            # start one.
            ckpt = db.checkpointer
            s = db.signals
            need = room_needed(s)
            before = ckpt.progress()
            if before["running"]:
                ckpt.hurry("memory")   # its page writes make the clean slots: no pacing them
            elif not ckpt.pending():
                ckpt.request("page memory full")
            deadline = time.monotonic() + self.NOMEM_WAIT
            moved = False
            while time.monotonic() < deadline:
                if ckpt.failed is not None:
                    ckpt.checkpoint(wait=True, reason="page memory full")  # raises the failure
                now = ckpt.progress()
                if now != before:               # a chunk released, or the checkpoint moved on
                    moved = True
                    if before["running"] and not now["running"]:   # it ended: retry
                        break
                    before = now
                # The estimate counts pinned pages as free: only a move makes it
                # news. A write that needs half of page memory or more waits for
                # the checkpoint to end: then all of it is clean, and should the
                # write fail again, it never fits (Engine.retry).
                if moved and evictable(s) >= need and need * 2 < int(s.slots_total):
                    break
                time.sleep(0.0002)
        else:
            raise retry

    def stats(self) -> dict:
        """The throttle's counters for `Database.stats()` (parks, park seconds, stalls, waits for
        memory, batches that waited for a checkpoint to begin)."""
        return {"throttle_policy": self.policy.name, "throttle_parks": self.parks,
                "throttle_park_seconds": self.park_seconds,
                "throttle_park_seconds_max": self.park_seconds_max,
                "throttle_stalls": self.stalls, "throttle_nomem_waits": self.nomem_waits,
                "throttle_batch_waits": self.batch_waits}
