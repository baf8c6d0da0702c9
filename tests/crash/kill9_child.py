"""Child of the kill -9 loop: writes with several threads, acknowledging each
operation on stdout only after the store returned from it.

argv: store_dir wal_mode round threads
Each thread t writes keys r<round>-t<t>-<i>; every 7th operation is a
transaction of three keys (acknowledged as one line naming all three).
"""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import pagestore  # noqa: E402


def value_for(key: bytes) -> bytes:
    return key * (1 + len(key) % 5) + b"|" + bytes(range(len(key) % 200))


def main():
    path, mode, rnd, nthreads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    db = pagestore.open(path, wal_mode=mode, memory_size=16 << 20, wal_segment_size=4 << 20,
                        checkpoint_interval=0.2)
    out = sys.stdout.fileno()
    lock = threading.Lock()

    def ack(line: str):
        with lock:
            os.write(out, (line + "\n").encode())

    def worker(t):
        i = 0
        while True:
            if i % 7 == 6:
                ks = [b"r%d-t%d-%d" % (rnd, t, i + j) for j in range(3)]
                ack("T " + " ".join(k.decode() for k in ks) + " ?")  # in flight
                with db.transaction() as tx:
                    for k in ks:
                        tx.put(k, value_for(k))
                ack("T " + " ".join(k.decode() for k in ks))
                i += 3
            else:
                k = b"r%d-t%d-%d" % (rnd, t, i)
                ack("P " + k.decode() + " ?")
                db.put(k, value_for(k))
                ack("P " + k.decode())
                i += 1

    ack("READY")
    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(nthreads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


if __name__ == "__main__":
    main()
