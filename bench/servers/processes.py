"""Server processes: started as an unprivileged user, stopped by PID whatever happens.

Every server the comparison starts is registered here with its directory. Stopping
one sends its shutdown signal to the PID it was started with, waits, kills what is
left (the process and any child it forked, found through ``/proc``), and deletes the
directory. ``stop_all`` does that for every server still registered; it runs from
the callers' ``finally`` blocks, from ``atexit`` and from the SIGTERM/SIGINT/SIGHUP
handlers installed by ``guard()``, so an exception, Ctrl-C or a kill of the harness
leaves neither a process nor a data directory behind. ``started_pids()`` lists every
PID ever started, which is how the tests check that they are all gone.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

BENCH_USER = "pagestore-bench"

_live: dict = {}        # pid -> Server
_started: list = []     # every pid ever started (postmaster/mariadbd and their children)
_dirs: set = set()      # directories made by make_dir and not yet removed
_setup: set = set()     # process groups of setup commands still running
_guarded = False


class ServerError(RuntimeError):
    """A server could not be set up, started or stopped; the message names which and why."""


def system_user() -> tuple[int, int]:
    """(uid, gid) of the unprivileged account the servers run as, created if missing.

    PostgreSQL refuses to run as root; MariaDB is run as the same account so both
    servers see the same file permissions."""
    try:
        pw = pwd.getpwnam(BENCH_USER)
    except KeyError:
        if os.geteuid() != 0:
            me = pwd.getpwuid(os.geteuid())
            return me.pw_uid, me.pw_gid
        r = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                            BENCH_USER], capture_output=True, text=True)
        if r.returncode != 0 and "already exists" not in r.stderr:
            raise ServerError(f"useradd {BENCH_USER} failed: {r.stderr.strip()}")
        pw = pwd.getpwnam(BENCH_USER)
    return pw.pw_uid, pw.pw_gid


def make_dir(prefix: str, parent: str | None = None) -> str:
    """A fresh temporary directory (in ``parent`` or the system's temporary directory)
    owned by the bench user."""
    d = tempfile.mkdtemp(prefix=prefix, dir=parent)
    _dirs.add(d)
    uid, gid = system_user()
    os.chown(d, uid, gid)
    return d


def remove_dir(d: str) -> None:
    """Delete a directory made by ``make_dir`` (and forget it)."""
    shutil.rmtree(d, ignore_errors=True)
    _dirs.discard(d)


def run_as_user(argv: list, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a setup command (initdb, mariadb-install-db) as the bench user; raise on failure.

    It runs in its own process group, registered until it ends, so ``stop_all``
    kills it (and the helpers it forked) if the harness is stopped meanwhile."""
    uid, gid = system_user()
    p = subprocess.Popen(argv, user=uid, group=gid, extra_groups=[], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    _setup.add(p.pid)
    _started.append(p.pid)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as e:
        _kill_group(p.pid)
        p.wait()
        raise ServerError(f"{os.path.basename(argv[0])} did not finish in {timeout:.0f} s") from e
    finally:
        _setup.discard(p.pid)
    if p.returncode != 0:
        tail = (err or out).strip().splitlines()[-5:]
        raise ServerError(f"{os.path.basename(argv[0])} failed (exit {p.returncode}): " + " | ".join(tail))
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def children(pid: int) -> list:
    """PIDs whose parent is ``pid`` (PostgreSQL's backends, walwriter, checkpointer...)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append(int(name))
    return out


def running_under(path: str) -> list:
    """PIDs whose command line names ``path`` (every server is started with its directory)."""
    out = []
    for n in os.listdir("/proc"):
        if n.isdigit():
            try:
                with open(f"/proc/{n}/cmdline", "rb") as f:
                    if path.encode() in f.read():
                        out.append(int(n))
            except OSError:
                pass
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


class Server:
    """One running server: its Popen, directory and the signal that shuts it down cleanly."""

    def __init__(self, name: str, argv: list, directory: str, stop_signal: int, log_path: str):
        uid, gid = system_user()
        self.name, self.directory, self.stop_signal = name, directory, stop_signal
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, user=uid, group=gid, extra_groups=[], stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self.pid = self.proc.pid
        _live[self.pid] = self
        _started.append(self.pid)

    def note_children(self) -> list:
        """Record the server's current child processes (so their ends are checked too)."""
        kids = children(self.pid)
        for k in kids:
            if k not in _started:
                _started.append(k)
        return kids

    def log_tail(self, n: int = 8) -> str:
        """The last lines the server wrote to its log (for error messages)."""
        try:
            with open(self.log.name, "rb") as f:
                return " | ".join(f.read().decode("utf-8", "replace").strip().splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 60.0, delete: bool = True) -> None:
        """Shut down by PID, kill what remains after ``timeout``; delete the directory
        unless ``delete`` is false (a restart with other settings keeps the data)."""
        try:
            kids = self.note_children()
            if self.proc.poll() is None:
                try:
                    os.kill(self.pid, self.stop_signal)
                except ProcessLookupError:
                    pass
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            deadline = time.monotonic() + 10
            for k in kids:
                while alive(k) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if alive(k):
                    try:
                        os.kill(k, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        finally:
            _live.pop(self.pid, None)
            self.log.close()
            if delete:
                remove_dir(self.directory)


def stop_all() -> None:
    """Kill running setup commands, stop every registered server (newest first) and delete
    every directory made; never raises."""
    for pgid in list(_setup):
        _kill_group(pgid)
    deadline = time.monotonic() + 10
    while any(alive(p) for p in list(_setup)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in sorted(_live, reverse=True):
        srv = _live.get(pid)
        if srv is None:
            continue
        try:
            srv.stop(timeout=30)
        except Exception:  # noqa: BLE001 - the next server must still be stopped
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            _live.pop(pid, None)
    for d in list(_dirs):
        remove_dir(d)


def started_pids() -> list:
    """Every server PID (and child PID seen) started in this process."""
    return list(_started)


def _on_signal(signum, frame):
    stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def guard() -> None:
    """Install the atexit hook and the signal handlers once (main thread only)."""
    global _guarded
    if _guarded:
        return
    _guarded = True
    atexit.register(stop_all)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        try:
            if signal.getsignal(s) in (signal.SIG_DFL, signal.default_int_handler):
                signal.signal(s, _on_signal)
        except ValueError:   # not the main thread: atexit and finally still cover it
            pass
