"""kill -9 loop (RocksDB blackbox style): a child writes with several threads
and acknowledges each operation over a pipe; the parent SIGKILLs it at a
random moment, reopens, and checks that every acknowledged operation is there
with its exact value, that in-flight operations are all-or-nothing, and that
nothing never attempted appears.

`make test` runs 100 rounds (50 per mode); `make torture` runs 2,000.
"""

import os
import random
import sys
import time
import warnings

import pytest

import pagestore
from pagestore.verify import verify as verify_store
from pagestore.wal import WalRecoveryWarning

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kill9_child import value_for  # noqa: E402

from tests.support.kill9 import output_until_killed  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TORTURE = os.environ.get("PAGESTORE_TORTURE") == "1"


def run_round(path, mode, rnd, rng):
    acked, inflight = set(), {}
    # 8 lines after READY: with at most 3 operations in flight (3 threads), at
    # least 2 of them were acknowledged, so every round checks something
    buf = output_until_killed(os.path.join(HERE, "kill9_child.py"), (path, mode, rnd, 3), rng, 0.02, 0.4,
                              min_lines=8)
    for line in buf.decode().splitlines():
        parts = line.split()
        if not parts or parts[0] == "READY":
            continue
        keys = tuple(parts[1:-1]) if parts[-1] == "?" else tuple(parts[1:])
        if parts[-1] == "?":
            inflight[keys] = True
        else:
            acked.add(keys)
            inflight.pop(keys, None)
    return acked, set(inflight)


def check(path, rnd, acked, inflight, totals, verify=True):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        db = pagestore.open(path, memory_size=16 << 20, wal_segment_size=4 << 20)
    # A kill leaves at most the unfinished tail of records nobody was told were
    # written: that is the end of the log, never WAL damage.
    damage = [str(w.message) for w in caught if issubclass(w.category, WalRecoveryWarning)]
    totals["damage_warnings"] += len(damage)
    totals["tail_bytes"] += db.recovery["wal_tail_bytes"]
    totals["torn_rounds"] += db.recovery["wal_tail_bytes"] > 0
    with db:
        assert not damage, f"round {rnd}: {damage}"
        for group in acked:
            for k in group:
                assert db.get(k.encode()) == value_for(k.encode()), f"lost or wrong: {k}"
        for group in inflight:
            present = [db.get(k.encode()) for k in group]
            assert all(p is None for p in present) or all(
                p == value_for(k.encode()) for p, k in zip(present, group)), \
                f"in-flight operation half applied: {group}"
            if present[0] is not None:
                totals["inflight_present"] += len(group)
        # nothing that was never attempted: this round's keys are acked or in flight
        attempted = {k for g in acked | inflight for k in g}
        for k, _ in db.scan(prefix=b"r%d-" % rnd):
            assert k.decode() in attempted, f"key never attempted: {k}"
        totals["acked"] += sum(len(g) for g in acked)
        if verify:
            db.verify()


def wal_faults_after_kill(path):
    """`python -m pagestore verify`'s WAL faults on the killed store, before it is reopened."""
    return [f for f in verify_store(path)["faults"] if f["check"] == "wal"]


@pytest.mark.parametrize("mode", ["log_only", "fsync"])
def test_kill9_loses_no_acknowledged_operation(tmp_path, mode):
    rounds = 50
    rng = random.Random(hash(mode) & 0xFFFF)
    path = str(tmp_path / "s")
    totals = {"acked": 0, "inflight_present": 0, "damage_warnings": 0, "tail_bytes": 0, "torn_rounds": 0}
    for rnd in range(rounds):
        acked, inflight = run_round(path, mode, rnd, rng)
        if rnd % 5 == 4:
            assert wal_faults_after_kill(path) == []
        check(path, rnd, acked, inflight, totals)
    assert totals["acked"] > rounds  # the loop really wrote something
    assert totals["damage_warnings"] == 0
    print(f"\nkill -9 {mode}: {rounds} rounds, {totals['acked']} acknowledged ops, 0 lost, "
          f"0 damage warnings; {totals['torn_rounds']} torn tails cut ({totals['tail_bytes']} bytes)")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["log_only", "fsync"])
def test_kill9_torture(tmp_path, mode):
    rounds = 1000
    rng = random.Random(99 + len(mode))
    path = str(tmp_path / "s")
    totals = {"acked": 0, "inflight_present": 0, "damage_warnings": 0, "tail_bytes": 0, "torn_rounds": 0}
    t0 = time.time()
    for rnd in range(rounds):
        acked, inflight = run_round(path, mode, rnd, rng)
        if rnd % 25 == 24:
            assert wal_faults_after_kill(path) == []
        # The store grows every round; the full tree walk runs every 25th.
        check(path, rnd, acked, inflight, totals, verify=rnd % 25 == 24)
    assert totals["damage_warnings"] == 0
    print(f"\nkill -9 torture {mode}: {rounds} rounds, {totals['acked']} acknowledged ops, "
          f"0 lost, 0 wrong, 0 damage warnings; {totals['torn_rounds']} torn tails cut "
          f"({totals['tail_bytes']} bytes), {time.time() - t0:.0f} s")
