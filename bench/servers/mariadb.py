"""MariaDB (InnoDB) as a peer: its own data directory, Unix socket only.

Built with ``mariadb-install-db`` as the bench user and started as ``mariadbd
--no-defaults`` (no system configuration is read; ``--skip-networking``), with a
256 MiB buffer pool, ``innodb_flush_log_at_trx_commit=1`` so each update is its
own durable commit, and no binary log. InnoDB has no timed checkpoint (its page
cleaner flushes when the redo log fills up, which at these rates takes minutes),
so ``checkpoints()`` makes one every ``checkpoint_s`` seconds while the workload
runs: ``innodb_max_dirty_pages_pct`` goes to 0, which makes the page cleaner
flush every dirty page, and back to its default 90 once the buffer pool is
clean (or the next checkpoint is due). ``innodb_doublewrite`` is fixed at start-up, so
each setting restarts the server on the same data. The table is
``kv(k BIGINT PRIMARY KEY, v VARBINARY(100))``.

Figures, per measured window, from ``SHOW GLOBAL STATUS``:

* log bytes: ``Innodb_os_log_written`` (redo);
* torn-page protection bytes: ``Innodb_dblwr_pages_written`` × ``innodb_page_size``;
* data-page bytes: ``Innodb_pages_written`` × ``innodb_page_size``.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import contextlib
import subprocess
import threading
import time

from bench.servers import processes

SETTINGS = (("doublewrite=ON", {"innodb_doublewrite": "ON"}),
            ("doublewrite=OFF", {"innodb_doublewrite": "OFF"}))
_STATUS = ("Innodb_os_log_written", "Innodb_dblwr_pages_written", "Innodb_pages_written")


def _which(*names):
    for n in names:
        p = shutil.which(n) or (f"/usr/sbin/{n}" if os.path.exists(f"/usr/sbin/{n}") else None)
        if p:
            return p
    return None


def missing() -> str | None:
    """Why MariaDB cannot run here (None when it can)."""
    if _which("mariadbd", "mysqld") is None or _which("mariadb-install-db", "mysql_install_db") is None:
        return "MariaDB is not installed (apt-get install mariadb-server)"
    try:
        import pymysql  # noqa: F401
    except ImportError:
        return "the PyMySQL driver is not installed (pip install -r requirements-bench.txt)"
    return None


class Mariadb:
    """One server: ``start``, ``load``, ``apply`` a setting, ``connect`` clients, ``stop``."""

    system = "mariadb"
    settings = SETTINGS

    def __init__(self, buffer_mb: int = 256, checkpoint_s: int = 30, parent: str | None = None):
        self.dir = processes.make_dir("pagestore-bench-mariadb-", parent)
        self.data = os.path.join(self.dir, "data")
        self.sock = os.path.join(self.dir, "mysqld.sock")
        self.buffer_mb = buffer_mb
        self.checkpoint_s = checkpoint_s
        self.server = None
        self.options = dict(SETTINGS[0][1])
        processes.run_as_user([_which("mariadb-install-db", "mysql_install_db"), "--no-defaults",
                               f"--datadir={self.data}", "--auth-root-authentication-method=normal",
                               "--skip-test-db", "--skip-name-resolve"])

    def version(self) -> str:
        """The server's version line."""
        r = subprocess.run([_which("mariadbd", "mysqld"), "--version"], capture_output=True, text=True)
        return r.stdout.strip()

    def start(self) -> None:
        """Start mariadbd with the current options and wait for its socket."""
        import pymysql
        argv = [_which("mariadbd", "mysqld"), "--no-defaults", f"--datadir={self.data}",
                f"--socket={self.sock}", "--skip-networking", f"--pid-file={self.dir}/mariadbd.pid",
                f"--log-error={self.dir}/error.log", f"--innodb-buffer-pool-size={self.buffer_mb}M",
                "--innodb-flush-log-at-trx-commit=1",
                "--skip-log-bin", "--innodb-buffer-pool-load-at-startup=OFF",
                "--innodb-buffer-pool-dump-at-shutdown=OFF"]
        argv += [f"--{k.replace('_', '-')}={v}" for k, v in self.options.items()]
        self.server = processes.Server(self.system, argv, self.dir, signal.SIGTERM,
                                       os.path.join(self.dir, "server.log"))
        deadline = time.monotonic() + 90
        while True:
            if self.server.proc.poll() is not None:
                raise processes.ServerError(f"mariadbd exited at start ({self.data}): {self._errlog()}")
            try:
                self._connect().close()
                return
            except pymysql.err.OperationalError as e:
                if time.monotonic() > deadline:
                    raise processes.ServerError(f"mariadbd did not accept connections in 90 s: {e}") from e
                time.sleep(0.2)

    def _errlog(self) -> str:
        try:
            with open(f"{self.dir}/error.log") as f:
                return " | ".join(f.read().strip().splitlines()[-6:])
        except OSError:
            return self.server.log_tail() if self.server else ""

    def _connect(self, db: str | None = None):
        import pymysql
        return pymysql.connect(unix_socket=self.sock, user="root", database=db, autocommit=True)

    def sql(self, *statements):
        """Run statements on a fresh connection; all rows of the last one."""
        c = self._connect()
        try:
            with c.cursor() as cur:
                for s in statements:
                    cur.execute(s)
                return cur.fetchall()
        finally:
            c.close()

    def load(self, rows: int, seed: int = 7) -> None:
        """Create and fill the table (keys 0..rows-1, 100 random bytes each)."""
        rng = random.Random(seed)
        self.sql("CREATE DATABASE bench", "CREATE TABLE bench.kv (k BIGINT PRIMARY KEY, "
                 "v VARBINARY(100) NOT NULL) ENGINE=InnoDB")
        c = self._connect("bench")
        try:
            with c.cursor() as cur:
                cur.execute("SET GLOBAL innodb_flush_log_at_trx_commit = 2")   # the load needs no per-row sync
                for lo in range(0, rows, 5000):
                    cur.executemany("INSERT INTO kv (k, v) VALUES (%s, %s)",
                                    [(k, rng.randbytes(100)) for k in range(lo, min(rows, lo + 5000))])
                cur.execute("SET GLOBAL innodb_flush_log_at_trx_commit = 1")
        finally:
            c.close()

    def apply(self, options: dict) -> None:
        """Restart on the same data with ``options`` (``innodb_doublewrite`` is read at start)."""
        self.options.update(options)
        if self.server is not None:
            self.server.stop(delete=False)
        self.start()
        got = {k: str(self.sql(f"SELECT @@GLOBAL.{k}")[0][0]) for k in options}
        want = {k: {"ON": "1", "OFF": "0"}.get(v, v) for k, v in options.items()}
        if got != want:
            raise processes.ServerError(f"MariaDB settings did not take effect: wanted {options}, have {got}")

    @contextlib.contextmanager
    def checkpoints(self):
        """Timed checkpoints while the block runs (InnoDB makes none of its own)."""
        stop = threading.Event()
        errors: list = []

        def loop():
            try:
                while not stop.wait(self.checkpoint_s):
                    self._flush_dirty(stop, time.monotonic() + self.checkpoint_s * 0.9)
            except Exception as e:  # noqa: BLE001 - re-raised by the block's owner
                errors.append(e)
        t = threading.Thread(target=loop, name="innodb-checkpoints", daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join(self.checkpoint_s + 30)
        if errors:
            raise processes.ServerError(f"MariaDB timed checkpoint failed: {errors[0]}")

    def _flush_dirty(self, stop, deadline) -> None:
        c = self._connect()
        try:
            with c.cursor() as cur:
                cur.execute("SET GLOBAL innodb_max_dirty_pages_pct = 0")
                try:
                    while not stop.is_set() and time.monotonic() < deadline:
                        cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'")
                        if int(cur.fetchone()[1]) < 64:
                            break
                        time.sleep(0.2)
                finally:
                    cur.execute("SET GLOBAL innodb_max_dirty_pages_pct = 90")
        finally:
            c.close()

    def connect(self):
        """(update, close) for one client: an UPDATE in autocommit mode."""
        c = self._connect("bench")
        cur = c.cursor()
        q = "UPDATE kv SET v = %s WHERE k = %s"

        def update(k, v):
            """One durable single-row update."""
            cur.execute(q, (v, k))
        return update, c.close

    def counters(self) -> dict:
        """The InnoDB status counters the figures come from, and the page size."""
        rows = dict(self.sql("SHOW GLOBAL STATUS WHERE Variable_name IN (%s)" %
                             ", ".join(f"'{n}'" for n in _STATUS)))
        out = {k: int(rows[k]) for k in _STATUS}
        out["page_size"] = int(self.sql("SELECT @@innodb_page_size")[0][0])
        return out

    def figures(self, before: dict, after: dict) -> dict:
        """Bytes of redo, doublewrite and data pages between two ``counters()``."""
        d = {k: after[k] - before[k] for k in _STATUS}
        page = after["page_size"]
        return {"log_bytes": d["Innodb_os_log_written"],
                "protection_bytes": d["Innodb_dblwr_pages_written"] * page,
                "data_page_bytes": d["Innodb_pages_written"] * page}

    def pids(self) -> list:
        """mariadbd (one process, many threads)."""
        return [self.server.pid] if self.server else []

    def stop(self) -> None:
        """Stop mariadbd by PID and delete its directory."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        processes.remove_dir(self.dir)
