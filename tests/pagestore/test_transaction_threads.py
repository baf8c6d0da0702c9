"""Threads sharing one transaction: a put that returned is in the commit, and
one at or after the commit raises ClosedError; never a dropped write or a
failed commit."""

import sys
import threading

import pagestore


def test_a_put_racing_commit_is_committed_or_refused_never_dropped(tmp_path):
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)        # switch threads as often as possible
    db = pagestore.open(tmp_path / "s", memory_size=32 << 20)
    dropped, commit_errors = 0, []
    try:
        for rnd in range(30):
            tx = db.transaction()
            for i in range(20000):      # a long commit: a wide window for the race
                tx.put(b"r%d_%d" % (rnd, i), b"v")
            acked = []

            def committer():
                try:
                    tx.commit()
                except Exception as e:  # noqa: BLE001 - collected for the assertion
                    commit_errors.append(f"{type(e).__name__}: {e}")

            def putter():
                try:
                    for i in range(2000):
                        tx.put(b"s%d_%d" % (rnd, i), b"v")
                        acked.append(b"s%d_%d" % (rnd, i))
                except pagestore.ClosedError:
                    pass

            ts = [threading.Thread(target=putter), threading.Thread(target=committer)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            dropped += sum(db.get(k) is None for k in acked)
    finally:
        sys.setswitchinterval(old)
        db.close()
    assert commit_errors == [] and dropped == 0, (commit_errors[:3], dropped)
