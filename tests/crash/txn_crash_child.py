"""Child of the transaction crash test: bank transfers in concurrent transactions.

argv: store_dir seed
Opens the store (log_only, frequent checkpoints), creates the accounts if
the store is new, prints READY, then runs 4 threads of transfers, each a
transaction that reads two balances, moves an amount if the source has it,
and writes a ledger entry (from, to, amount) beside them. A transfer is
announced on stdout before its commit ("T key ?") and acknowledged after
("A key"); conflicts are retried. Runs until killed.
"""

import os
import random
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import pagestore  # noqa: E402

ACCOUNTS = [b"acct/%02d" % i for i in range(16)]
START = 1000


def main():
    path, seed = sys.argv[1], int(sys.argv[2])
    db = pagestore.open(path, wal_mode="log_only", memory_size=16 << 20, wal_segment_size=4 << 20,
                        checkpoint_interval=0.1)
    if db.get(ACCOUNTS[0]) is None:
        db.put_many((a, b"%d" % START) for a in ACCOUNTS)
    out, lock = sys.stdout.fileno(), threading.Lock()

    def say(line):
        with lock:
            os.write(out, (line + "\n").encode())

    def worker(t):
        rng = random.Random(seed * 10 + t)
        n = 0
        while True:
            n += 1
            entry = b"ledger/%d-%d-%d" % (seed, t, n)
            a, b = rng.sample(ACCOUNTS, 2)
            amount = rng.randint(1, 200)
            while True:
                try:
                    with db.transaction() as txn:
                        va, vb = int(txn[a]), int(txn[b])
                        moved = amount if va >= amount else 0
                        txn[a], txn[b] = b"%d" % (va - moved), b"%d" % (vb + moved)
                        txn[entry] = b"%s %s %d" % (a, b, moved)
                        say(f"T {entry.decode()} ?")
                    break
                except pagestore.ConflictError:
                    continue
            say(f"A {entry.decode()}")

    for t in range(4):
        threading.Thread(target=worker, args=(t,), daemon=True).start()
    say("READY")
    threading.Event().wait()


if __name__ == "__main__":
    main()
