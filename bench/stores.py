"""Store adapters: pagestore (public API only), the peers, and a no-op store.

Every adapter has the same surface so the runner's loops stay store-agnostic:
``put(k, v)``, ``put_tx(k, v)`` (the put in its own explicit transaction),
``get(k)``, ``delete(k)``, ``scan(start, n)`` (rows visited), ``scan_all()``,
``bulk_load(pairs)`` (one atomic batch), ``checkpoint()``, ``stats()`` and
``close()``. ``worker()`` returns the handle a writer thread uses (sqlite needs
a connection per thread; the others share one handle).

Capabilities are class attributes, declared on ``Store``, never probed for:
``checkpoint_state`` is None unless the store checkpoints (then the writers
read it per chunk, ``bench.measure``). The loops every adapter shares —
counting the rows of a scan, applying a transaction's writes, cutting a bulk
load into batches — are the functions ``count_rows``, ``apply_writes`` and
``batches`` below.

Durability follows ``wal_mode``: ``fsync`` maps to each peer's durable commit
(sqlite synchronous=FULL, lmdb sync=True, rocksdict/plyvel sync=True); the other
modes map to the peer's "survives a process kill" setting (sqlite NORMAL, lmdb
sync=False, rocksdict/plyvel sync=False). Peer configurations are those of
``../shared/reference/machine.md``.
"""

from __future__ import annotations

import itertools
import operator
import os

PAGESTORE_OPTIONS = ("page_size", "memory_size", "checkpoint_buffer_size", "wal_mode",
                     "checkpoint_interval", "checkpoint_spread", "checkpoint_threads", "recovery_data",
                     "recovery_compression", "encryption_key", "throttling")
STORES = ("pagestore", "sqlite", "lmdb", "lmdb_writemap", "rocksdict", "plyvel", "noop")


class StoreUnavailable(RuntimeError):
    """The store's library is missing (pagestore not built yet, a peer not installed)."""


def durable(config: dict) -> bool:
    """Whether ``config`` asks for a durable commit (each peer's fsync setting)."""
    return config.get("wal_mode") == "fsync"


def count_rows(rows, n=None) -> int:
    """How many of ``rows`` a scan visits: the first ``n``, or all with None."""
    if n is not None:
        rows = itertools.islice(rows, n)
    c = 0
    for _ in rows:  # a plain loop: what a reader of the rows pays, nothing more
        c += 1
    return c


def apply_writes(items, put, delete) -> None:
    """Apply (key, value) pairs through ``put``/``delete``; value None means delete."""
    for k, v in items:
        if v is None:
            delete(k)
        else:
            put(k, v)


def batches(pairs, size: int = 100_000):
    """Lists of up to ``size`` pairs: a bulk load as batches a peer's write buffer holds."""
    it = iter(pairs)
    while part := list(itertools.islice(it, size)):
        yield part


class Store:
    """Base adapter; subclasses bind the hot methods to the library's calls."""

    name = "store"

    def worker(self):
        """The handle one writer thread uses (this one, unless the library wants one per thread)."""
        return self

    def put_tx(self, k, v):
        """The put in its own explicit transaction."""
        self.put(k, v)

    def write_tx(self, items):
        """Apply (key, value) pairs, value None meaning delete, as one transaction."""
        apply_writes(items, self.put, self.delete)

    # Every adapter binds these two to its library; a base Store has neither.
    get = None
    delete = None

    def scan(self, start, n):
        """Rows visited reading ``n`` rows (all with None) from ``start`` (the first with None)."""
        return 0

    def scan_all(self):
        """Rows visited reading the whole store in key order."""
        return self.scan(None, None)

    def bulk_load(self, pairs):
        """Load (key, value) pairs; the peers do it in their fastest atomic batches."""
        for k, v in pairs:
            self.put(k, v)

    def checkpoint(self):
        """Only pagestore checkpoints; peers have nothing to do."""

    # A store that checkpoints sets this to a method returning (running, checkpoints
    # completed); the writers then file each chunk of ops as inside or outside a
    # checkpoint from their own reading instead of the sampler's (bench/measure.py).
    checkpoint_state = None

    def stats(self) -> dict:
        """The store's own counters (pagestore's stats()); peers have none."""
        return {}

    def describe(self) -> dict:
        """The settings this adapter opened the store with, for the results."""
        return {}

    def close(self):
        """Nothing to release by default."""


