"""A forked child cannot use the store its parent opened: every call raises
ClosedError and nothing it does reaches the parent's files (the WAL is a
shared mapping: a child's put once landed in the parent's log, and after the
parent crashed its own acknowledged writes were gone). The child may exit
normally without hanging on a lock a parent thread held at the fork."""

import subprocess
import sys
import textwrap

_SCRIPT = """
import os, signal, sys, time
import pagestore
path = sys.argv[1]
pid = os.fork()
if pid == 0:                                   # a "parent" process to crash later
    db = pagestore.open(path, wal_mode="fsync", checkpoint_interval=0.05)
    for i in range(100):
        db.put(b"k%05d" % i, b"v")
    child = os.fork()
    if child == 0:
        time.sleep(0.1)
        errors = []
        for call in (lambda: db.put(b"child", b"c"), lambda: db.get(b"k00001"),
                     lambda: db.put_many([(b"child2", b"c")]), lambda: len(db),
                     lambda: list(db.scan()), db.checkpoint):
            try:
                call()
                errors.append("no error")
            except pagestore.ClosedError as e:
                errors.append("ClosedError" if "forked child" in str(e) else f"ClosedError: {e}")
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
        db.close()                             # no I/O, no hang
        print("child:", sorted(set(errors)), flush=True)
        sys.exit(0)                            # a normal exit: finalizers run
    for i in range(1000):
        db.put(b"parent%05d" % i, b"p" * 40)   # acknowledged (fsync)
    _, status = os.waitpid(child, 0)
    print("child status", status, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)       # the parent crashes
os.waitpid(pid, 0)
db = pagestore.open(path)
print("parent", sum(1 for _ in db.scan(prefix=b"parent")), "child", sum(1 for _ in db.scan(prefix=b"child")))
db.close()
"""


def test_a_forked_child_is_refused_and_the_parents_acknowledged_writes_survive(tmp_path):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_SCRIPT), str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert lines == ["child: ['ClosedError']", "child status 0", "parent 1000 child 0"], r.stdout + r.stderr[-1500:]
