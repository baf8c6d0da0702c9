"""The I/O-error loop (SQLite's, RocksDB's FaultInjectionTestFS) run against a whole store.

`run_workload(fault)` drives one seeded workload -- puts, deletes, batches,
transactions, durable puts, checkpoints, a close or a kill, crash recovery,
more writes -- on the crash simulator with `fault = (n, errno, persistent)`
armed: the n-th mutating I/O of the workload fails (once, or from then on).
It keeps a model of what the store acknowledged: an operation that returned
changes the model, one that raised does not, and right after it raised the
keys it wrote must read as the model says (no trace in memory either). At the end the fault is
cleared, the simulated process is killed (`crash(mode="keep")`: the page
cache survives, as after kill -9) and the store reopened; every key must
then hold exactly its model value -- an acknowledged write lost, or a write
that raised found applied, is a violation -- and every exception a public
call raised must have been a `pagestore.Error`.

`count_io(spec)` runs the workload without a fault and returns how many
mutating I/Os it made, the range of `n`. `Spec.wrap` lets a test hand the
loop a store that misbehaves (tests/faults/test_fault_loop_catches.py).
"""

from __future__ import annotations

import dataclasses
import errno
import random
import warnings

import pagestore
from pagestore.diskio import SimFS

__all__ = ["Spec", "Outcome", "run_workload", "count_io", "ERRNOS"]

ERRNOS = (errno.ENOSPC, errno.EIO, errno.EROFS)
OPEN_RETRIES = 16
KEY = bytes(range(32))

_BASE = dict(memory_size=1 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600,
             checkpoint_threads=1, page_size=4096, checkpoint_buffer_size=64 * 4096,
             checkpoint_spread=0.0)


@dataclasses.dataclass(frozen=True)
class Spec:
    """One configuration of the workload."""

    wal_mode: str = "log_only"
    recovery_data: str = "checkpoint"
    encrypted: bool = False
    end: str = "close"          # how the first store ends: "close", or "kill" (no close)
    seed: int = 1
    ops: int = 40               # operations per store (two stores per run)
    wrap: object = None         # db -> object used in the store's place (self-test)

    def options(self) -> dict:
        """The store's options."""
        o = dict(_BASE, wal_mode=self.wal_mode, recovery_data=self.recovery_data)
        if self.encrypted:
            o["encryption_key"] = KEY
        return o


@dataclasses.dataclass
class Outcome:
    """What one run found."""

    violations: list
    raised: int = 0             # public calls that raised a pagestore.Error
    acked: int = 0              # write operations acknowledged
    in_doubt: int = 0           # writes that raised with DiskIOError.in_doubt
    faults: int = 0             # I/O operations that failed by injection
    io: int = 0                 # mutating I/O operations of the run


