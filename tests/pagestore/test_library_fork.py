"""A forked child drops the store's lock: once the parent closes the store, it
(or anyone) can open it again while children forked during its life still run.

An flock belongs to the open file description, which fork shares, so a child
that kept its copy of the LOCK descriptor kept the store locked until it
exited (a multiprocessing pool made the store unopenable for its lifetime)."""

import subprocess
import sys
import textwrap

_FORK_THEN_REOPEN = """
import os, sys, time
import pagestore
path = sys.argv[1]
db = pagestore.open(path)
db[b"k"] = b"v"
parent = os.getpid()
child = os.fork()
if child == 0:
    # alive while the parent reopens, however long that takes on a loaded
    # machine; the parent kills it (or, should the parent die, it goes too)
    while os.getppid() == parent:
        time.sleep(0.05)
    os._exit(0)
db.close()
try:
    again = pagestore.open(path)
except pagestore.StoreLockedError as e:
    print("locked:", e, flush=True)
else:
    print("reopened", again[b"k"].decode(), "child alive", os.waitpid(child, os.WNOHANG) == (0, 0), flush=True)
    again.close()
os.kill(child, 9)
os.waitpid(child, 0)
"""

_POOL_THEN_REOPEN = """
import multiprocessing, sys
import pagestore

def work(x):
    return x * 2

if __name__ == "__main__":
    path = sys.argv[1]
    db = pagestore.open(path)
    db[b"k"] = b"v"
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.map(work, range(4)) == [0, 2, 4, 6]
        db.close()
        try:
            again = pagestore.open(path)
        except pagestore.StoreLockedError as e:
            print("locked:", e, flush=True)
        else:
            print("reopened", again[b"k"].decode(), flush=True)
            again.close()
"""


def _run(script, tmp_path):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(script), str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


def test_the_parent_reopens_after_close_while_a_forked_child_lives(tmp_path):
    assert _run(_FORK_THEN_REOPEN, tmp_path) == "reopened v child alive True"


def test_a_fork_pool_started_while_open_does_not_keep_the_store_locked(tmp_path):
    assert _run(_POOL_THEN_REOPEN, tmp_path) == "reopened v"


def test_the_lock_still_excludes_another_process_while_the_parent_holds_it(tmp_path):
    # The child closing its copy must not release the parent's lock (no LOCK_UN).
    script = """
    import os, sys, time
    import pagestore
    path = sys.argv[1]
    db = pagestore.open(path)
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    import subprocess
    r = subprocess.run([sys.executable, "-c",
                        "import pagestore, sys\\ntry:\\n pagestore.open(sys.argv[1])\\nexcept pagestore.StoreLockedError:\\n print('locked')",
                        path], capture_output=True, text=True)
    print(r.stdout.strip() or r.stderr[-500:])
    db.close()
    """
    assert _run(script, tmp_path) == "locked"


def test_a_child_that_has_not_yet_run_its_fork_hook_does_not_keep_the_store_locked(tmp_path):
    # A hook registered before pagestore's runs first in the child and holds it
    # back, as a child the scheduler runs late would be; the parent closes and
    # reopens meanwhile, while the child still shares the lock's description.
    script = _FORK_THEN_REOPEN.replace(
        "import pagestore\n",
        "os.register_at_fork(after_in_child=lambda: time.sleep(2.0))\nimport pagestore\n", 1)
    assert script != _FORK_THEN_REOPEN
    assert _run(script, tmp_path) == "reopened v child alive True"
