"""Child of test_kill9_torn_tail: acknowledged small puts, then big appends until killed.

argv: store_dir. Prints each small key once its put returned, then READY,
then appends 2 MiB values from two threads, printing "b" after each (their
survival is not checked, only that nothing is called damage).
"""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import pagestore  # noqa: E402


def main():
    path = sys.argv[1]
    db = pagestore.open(path, memory_size=32 << 20, wal_segment_size=16 << 20, checkpoint_interval=3600)
    out = sys.stdout.fileno()
    for i in range(200):
        k = b"k%04d" % i
        db.put(k, k * 10)
        os.write(out, k + b"\n")
    big = os.urandom(2 << 20)

    def appender(t):
        i = 0
        while True:
            db.put(b"big-%d-%d" % (t, i % 4), big)   # four keys: the page file stays small
            os.write(out, b"b\n")                  # the parent's kill clock runs on output
            i += 1

    threads = [threading.Thread(target=appender, args=(t,), daemon=True) for t in range(2)]
    os.write(out, b"READY\n")
    for th in threads:
        th.start()
    for th in threads:
        th.join()


if __name__ == "__main__":
    main()