class _Run:
    def __init__(self, spec: Spec, sim: SimFS):
        self.spec, self.sim = spec, sim
        self.model: dict[bytes, bytes | None] = {}
        self.doubt: dict[bytes, set] = {}      # key -> values a write in doubt may have left
        self.out = Outcome([])
        self.rng = random.Random(spec.seed)
        self.serial = 0

    def call(self, what: str, fn, *args, **kw):
        """Run a public call; (True, result) if it returned, (False, exc) if it raised."""
        try:
            return True, fn(*args, **kw)
        except pagestore.Error as e:
            self.out.raised += 1
            return False, e
        except Exception as e:  # noqa: BLE001 - what the loop exists to catch
            self.out.violations.append(f"{what} raised {type(e).__module__}.{type(e).__name__}: {e}")
            return False, e

    def open(self):
        ok, db = self.call("open", pagestore.open, "/store", fs=self.sim, **self.spec.options())
        if not ok:
            return None
        return self.spec.wrap(db) if self.spec.wrap is not None else db

    def value(self) -> bytes:
        self.serial += 1
        return b"v%06d-" % self.serial + self.rng.randbytes(self.rng.choice((8, 300)))

    def key(self) -> bytes:
        return b"key-%03d" % self.rng.randrange(80)

    def writes(self, db, n: int) -> None:
        rng = self.rng
        for i in range(n):
            r = rng.random()
            if r < 0.55:
                k, v = self.key(), self.value()
                ok, e = self.call("put", db.put, k, v, sync=rng.random() < 0.1)
                self.ended({k: v}, ok, e, db)
            elif r < 0.65:
                k = self.key()
                ok, e = self.call("delete", db.delete, k)
                self.ended({k: None}, ok, e, db)
            elif r < 0.8:
                batch = {self.key(): self.value() for _ in range(3)}
                ok, e = self.call("put_many", db.put_many, batch)
                self.ended(batch, ok, e, db)
            elif r < 0.9:
                batch = {self.key(): self.value() for _ in range(2)}
                ok, e = self.call("transaction", self._transaction, db, batch)
                self.ended(batch, ok, e, db)
            else:
                self.call("get", db.get, self.key())
            if i % 15 == 14:
                self.call("checkpoint", db.checkpoint)

    @staticmethod
    def _transaction(db, batch: dict) -> None:
        with db.transaction() as tx:
            for k, v in batch.items():
                tx.put(k, v)

    def ended(self, batch: dict, ok: bool, exc, db=None) -> None:
        """Note a write's outcome: acknowledged, raised, or raised in doubt
        (`DiskIOError.in_doubt`: the disk refused to take its record back).
        With `db`, a write that raised must not be visible in it."""
        if not ok and db is not None and not getattr(exc, "in_doubt", False):
            for k in batch:
                seen, got = self.call("get", db.get, k)
                if seen and got != self.model.get(k) and got not in self.doubt.get(k, ()):
                    self.out.violations.append(
                        f"{k!r}: a write that raised ({type(exc).__name__}) is visible: "
                        f"get() returns {_short(got)}, acknowledged {_short(self.model.get(k))}")
        if ok:
            self.model.update(batch)
            for k in batch:
                self.doubt.pop(k, None)
            self.out.acked += 1
        elif getattr(exc, "in_doubt", False):
            for k, v in batch.items():
                self.doubt.setdefault(k, set()).add(v)
            self.out.in_doubt += 1

    def check(self, db) -> None:
        for k in sorted(set(self.model) | set(self.doubt)):
            want = self.model.get(k)
            ok, got = self.call("get", db.get, k)
            if ok and got != want and got not in self.doubt.get(k, ()):
                self.out.violations.append(
                    f"{k!r}: reopened store holds {_short(got)}, acknowledged {_short(want)}")
        # nothing that raised may be there either: a key never acknowledged must be absent
        ok, keys = self.call("scan", lambda: [k for k, _ in db.scan()])
        if ok:
            extra = sorted(set(keys) - {k for k, v in self.model.items() if v is not None} - set(self.doubt))
            if extra:
                self.out.violations.append(f"keys never acknowledged are there after reopen: {extra[:5]}")


def _short(v) -> str:
    return "nothing" if v is None else repr(v[:8])


def run_workload(spec: Spec, fault: tuple | None = None) -> Outcome:
    """Run the workload with `fault` = (n, errno, persistent) armed (None: no fault)."""
    sim = SimFS()
    run = _Run(spec, sim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        io0 = sim.io_count
        if fault is not None:
            sim.arm_fault(fault[0], fault[1], persistent=fault[2])
        db = run.open()
        if db is not None:
            run.writes(db, spec.ops)
            if spec.end == "close":
                run.call("close", db.close)
            else:
                _kill(db)
        sim.crash(mode="keep")               # fault still armed: recovery meets it too
        db = run.open()
        if db is None and fault is not None and fault[2]:
            # the disk stays full (or broken): a user retries the open; each
            # attempt must fail typed and leave the store as it was
            for _ in range(OPEN_RETRIES):
                db = run.open()
                if db is not None:
                    break
            if db is None:
                sim.clear_fault()            # space came back
                db = run.open()
                if db is None:
                    run.out.violations.append("the store does not open once the disk works again")
                else:
                    run.check(db)
                    acked = run.out.acked
                    run.writes(db, spec.ops // 2)
                    if run.out.acked == acked:
                        run.out.violations.append("no write succeeds once the disk works again")
                    run.call("close", db.close)
                    db = None
        if db is not None:
            run.writes(db, spec.ops // 2)
            run.call("close", db.close)
        run.out.faults, run.out.io = sim.faults_injected, sim.io_count - io0
        sim.clear_fault()
        sim.crash(mode="keep")
        ok, db = run.call("reopen", pagestore.open, "/store", fs=sim, **spec.options())
        if not ok:
            run.out.violations.append(f"the store does not reopen once the fault is gone: {db}")
            return run.out
        try:
            run.check(db)
            ok, _ = run.call("verify", db.verify)
            if not ok:
                run.out.violations.append("verify() failed after reopen")
        finally:
            db.close()
    return run.out


def _kill(db) -> None:
    """Drop the store as kill -9 would (no close, no flush)."""
    target = getattr(db, "inner", db)        # a wrapping self-test store keeps the real one
    target._abandon()


def count_io(spec: Spec) -> int:
    """Mutating I/Os the workload makes without a fault (the range of n)."""
    out = run_workload(spec)
    if out.violations:
        raise AssertionError(f"the workload fails without any fault: {out.violations[:3]}")
    return out.io
