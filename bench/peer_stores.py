"""Peer store adapters: sqlite3, lmdb (plain and writemap), rocksdict, plyvel.

Configurations are those of ``../shared/reference/machine.md``; durability
follows ``wal_mode`` as described in ``bench.stores``: ``fsync`` -> sqlite
synchronous=FULL, lmdb sync=True, rocksdict/plyvel sync=True; otherwise sqlite
NORMAL, lmdb sync=False (writemap with map_async), rocksdict/plyvel sync=False.
"""

from __future__ import annotations

import os
import sqlite3
import threading

from bench.stores import Store, apply_writes, batches, count_rows, durable


class _SqliteWorker:
    """One sqlite connection: a writer thread's handle (sqlite wants one per thread)."""

    checkpoint_state = None     # as Store's: sqlite's own checkpoints are not timed

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

        def get(k):
            row = ex("SELECT v FROM kv WHERE k = ?", (k,)).fetchone()
            return row[0] if row else None

        self.get = get
        self.delete = lambda k: ex("DELETE FROM kv WHERE k = ?", (k,))

    def put_tx(self, k, v):
        """The put in its own explicit transaction."""
        ex = self.conn.execute
        ex("BEGIN IMMEDIATE")
        ex(self._ins, (k, v))
        ex("COMMIT")

    def write_tx(self, items):
        """(key, value) pairs, value None meaning delete, as one transaction."""
        ex = self.conn.execute
        ex("BEGIN IMMEDIATE")
        apply_writes(items, self.put, self.delete)
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
        return count_rows(self.conn.execute(q, args))


class SqliteStore(Store):
    """sqlite3: WAL journal, WITHOUT ROWID table, 64 MiB cache, 4 KiB pages."""

    name = "sqlite"

    def __init__(self, path, config):
        os.makedirs(path, exist_ok=True)
        self.path = path
        self.synchronous = "FULL" if durable(config) else "NORMAL"
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
        self.write_tx = m.write_tx

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
        sync = durable(config)
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

    def write_tx(self, items):
        with self.env.begin(write=True) as t:
            apply_writes(items, t.put, t.delete)

    def scan(self, start, n):
        with self.env.begin() as t:
            cur = t.cursor()
            ok = cur.set_range(start) if start is not None else cur.first()
            return count_rows(cur.iternext(keys=True, values=True), n) if ok else 0

    def bulk_load(self, pairs):
        with self.env.begin(write=True) as t:
            t.cursor().putmulti(pairs)

    def describe(self):
        return {k: v for k, v in self.settings.items() if k != "max_readers"}

    def close(self):
        self.env.close()


class LmdbWritemapStore(LmdbStore):
    """lmdb with writemap (and map_async when not durable)."""

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
        w.sync = durable(config)
        self.sync = w.sync
        db.set_write_options(w)
        self.put, self.get, self.delete = db.put, db.get, db.delete

    def put_tx(self, k, v):
        wb = self._rd.WriteBatch(raw_mode=True)
        wb.put(k, v)
        self.db.write(wb)

    def write_tx(self, items):
        wb = self._rd.WriteBatch(raw_mode=True)
        apply_writes(items, wb.put, wb.delete)
        self.db.write(wb)

    def scan(self, start, n):
        return count_rows(self.db.items(from_key=start) if start is not None else self.db.items(), n)

    def bulk_load(self, pairs):
        for part in batches(pairs):
            self.write_tx(part)

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
        self.sync = sync = durable(config)
        raw_put, raw_del = db.put, db.delete
        self.put = lambda k, v: raw_put(k, v, sync=sync)
        self.delete = lambda k: raw_del(k, sync=sync)
        self.get = db.get

    def put_tx(self, k, v):
        with self.db.write_batch(sync=self.sync) as wb:
            wb.put(k, v)

    def write_tx(self, items):
        self._batch(items, self.sync)

    def _batch(self, items, sync):
        with self.db.write_batch(sync=sync) as wb:
            apply_writes(items, wb.put, wb.delete)

    def scan(self, start, n):
        return count_rows(self.db.iterator(start=start) if start is not None else self.db.iterator(), n)

    def bulk_load(self, pairs):
        # LevelDB's default write_batch (no sync) even for a durable store: the load, not a commit, is timed
        for part in batches(pairs):
            self._batch(part, False)

    def describe(self):
        return {"sync": self.sync}

    def close(self):
        self.db.close()
