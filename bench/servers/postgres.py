"""PostgreSQL as a peer: its own cluster in a temporary directory, Unix socket only.

Built with ``initdb`` as the bench user, started as ``postgres -D`` (so the harness
holds the postmaster's PID), configured like the other systems: 256 MiB of
shared buffers, 30 s timed checkpoints (``max_wal_size`` large enough that none
is requested by WAL volume), ``synchronous_commit=on`` with ``fsync`` so each
update is its own durable commit. The table is ``kv(k bigint primary key, v bytea)``.

Figures, per measured window:

* log bytes: ``pg_wal_lsn_diff`` of ``pg_current_wal_lsn()`` at the window's ends
  (the WAL as written, page images included);
* torn-page protection bytes: the "FPI size" total of ``pg_waldump --stats=record``
  over the same LSN range (page images in the WAL, compressed if
  ``wal_compression`` is on); ``wal_keep_size`` keeps those segments until read;
* data-page bytes: (``buffers_checkpoint`` + ``buffers_clean`` + ``buffers_backend``)
  of ``pg_stat_bgwriter`` × 8 KiB.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import time

from bench.servers import processes

SETTINGS = (
    ("full_page_writes=on", {"full_page_writes": "on", "wal_compression": "off"}),
    ("full_page_writes=off", {"full_page_writes": "off", "wal_compression": "off"}),
    ("full_page_writes=on, wal_compression=lz4", {"full_page_writes": "on", "wal_compression": "lz4"}),
)
PAGE = 8192
_USER = "bench"


def bindir() -> str | None:
    """The newest installed PostgreSQL server's bin directory, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                   key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else 0)
    return os.path.dirname(found[-1]) if found else None


def missing() -> str | None:
    """Why PostgreSQL cannot run here (None when it can)."""
    if bindir() is None:
        return "PostgreSQL is not installed (apt-get install postgresql)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed (pip install -r requirements-bench.txt)"
    return None


