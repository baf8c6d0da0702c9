"""Run a child process until it is ready, SIGKILL it at a random moment, keep what it said.

The kill -9 loops (RocksDB blackbox style) share this: a child script writes and
prints a line per acknowledged operation after a first `READY` line; the parent
kills it somewhere in [lo, hi) seconds after READY and checks the store against
the lines it got. Lines are the child's protocol; this only collects them.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SILENCE = 30.0     # seconds without output before the child counts as hung


def output_until_killed(script: str, args, rng, lo: float, hi: float, min_lines: int = 0) -> bytes:
    """Everything the child `python script *args` printed until SIGKILLed,
    rng.uniform(lo, hi) seconds after its READY line, and not before it has
    printed `min_lines` whole lines after READY (how much fits in the delay
    alone depends on how busy the machine is). AssertionError if it goes
    silent for SILENCE seconds or exits on its own first. The last line may
    be cut by the kill."""
    child = subprocess.Popen([sys.executable, script, *map(str, args)], stdout=subprocess.PIPE, cwd=ROOT)
    buf, deadline = b"", None
    try:
        while True:
            r, _, _ = select.select([child.stdout], [], [], SILENCE)
            assert r, f"child produced nothing for {SILENCE:.0f} s"
            chunk = os.read(child.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"child exited early with {child.wait()}")
            buf += chunk
            if deadline is None and b"READY\n" in buf:
                deadline = time.monotonic() + rng.uniform(lo, hi)
            if (deadline is not None and time.monotonic() >= deadline
                    and buf.count(b"\n", buf.index(b"READY\n") + 6) >= min_lines):
                os.kill(child.pid, signal.SIGKILL)
                break
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    return buf + child.stdout.read()
