"""pagestore on the servers' workload: the same table, updates and durability, in-process.

The store is opened with ``wal_mode="fsync"`` (each update is its own durable
commit; concurrent commits share an fsync, as the servers' group commit does),
``checkpoint_interval=30``, and 256 MiB of page memory, as the servers' buffer
pools. Keys are the table's ``bigint`` keys as 8 big-endian bytes. The clients
are threads of this process calling ``Database.put``: pagestore is embedded,
there is no server to connect to.

Figures, per measured window, from ``Database.stats()``:

* log bytes: ``wal_bytes_written``;
* torn-page protection bytes: ``recovery_bytes_written`` (recovery files) with
  ``recovery_data="checkpoint"``; with ``recovery_data="wal"`` the protection is
  the page records (images and deltas) inside the WAL, which ``stats()`` does not
  count apart: it is taken as this run's log bytes above those of the
  recovery-files run on the same workload (both log the same logical records),
  filled in by the comparison;
* data-page bytes: ``page_bytes_written``.
"""

from __future__ import annotations

import os
import random

from bench.servers import processes

SETTINGS = (
    ("recovery files, default codec", {"recovery_data": "checkpoint"}),
    ("recovery files, lz4", {"recovery_data": "checkpoint", "recovery_compression": "lz4"}),
    ("page images in the WAL (legacy)", {"recovery_data": "wal"}),
)
_STATS = ("wal_bytes_written", "recovery_bytes_written", "page_bytes_written")


def missing() -> str | None:
    """Why pagestore cannot run here (None when it can)."""
    try:
        import pagestore
        pagestore.Config  # noqa: B018 - the package imports
    except Exception as e:  # noqa: BLE001 - an unbuilt core raises various errors
        return f"pagestore is not importable: {e}"
    return None


def key(k: int) -> bytes:
    """The table's bigint key as pagestore's 8-byte key (big-endian keeps the order)."""
    return k.to_bytes(8, "big")


class Pagestore:
    """One store per setting: ``apply`` (re)builds it, ``load`` fills it."""

    system = "pagestore"
    settings = SETTINGS

    def __init__(self, buffer_mb: int = 256, checkpoint_s: int = 30, parent: str | None = None):
        self.dir = processes.make_dir("pagestore-bench-ps-", parent)
        self.base = {"wal_mode": "fsync", "checkpoint_interval": float(checkpoint_s),
                     "memory_size": buffer_mb << 20}
        self.db = None
        self.options: dict = {}

    def version(self) -> str:
        """The library's name and version."""
        import pagestore
        return "pagestore " + getattr(pagestore, "__version__", "")

    def start(self) -> None:
        """Nothing runs until a setting is applied (the store is opened per setting)."""

    def apply(self, options: dict) -> None:
        """Open a fresh store with ``options`` (the recovery-data mode is fixed at creation)."""
        import pagestore
        self.close_db()
        path = os.path.join(self.dir, "db")
        processes.remove_dir(path)
        self.options = dict(options)
        self.db = pagestore.open(path, **self.base, **options)
        self.loaded = False

    def load(self, rows: int, seed: int = 7) -> None:
        """Fill the table in key order in batches, then checkpoint so the window starts clean."""
        self.rows, self.seed = rows, seed
        if self.db is None:
            return   # loaded when a setting opens the store
        rng = random.Random(seed)
        put_many = self.db.put_many
        for lo in range(0, rows, 20_000):
            put_many([(key(k), rng.randbytes(100)) for k in range(lo, min(rows, lo + 20_000))])
        self.db.checkpoint()
        self.loaded = True

    def prepare(self, options: dict) -> None:
        """Open a store with ``options`` and load the table into it."""
        self.apply(options)
        self.load(self.rows, self.seed)

    def connect(self):
        """(update, close) for one client thread: ``put`` on the shared handle."""
        put = self.db.put

        def update(k, v):
            """One durable single-row update (its own commit)."""
            put(key(k), v)
        return update, (lambda: None)

    def counters(self) -> dict:
        """The byte counters the figures come from."""
        st = self.db.stats()
        return {k: int(st.get(k, 0)) for k in _STATS}

    def figures(self, before: dict, after: dict) -> dict:
        """Bytes of WAL, recovery files and data pages between two ``counters()``."""
        d = {k: after[k] - before[k] for k in _STATS}
        legacy = self.options.get("recovery_data") == "wal"
        return {"log_bytes": d["wal_bytes_written"],
                "protection_bytes": None if legacy else d["recovery_bytes_written"],
                "data_page_bytes": d["page_bytes_written"]}

    def codec(self) -> str:
        """The codec the open store resolved (the default depends on liblz4 being present)."""
        try:
            hist = self.db.stats().get("last_checkpoint") or {}
            return hist.get("compression") or self.options.get("recovery_compression", "")
        except Exception:  # noqa: BLE001
            return ""

    def pids(self) -> list:
        """This process: the store runs inside the harness."""
        return [os.getpid()]

    def close_db(self) -> None:
        """Close the open store, if any."""
        if self.db is not None:
            db, self.db = self.db, None
            db.close()

    def stop(self) -> None:
        """Close the store and delete its directory."""
        try:
            self.close_db()
        finally:
            processes.remove_dir(self.dir)
