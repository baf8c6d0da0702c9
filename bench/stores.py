"""Store adapters: pagestore (public API only), the peers, and a no-op store.

Every adapter has the same surface so the runner's loops stay store-agnostic:
``put(k, v)``, ``put_tx(k, v)`` (the put in its own explicit transaction),
``get(k)``, ``delete(k)``, ``scan(start, n)`` (rows visited), ``scan_all()``,
``bulk_load(pairs)`` (one atomic batch), ``checkpoint()``, ``stats()`` and
``close()``. ``worker()`` returns the handle a writer thread uses (sqlite needs
a connection per thread; the others share one handle).

Durability follows ``wal_mode``: ``fsync`` maps to each peer's durable commit
(sqlite synchronous=FULL, lmdb sync=True, rocksdict/plyvel sync=True); the other
modes map to the peer's "survives a process kill" setting (sqlite NORMAL, lmdb
sync=False, rocksdict/plyvel sync=False). Peer configurations are those of
``../shared/reference/machine.md``.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import threading

PAGESTORE_OPTIONS = ("page_size", "memory_size", "checkpoint_buffer_size", "wal_mode",
                     "checkpoint_interval", "checkpoint_threads", "recovery_data",
                     "recovery_compression", "encryption_key", "throttling")
STORES = ("pagestore", "sqlite", "lmdb", "lmdb_writemap", "rocksdict", "plyvel", "noop")


class StoreUnavailable(RuntimeError):
    """The store's library is missing (pagestore not built yet, a peer not installed)."""


def _durable(config: dict) -> bool:
    return config.get("wal_mode") == "fsync"


class Store:
    """Base adapter; subclasses bind the hot methods to the library's calls."""

    name = "store"

    def worker(self):
        return self

    def put_tx(self, k, v):
        self.put(k, v)

    def delete(self, k):
        raise NotImplementedError

    def scan(self, start, n):
        return 0

    def scan_all(self):
        return self.scan(None, None)

    def bulk_load(self, pairs):
        for k, v in pairs:
            self.put(k, v)

    def checkpoint(self):
        """Only pagestore checkpoints; peers have nothing to do."""

    def stats(self) -> dict:
        return {}

    def describe(self) -> dict:
        return {}

    def close(self):
        """Nothing to release by default."""


class NoopStore(Store):
    """Does nothing: measures the harness alone."""

    name = "noop"

    def __init__(self, path, config):
        self.path = path

    def put(self, k, v):
        return None

    put_tx = put

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
        if not hasattr(pagestore, "open"):
            raise StoreUnavailable("pagestore.open does not exist yet")
        self.options = {o: config[o] for o in PAGESTORE_OPTIONS if config.get(o) is not None}
        self.db = pagestore.open(path, **self.options)
        db = self.db
        self.put, self.get, self.delete = db.put, db.get, db.delete

    def put_tx(self, k, v):
        with self.db.transaction() as tx:
            tx.put(k, v)

    def scan(self, start, n):
        it = self.db.scan(start=start)
        if n is not None:
            it = itertools.islice(it, n)
        c = 0
        for _ in it:
            c += 1
        return c

    def bulk_load(self, pairs):
        put_many = getattr(self.db, "put_many", None)
        if put_many is not None:
            put_many(pairs)
        else:
            with self.db.transaction() as tx:
                for k, v in pairs:
                    tx.put(k, v)

    def checkpoint(self):
        self.db.checkpoint()

    def stats(self) -> dict:
        try:
            return dict(self.db.stats())
        except Exception:  # a stats() that is not there yet must not stop a run
            return {}

    def describe(self):
        return dict(self.options)

    def close(self):
        self.db.close()


class _SqliteWorker:
    def __init__(self, path, synchronous):
        c = sqlite3.connect(os.path.join(path, "kv.sqlite"), isolation_level=None,
                            check_same_thread=False, timeout=600)
        c.execute("PRAGMA busy_timeout=600000")
        c.execute(f"PRAGMA synchronous={synchronous}")
        c.execute("PRAGMA cache_size=-65536")
        self.conn = c
        ex = c.execute
        self._ins = "INSERT OR REPLACE INTO kv(k, v) VALUES (?, ?)"
        self.put = lambda k, v: ex(self._ins, (k, v))
        self.get = lambda k: ex("SELECT v FROM kv WHERE k = ?", (k,)).fetchone()
        self.delete = lambda k: ex("DELETE FROM kv WHERE k = ?", (k,))

    def put_tx(self, k, v):
        ex = self.conn.execute
        ex("BEGIN IMMEDIATE")
        ex(self._ins, (k, v))
        ex("COMMIT")

    def scan(self, start, n):
        q, args = "SELECT k, v FROM kv", []
        if start is not None:
            q += " WHERE k >= ?"
            args.append(start)
        q += " ORDER BY k"
        if n is not None:
            q += " LIMIT ?"
            args.append(n)
        c = 0
        for _ in self.conn.execute(q, args):
            c += 1
        return c