class NoopStore(Store):
    """Does nothing: measures the harness alone."""

    name = "noop"

    def __init__(self, path, config):
        self.path = path
        # a C callable that takes (k, v) and does nothing worth timing: the loop is what is measured
        self.put = self.put_tx = operator.is_

    def put(self, k, v):
        return None

    def write_tx(self, items):
        return None

    def get(self, k):
        return None

    def delete(self, k):
        return False


class PagestoreStore(Store):
    """pagestore through ``pagestore.open`` and the documented methods only."""

    name = "pagestore"

    def __init__(self, path, config):
        try:
            import pagestore
        except ImportError as e:  # the store is built separately
            raise StoreUnavailable(f"pagestore is not importable: {e}") from e
        self.options = {o: config[o] for o in PAGESTORE_OPTIONS if config.get(o) is not None}
        try:
            self.db = pagestore.open(path, **self.options)
        except ImportError as e:  # the C core is not built yet
            raise StoreUnavailable(f"pagestore cannot load its core: {e}") from e
        db = self.db
        self.put, self.get, self.delete = db.put, db.get, db.delete

    def put_tx(self, k, v):
        with self.db.transaction() as tx:
            tx.put(k, v)

    def write_tx(self, items):
        with self.db.transaction() as tx:
            apply_writes(items, tx.put, tx.delete)

    def scan(self, start, n):
        return count_rows(self.db.scan(start=start), n)

    def bulk_load(self, pairs):
        self._put_many_fitting(list(pairs))

    def _put_many_fitting(self, pairs):
        """One batch, or halves of it while it is larger than page memory can hold
        uncommitted (a preload of random keys into a small `memory_size`): a failed
        batch changes nothing, so its halves can follow."""
        import pagestore
        try:
            self.db.put_many(pairs)
        except pagestore.TransactionTooLargeError:
            if len(pairs) < 2:
                raise
            half = len(pairs) // 2
            self._put_many_fitting(pairs[:half])
            self._put_many_fitting(pairs[half:])

    def checkpoint(self):
        self.db.checkpoint()

    def checkpoint_state(self):
        """(running, completed): read once per chunk of ~2 ms by every writer, so it
        must be cheap: Database.checkpoint_state (two reads, no lock), not stats(),
        which takes the WAL's lock (with 16 fsync writers it cut their commits by
        20-25 %)."""
        return self.db.checkpoint_state()

    def stats(self) -> dict:
        try:
            return dict(self.db.stats())
        except Exception:  # a stats() that is not there yet must not stop a run
            return {}

    def describe(self):
        return dict(self.options)

    def close(self):
        self.db.close()


def _classes() -> dict:
    from bench import peer_stores as p
    return {c.name: c for c in (NoopStore, PagestoreStore, p.SqliteStore, p.LmdbStore,
                                p.LmdbWritemapStore, p.RocksdictStore, p.PlyvelStore)}


def open_store(name: str, path: str, config: dict) -> Store:
    """Open adapter ``name`` on directory ``path`` (created if missing)."""
    classes = _classes()
    if name not in classes:
        raise ValueError(f"unknown store {name!r}; choose from {', '.join(STORES)}")
    os.makedirs(path, exist_ok=True)
    try:
        return classes[name](path, config)
    except ImportError as e:
        raise StoreUnavailable(f"{name}: {e}") from e


_probe_result = None


def pagestore_available() -> tuple[bool, str]:
    """Whether a pagestore can be opened here, and why not.

    The trial open runs in a child process: a broken build (say, a sanitizer
    build without its runtime preloaded) may abort the process that loads it.
    """
    global _probe_result
    if _probe_result is None:
        import subprocess
        import sys
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        try:
            p = subprocess.run([sys.executable, "-m", "bench.probe"], cwd=root, capture_output=True, text=True,
                               timeout=120)
            why = (p.stderr.strip().splitlines() or [f"exit code {p.returncode}"])[-1]
            _probe_result = (True, "") if p.returncode == 0 else (False, f"pagestore.open failed: {why}")
        except subprocess.TimeoutExpired:
            _probe_result = (False, "pagestore.open did not return within 120 s")
    return _probe_result
