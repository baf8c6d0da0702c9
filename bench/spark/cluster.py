"""A Spark standalone cluster on loopback from the jars pyspark ships: one master, N workers.

``python -m bench.spark.cluster start --dir D`` starts the master and the
workers (each a JVM: ``org.apache.spark.deploy.master.Master`` /
``...worker.Worker`` on 127.0.0.1, free ports), waits until every worker has
registered, writes their PIDs to ``D/pids`` and prints the master URL
(``spark://127.0.0.1:PORT``). ``stop --dir D`` ends exactly those PIDs (TERM,
then KILL after a grace period). ``make bench-cluster`` runs start, the three
verbs against the URL, and stop from a shell ``trap``, so the JVMs go whatever
happens. Logs: ``D/master.log``, ``D/worker-<i>.log``. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import glob
import os
import signal
import socket
import subprocess
import sys
import time

from .session import find_java_home, prepare_environment


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> str:
    """pyspark's own directory: its ``jars/`` are the Spark the workers launch executors from."""
    import pyspark
    return os.path.dirname(pyspark.__file__)


def scala_version() -> str:
    """The Scala binary version of pyspark's jars (``2.13`` from ``spark-core_2.13-*.jar``)."""
    found = glob.glob(os.path.join(spark_home(), "jars", "spark-core_*.jar"))
    if not found:
        raise RuntimeError(f"no spark-core jar under {spark_home()}/jars: is pyspark installed?")
    return os.path.basename(found[0]).split("_", 1)[1].split("-", 1)[0]


def _classpath() -> str:
    jars = os.path.join(spark_home(), "jars")
    if not glob.glob(os.path.join(jars, "*.jar")):
        raise RuntimeError(f"no Spark jars under {jars}: is pyspark installed?")
    return os.path.join(jars, "*")


def _java(main: str, args: list, log: str) -> subprocess.Popen:
    java = os.path.join(find_java_home(), "bin", "java")
    cmd = [java, "-Xmx512m", "-XX:TieredStopAtLevel=1", "-cp", _classpath(), main] + args
    with open(log, "ab") as out:
        # its own process group: stop() ends the JVM and nothing else
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def _wait_for(path: str, text: str, count: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            if f.read().count(text) >= count:
                return
        if proc.poll() is not None:
            raise RuntimeError(f"{os.path.basename(path)}: the JVM exited with {proc.returncode}")
        time.sleep(0.3)
    raise RuntimeError(f"{path}: no {text!r} within {timeout:.0f} s")


def start(work: str, workers: int = 2, cores: int = 1, memory: str = "1g", timeout: float = 120) -> str:
    """Start the master and ``workers`` workers; PIDs go to ``work/pids``; returns the master URL."""
    os.makedirs(work, exist_ok=True)
    url = f"spark://127.0.0.1:{free_port()}"
    prepare_environment(url)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    # a worker builds its executors' command from these; pyspark has no RELEASE file to read
    # the Scala version from, so it is taken from the jars' names
    os.environ["SPARK_HOME"] = spark_home()
    os.environ["SPARK_SCALA_VERSION"] = scala_version()
    pids = os.path.join(work, "pids")
    procs = []
    try:
        mlog = os.path.join(work, "master.log")
        master = _java("org.apache.spark.deploy.master.Master",
                       ["--host", "127.0.0.1", "--port", url.rsplit(":", 1)[1], "--webui-port", str(free_port())],
                       mlog)
        procs.append(master)
        _record(pids, master.pid)
        _wait_for(mlog, "I have been elected leader", 1, master, timeout)
        for i in range(workers):
            wdir = os.path.join(work, f"worker-{i}")
            os.makedirs(wdir, exist_ok=True)
            w = _java("org.apache.spark.deploy.worker.Worker",
                      [url, "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                       "--webui-port", str(free_port()), "--work-dir", wdir],
                      os.path.join(work, f"worker-{i}.log"))
            procs.append(w)
            _record(pids, w.pid)
        _wait_for(mlog, "Registering worker", workers, master, timeout)
    except BaseException:
        stop(work)
        raise
    with open(os.path.join(work, "master.url"), "w") as f:
        f.write(url + "\n")
    return url


def _record(path: str, pid: int) -> None:
    with open(path, "a") as f:
        f.write(f"{pid}\n")


def stop(work: str, grace: float = 10.0) -> list:
    """End every JVM listed in ``work/pids`` (TERM, then KILL); returns the PIDs that were running."""
    path = os.path.join(work, "pids")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        pids = [int(x) for x in f.read().split()]
    alive = [p for p in pids if _signal(p, signal.SIGTERM)]
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_running(p) for p in alive):
        time.sleep(0.2)
    for p in alive:
        if _running(p):
            _signal(p, signal.SIGKILL)
    os.remove(path)
    return alive


def _signal(pid: int, sig) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def _running(pid: int) -> bool:
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)   # our child: reap it
        if done == pid:
            return False
    except ChildProcessError:
        pass                                          # started by another process (the Makefile)
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def main(argv=None) -> int:
    """``start --dir D [--workers N]`` prints the master URL; ``stop --dir D``."""
    ap = argparse.ArgumentParser(prog="python -m bench.spark.cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("start", "stop"))
    ap.add_argument("--dir", required=True, help="working directory: PIDs, logs, worker dirs")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    if a.action == "start":
        print(start(a.dir, a.workers))
    else:
        print(f"stopped {len(stop(a.dir))} JVMs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
