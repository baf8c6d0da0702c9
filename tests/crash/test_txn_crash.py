"""Concurrent transactions killed with SIGKILL stay all-or-nothing and serializable.

A child runs bank transfers in four threads of transactions (each moves an
amount between two accounts and writes a ledger entry naming it); the parent
kills it at a random moment, several rounds on one store, and after each
reopen checks:
  * every acknowledged transfer's ledger entry is there (log_only survives a
    process crash);
  * each account's balance equals its start plus the ledger entries that
    name it: a transfer is there whole or not at all, and none was lost to a
    concurrent one (a lost update breaks the equation even without a crash);
  * the accounts still sum to the total and none is negative.
"""

import os
import random
import select
import signal
import subprocess
import sys
import time

import pagestore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from txn_crash_child import ACCOUNTS, START  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# Each round runs at least this many acknowledged transfers before its kill:
# how many fit in the random delay alone depends on how busy the machine is.
MIN_ACKED = 30


def kill_round(path, seed, rng):
    child = subprocess.Popen([sys.executable, os.path.join(HERE, "txn_crash_child.py"), path,
                              str(seed)], stdout=subprocess.PIPE, cwd=ROOT)
    buf, deadline = b"", None
    try:
        while True:
            r, _, _ = select.select([child.stdout], [], [], 30)
            assert r, "child produced nothing for 30 s"
            chunk = os.read(child.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"child exited early with {child.wait()}")
            buf += chunk
            if deadline is None and b"READY\n" in buf:
                deadline = time.monotonic() + rng.uniform(0.1, 0.6)
            if deadline is not None and time.monotonic() >= deadline and buf.count(b"\nA ") >= MIN_ACKED:
                os.kill(child.pid, signal.SIGKILL)
                break
    finally:
        child.wait()
    buf += child.stdout.read()
    return {line.split()[1] for line in buf.decode().splitlines() if line.startswith("A ")}


def check_books(path, acked):
    with pagestore.open(path, memory_size=16 << 20, wal_segment_size=4 << 20) as db:
        db.verify()
        ledger = dict(db.scan(prefix=b"ledger/"))
        lost = [k for k in acked if k.encode() not in ledger]
        assert not lost, f"{len(lost)} acknowledged transfers lost, e.g. {lost[0]}"
        expect = {a: START for a in ACCOUNTS}
        for entry in ledger.values():
            src, dst, amount = entry.split()
            expect[src] -= int(amount)
            expect[dst] += int(amount)
        balances = {a: int(db[a]) for a in ACCOUNTS}
        wrong = {a.decode(): (balances[a], expect[a]) for a in ACCOUNTS if balances[a] != expect[a]}
        assert not wrong, f"balances (store, ledger) disagree after {len(ledger)} transfers: {wrong}"
        assert sum(balances.values()) == START * len(ACCOUNTS)
        assert min(balances.values()) >= 0
        return len(ledger)


def test_killed_concurrent_transactions_are_all_or_nothing(tmp_path):
    path = str(tmp_path / "bank")
    rng = random.Random(3)
    transfers = 0
    for seed in range(1, 6):
        acked = kill_round(path, seed, rng)
        transfers = check_books(path, acked)
    assert transfers > 100, f"only {transfers} transfers ran: the test saw too little"
