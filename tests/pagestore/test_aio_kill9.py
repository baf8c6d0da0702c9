"""kill -9 loop for asyncio writers: every put whose await returned is in the
store after a SIGKILL at a random moment, in fsync mode, with sync=True in
log_only mode, and without it in log_only mode on O_DIRECT segments (where a
record reaches the OS only when the log publishes it)."""

import os
import random
import sys

import pytest

import pagestore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aio_kill9_child import value_for  # noqa: E402

from tests.support.kill9 import output_until_killed  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS = 200 if os.environ.get("PAGESTORE_TORTURE") == "1" else 6


def run_round(path, mode, sync, direct, rnd, rng) -> list:
    buf = output_until_killed(os.path.join(HERE, "aio_kill9_child.py"),
                              (path, mode, rnd, 32, 1 if sync else 0, 1 if direct else 0), rng, 0.05, 0.4)
    lines = buf.split(b"\n")[:-1]                 # the last may be cut by the kill
    return [k for k in lines if k != b"READY"]


@pytest.mark.parametrize("mode, sync, direct", [("fsync", False, False), ("log_only", True, False),
                                                ("log_only", False, True)])
def test_kill9_loses_no_acknowledged_async_put(tmp_path, mode, sync, direct):
    rng = random.Random(hash((mode, sync, direct)) & 0xFFFF)
    path = str(tmp_path / "store")
    total = 0
    for rnd in range(ROUNDS):
        acked = run_round(path, mode, sync, direct, rnd, rng)
        total += len(acked)
        with pagestore.open(path, memory_size=16 << 20, wal_segment_size=4 << 20) as db:
            lost = [k for k in acked if db.get(k) != value_for(k)]
        assert not lost, f"round {rnd}: {len(lost)} of {len(acked)} acknowledged puts lost"
    assert total > 0