class SqliteStore(Store):
    """sqlite3: WAL journal, WITHOUT ROWID table, 64 MiB cache, 4 KiB pages."""

    name = "sqlite"

    def __init__(self, path, config):
        os.makedirs(path, exist_ok=True)
        self.path = path
        self.synchronous = "FULL" if _durable(config) else "NORMAL"
        c = sqlite3.connect(os.path.join(path, "kv.sqlite"), isolation_level=None)
        c.execute("PRAGMA page_size=4096")
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("CREATE TABLE IF NOT EXISTS kv(k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
        c.close()
        self._main = _SqliteWorker(path, self.synchronous)
        self._workers = [self._main]
        self._lock = threading.Lock()
        m = self._main
        self.put, self.get, self.delete, self.put_tx, self.scan = m.put, m.get, m.delete, m.put_tx, m.scan

    def worker(self):
        w = _SqliteWorker(self.path, self.synchronous)
        with self._lock:
            self._workers.append(w)
        return w

    def bulk_load(self, pairs):
        c = self._main.conn
        c.execute("BEGIN")
        c.executemany(self._main._ins, pairs)
        c.execute("COMMIT")

    def describe(self):
        return {"synchronous": self.synchronous, "journal_mode": "WAL"}

    def close(self):
        for w in self._workers:
            w.conn.close()


class LmdbStore(Store):
    """lmdb: 16 GiB map; sync/metasync per durability; writemap variant below."""

    name = "lmdb"
    writemap = False

    def __init__(self, path, config):
        import lmdb
        sync = _durable(config)
        self.settings = dict(map_size=16 << 30, writemap=self.writemap, sync=sync, metasync=sync,
                             map_async=self.writemap and not sync, max_readers=256)
        self.env = env = lmdb.open(path, **self.settings)
        begin = env.begin

        def put(k, v):
            t = begin(write=True)
            t.put(k, v)
            t.commit()

        def get(k):
            with begin() as t:
                return t.get(k)

        def delete(k):
            with begin(write=True) as t:
                return t.delete(k)

        self.put, self.put_tx, self.get, self.delete = put, put, get, delete

    def scan(self, start, n):
        c = 0
        with self.env.begin() as t:
            cur = t.cursor()
            ok = cur.set_range(start) if start is not None else cur.first()
            if not ok:
                return 0
            it = cur.iternext(keys=True, values=True)
            if n is not None:
                it = itertools.islice(it, n)
            for _ in it:
                c += 1
        return c

    def bulk_load(self, pairs):
        with self.env.begin(write=True) as t:
            t.cursor().putmulti(pairs)

    def describe(self):
        return {k: v for k, v in self.settings.items() if k != "max_readers"}

    def close(self):
        self.env.close()


class LmdbWritemapStore(LmdbStore):
    name = "lmdb_writemap"
    writemap = True


class RocksdictStore(Store):
    """rocksdict in raw mode, default Options (WAL on), WriteOptions.sync per durability."""

    name = "rocksdict"

    def __init__(self, path, config):
        import rocksdict
        self._rd = rocksdict
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        self.db = db = rocksdict.Rdict(path, opts)
        w = rocksdict.WriteOptions()
        w.sync = _durable(config)
        self.sync = w.sync
        db.set_write_options(w)
        self.put, self.get, self.delete = db.put, db.get, db.delete

    def put_tx(self, k, v):
        wb = self._rd.WriteBatch(raw_mode=True)
        wb.put(k, v)
        self.db.write(wb)

    def scan(self, start, n):
        it = self.db.items(from_key=start) if start is not None else self.db.items()
        if n is not None:
            it = itertools.islice(it, n)
        c = 0
        for _ in it:
            c += 1
        return c

    def bulk_load(self, pairs, chunk=100_000):
        it = iter(pairs)
        while True:
            part = list(itertools.islice(it, chunk))
            if not part:
                break
            wb = self._rd.WriteBatch(raw_mode=True)
            for k, v in part:
                wb.put(k, v)
            self.db.write(wb)

    def describe(self):
        return {"raw_mode": True, "sync": self.sync}

    def close(self):
        self.db.close()


class PlyvelStore(Store):
    """plyvel (bundled LevelDB), default options, put(sync=...) per durability."""

    name = "plyvel"

    def __init__(self, path, config):
        import plyvel
        self.db = db = plyvel.DB(path, create_if_missing=True)
        self.sync = sync = _durable(config)
        raw_put, raw_del = db.put, db.delete
        self.put = lambda k, v: raw_put(k, v, sync=sync)
        self.delete = lambda k: raw_del(k, sync=sync)
        self.get = db.get

    def put_tx(self, k, v):
        with self.db.write_batch(sync=self.sync) as wb:
            wb.put(k, v)

    def scan(self, start, n):
        it = self.db.iterator(start=start) if start is not None else self.db.iterator()
        if n is not None:
            it = itertools.islice(it, n)
        c = 0
        for _ in it:
            c += 1
        return c

    def bulk_load(self, pairs, chunk=100_000):
        it = iter(pairs)
        while True:
            part = list(itertools.islice(it, chunk))
            if not part:
                break
            with self.db.write_batch() as wb:
                for k, v in part:
                    wb.put(k, v)

    def describe(self):
        return {"sync": self.sync}

    def close(self):
        self.db.close()


_CLASSES = {c.name: c for c in (NoopStore, PagestoreStore, SqliteStore, LmdbStore,
                                LmdbWritemapStore, RocksdictStore, PlyvelStore)}


def open_store(name: str, path: str, config: dict) -> Store:
    """Open adapter ``name`` on directory ``path`` (created if missing)."""
    if name not in _CLASSES:
        raise ValueError(f"unknown store {name!r}; choose from {', '.join(STORES)}")
    os.makedirs(path, exist_ok=True)
    try:
        return _CLASSES[name](path, config)
    except ImportError as e:
        raise StoreUnavailable(f"{name}: {e}") from e


def pagestore_available() -> tuple[bool, str]:
    """Whether ``pagestore.open`` can be called, and why not."""
    try:
        import pagestore
    except Exception as e:
        return False, f"pagestore is not importable ({e})"
    if not hasattr(pagestore, "open"):
        return False, "pagestore.open does not exist yet"
    return True, ""