class Postgres:
    """One cluster: ``start``, ``load``, ``apply`` a setting, ``connect`` clients, ``stop``."""

    system = "postgresql"
    settings = SETTINGS

    def __init__(self, buffer_mb: int = 256, checkpoint_s: int = 30, parent: str | None = None):
        self.bin = bindir()
        self.dir = processes.make_dir("pagestore-bench-pg-", parent)
        self.data = os.path.join(self.dir, "data")
        self.server = None
        processes.run_as_user([os.path.join(self.bin, "initdb"), "-D", self.data, "-U", _USER,
                               "--auth=trust", "-E", "UTF8", "--no-sync", "--locale=C"])
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("\n# pagestore bench: Unix socket only, durable commits, timed checkpoints\n"
                    f"listen_addresses = ''\nunix_socket_directories = '{self.dir}'\n"
                    f"shared_buffers = {buffer_mb}MB\ncheckpoint_timeout = {checkpoint_s}s\n"
                    "max_wal_size = 16GB\nmin_wal_size = 1GB\nwal_keep_size = 16GB\n"
                    "synchronous_commit = on\nfsync = on\nlog_checkpoints = on\n")

    def version(self) -> str:
        """The server's version line."""
        r = subprocess.run([os.path.join(self.bin, "postgres"), "--version"], capture_output=True, text=True)
        return r.stdout.strip()

    def start(self) -> None:
        """Start the postmaster and wait until it accepts connections on its socket."""
        import psycopg
        self.server = processes.Server(self.system, [os.path.join(self.bin, "postgres"), "-D", self.data],
                                       self.dir, signal.SIGINT, os.path.join(self.dir, "server.log"))
        deadline = time.monotonic() + 60
        while True:
            if self.server.proc.poll() is not None:
                raise processes.ServerError(f"postgres exited at start ({self.data}): {self.server.log_tail()}")
            try:
                psycopg.connect(**self._conninfo()).close()
                return
            except psycopg.OperationalError as e:
                if time.monotonic() > deadline:
                    raise processes.ServerError(f"postgres did not accept connections in 60 s: {e}") from e
                time.sleep(0.2)

    def _conninfo(self) -> dict:
        return {"host": self.dir, "dbname": "postgres", "user": _USER, "autocommit": True}

    def sql(self, *statements):
        """Run statements on a fresh connection; the last one's first row."""
        import psycopg
        with psycopg.connect(**self._conninfo()) as c:
            row = None
            for s in statements:
                cur = c.execute(s)
                row = cur.fetchone() if cur.description else None
            return row

    def load(self, rows: int, seed: int = 7) -> None:
        """Create and fill the table (keys 0..rows-1, 100 random bytes each), then checkpoint."""
        import psycopg
        import random
        rng = random.Random(seed)
        with psycopg.connect(**self._conninfo()) as c:
            c.execute("CREATE TABLE kv (k bigint PRIMARY KEY, v bytea NOT NULL)")
            with c.cursor().copy("COPY kv (k, v) FROM STDIN") as cp:
                for k in range(rows):
                    cp.write_row((k, rng.randbytes(100)))
            c.execute("VACUUM (FREEZE, ANALYZE) kv")
            c.execute("CHECKPOINT")
        self.server.note_children()

    def apply(self, options: dict) -> None:
        """Switch a setting (both are reloadable), then checkpoint so a cycle starts clean."""
        import psycopg
        with psycopg.connect(**self._conninfo()) as c:
            for k, v in options.items():
                try:
                    c.execute(f"ALTER SYSTEM SET {k} = '{v}'")
                except psycopg.Error as e:
                    raise processes.ServerError(f"PostgreSQL rejected {k}={v}: {e}") from e
            c.execute("SELECT pg_reload_conf()")
        time.sleep(1.0)   # the checkpointer rereads its configuration asynchronously
        self.sql("CHECKPOINT")
        got = {k: self.sql(f"SHOW {k}")[0] for k in options}
        if got != {k: str(v) for k, v in options.items()}:
            raise processes.ServerError(f"PostgreSQL settings did not take effect: wanted {options}, have {got}")

    def connect(self):
        """(update, close) for one client: a prepared UPDATE in autocommit mode."""
        import psycopg
        c = psycopg.connect(**self._conninfo())
        q = "UPDATE kv SET v = %s WHERE k = %s"

        def update(k, v):
            """One durable single-row update."""
            c.execute(q, (v, k), prepare=True)
        return update, c.close

    def counters(self) -> dict:
        """WAL position and buffers written, read at one instant."""
        lsn, ckpt, clean, backend = self.sql(
            "SELECT pg_current_wal_lsn()::text, buffers_checkpoint, buffers_clean, buffers_backend "
            "FROM pg_stat_bgwriter")
        return {"lsn": lsn, "pages": int(ckpt) + int(clean) + int(backend)}

    def figures(self, before: dict, after: dict) -> dict:
        """Bytes of log, page images and data pages between two ``counters()``."""
        log = int(self.sql(f"SELECT pg_wal_lsn_diff('{after['lsn']}', '{before['lsn']}')")[0])
        self.sql("SELECT pg_switch_wal()")   # pg_waldump reads only complete records up to --end
        return {"log_bytes": log, "protection_bytes": self.fpi_bytes(before["lsn"], after["lsn"]),
                "data_page_bytes": (after["pages"] - before["pages"]) * PAGE}

    def fpi_bytes(self, start: str, end: str) -> int:
        """Full-page-image bytes between two LSNs, from ``pg_waldump --stats=record``."""
        r = subprocess.run([os.path.join(self.bin, "pg_waldump"), "-p", os.path.join(self.data, "pg_wal"),
                            "-s", start, "-e", end, "--stats=record"], capture_output=True, text=True)
        if r.returncode != 0:
            raise processes.ServerError(f"pg_waldump failed on {self.data}/pg_wal: {r.stderr.strip()[-300:]}")
        return waldump_fpi_bytes(r.stdout)

    def pids(self) -> list:
        """The postmaster and its children now."""
        return [self.server.pid] + processes.children(self.server.pid) if self.server else []

    def stop(self) -> None:
        """Stop the postmaster by PID and delete the cluster."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        processes.remove_dir(self.dir)


def waldump_fpi_bytes(stats: str) -> int:
    """The "FPI size" column of the Total line of ``pg_waldump --stats`` output."""
    for line in stats.splitlines():
        if line.startswith("Total"):
            nums = re.sub(r"\[[^\]]*\]|\([^)]*\)", " ", line).split()[1:]
            if len(nums) >= 4:      # count, record size, FPI size, combined size
                return int(nums[2])
    raise ValueError("pg_waldump output has no Total line with an FPI size: " + stats[-200:])
