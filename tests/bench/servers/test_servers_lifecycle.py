"""Every server the comparison starts is stopped by PID and deleted, also when a run fails."""

import os
import signal
import subprocess
import sys
import time

import pytest

from bench.servers import comparison, processes

procs_under = processes.running_under

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _need(system):
    why = comparison.missing((system,)).get(system)
    if why:
        pytest.skip(f"not run: {why}")


@pytest.mark.parametrize("system", ["postgresql", "mariadb"])
def test_a_failing_run_leaves_no_server_process_and_no_directory(system, server_parent, monkeypatch):
    _need(system)
    seen = {}

    def failing_workload(connect, *a, **kw):
        seen["pids"] = [p for p in processes.started_pids() if processes.alive(p)]
        seen["under"] = procs_under(server_parent)
        raise RuntimeError("injected failure in the measured window")

    monkeypatch.setattr(comparison, "run_updates", failing_workload)
    before = set(processes.started_pids())
    with pytest.raises(RuntimeError, match="injected"):
        comparison.run(rows=1000, seconds=1, warmup=0, systems=(system,), parent=server_parent,
                       progress=lambda s: None)
    assert seen["pids"] and seen["under"], "the server was running when the failure hit"
    started = set(processes.started_pids()) - before
    assert started >= set(seen["pids"]) - before
    assert [p for p in started if processes.alive(p)] == []
    assert procs_under(server_parent) == []
    assert os.listdir(server_parent) == []


# what the harness is doing when the signal arrives: building the data directory, or serving
PHASE = {("postgresql", "setup"): b"initdb\0", ("mariadb", "setup"): b"mariadb-install-db",
         ("postgresql", "serving"): b"/postgres\0-D", ("mariadb", "serving"): b"mariadbd\0--no-defaults"}


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _started(pid):
    """When `pid` started (clock ticks after boot), None once it is gone. With
    the PID it names one process: PIDs wrap quickly on a busy machine
    (pid_max 32768), and a reused one - another test's process, a kernel
    worker with an empty command line - is not the process seen here."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2:].split()[19])


def _see(seen, pids):
    for p in pids:
        if p not in seen:
            t = _started(p)
            if t is not None:
                seen[p] = t


def _left(seen, wait=30.0):
    """The processes in `seen` still running (same PID and start time, not a
    zombie), once those on their way out have had `wait` seconds to go: one
    that is exiting already has an empty command line but is not a zombie yet,
    while a server left behind never goes by itself."""
    deadline = time.monotonic() + wait
    while True:
        left = {p: _cmdline(p) for p, t in seen.items() if processes.alive(p) and _started(p) == t}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from bench.servers import comparison
comparison.run(rows=2000, seconds=600, warmup=600, systems=(sys.argv[2],), parent=sys.argv[3],
               progress=lambda s: None)
"""


@pytest.mark.parametrize("system,phase", sorted(PHASE))
def test_a_harness_killed_with_sigterm_stops_its_servers(system, phase, server_parent):
    _need(system)
    child = subprocess.Popen([sys.executable, "-c", CHILD, ROOT, system, server_parent])
    try:
        pids, deadline = {}, time.monotonic() + 60
        while time.monotonic() < deadline and child.poll() is None:
            _see(pids, procs_under(server_parent))
            for p in list(pids):
                _see(pids, processes.children(p))
            if any(PHASE[system, phase] in _cmdline(p) for p in pids):
                time.sleep(2 if phase == "serving" else 0.1)   # into the warm-up / mid-setup
                for p in list(pids):
                    _see(pids, processes.children(p))
                break
            time.sleep(0.02)
        assert child.poll() is None and pids, f"the harness never reached {phase}"
        child.send_signal(signal.SIGTERM)
        assert child.wait(90) == -signal.SIGTERM
        left = _left(pids)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert left == {}
    assert os.listdir(server_parent) == []


def test_innodb_writes_pages_through_its_doublewrite_at_each_timed_checkpoint(server_parent):
    """InnoDB makes no timed checkpoint of its own: without the harness's, a window
    of these lengths saw no page written and no doublewrite byte."""
    _need("mariadb")
    from bench.servers import mariadb, workload
    m = mariadb.Mariadb(checkpoint_s=1, parent=server_parent)
    try:
        m.start()
        m.load(20_000)
        m.apply({"innodb_doublewrite": "ON"})
        with m.checkpoints():
            r = workload.run_updates(m.connect, 20_000, 2, 0.5, 3, m.counters, m.counters)
        f = m.figures(r["before"], r["after"])
    finally:
        m.stop()
    assert r["ops"] > 0
    assert f["data_page_bytes"] > 0
    assert f["protection_bytes"] > 0
