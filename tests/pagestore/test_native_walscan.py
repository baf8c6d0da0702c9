"""The C WAL scanner (`_native.wal_scan`) in replay's fast path accepts exactly
the records the Python reader accepts and stops where it stops.

Every log is read twice: by the reference reader (`committed_records` over
`Wal.recover`) and by replay's path (`committed_raw` with the C scanner sent
in); the committed raw records, the stop LSN, the record count and the
damage / gap reports must be identical, on clean logs with transactions and
rollbacks and on logs damaged by flips and truncations.
"""

import os
import random
import sys
import warnings

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagestore.diskio import SimFS
from pagestore import _native
from pagestore.wal import BLOCK, DELETE, PUT, committed_records
from pagestore.wal.format import FIRST_RECORD, StreamWriter, encode_record, payload_put
from pagestore.wal.reader import RUN, committed_raw

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "wal"))
from wal_testkit import SMALL, Harness, open_fresh  # noqa: E402


def reference(fs):
    h = Harness(fs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        units = list(committed_records(h.wal.recover(0)))
    raw = b"".join(r.raw for u in units for r in u if r.type in (PUT, DELETE))
    return raw, h.wal.recovery_report


def fast(fs):
    h = Harness(fs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chunks = list(committed_raw(h.wal.recover(0), _native.wal_scan))
    raw = b"".join(bytes(c) for c, _ in chunks)
    return raw, sum(n for _, n in chunks), h.wal.recovery_report


def assert_same(fs_factory):
    ref_raw, ref = reference(fs_factory())
    got_raw, count, rep = fast(fs_factory())
    assert got_raw == ref_raw
    assert rep.stop_lsn == ref.stop_lsn and rep.records == ref.records
    assert rep.damage == ref.damage and rep.gaps == ref.gaps
    return count


def write_log(rng, n, h):
    """Random records: plain puts/deletes, transactions committed or rolled back, checkpoints."""
    w = h.writer
    txid = 1000
    for _ in range(n):
        r = rng.random()
        if r < 0.6:
            w.put(rng.randbytes(rng.randint(1, 40)), rng.randbytes(rng.choice((0, 5, 100, 3000, 9000))))
        elif r < 0.7:
            w.delete(rng.randbytes(rng.randint(1, 40)))
        elif r < 0.85:
            txid += 1
            k = rng.randint(1, 4)
            for _ in range(k):
                if rng.random() < 0.8:
                    w.put(rng.randbytes(8), rng.randbytes(rng.randint(0, 300)), txid)
                else:
                    w.delete(rng.randbytes(8), txid)
            w.commit(txid, k) if rng.random() < 0.7 else w.rollback(txid)
        elif r < 0.9:
            # interleaved transactions: t starts, u runs whole, t goes on; and a
            # COMMIT whose nops is not the count of the records just before it
            t, u = txid + 1, txid + 2
            txid += 2
            a, b = rng.randint(1, 3), rng.randint(1, 3)
            for _ in range(a):
                w.put(rng.randbytes(8), rng.randbytes(rng.randint(0, 300)), t)
            for _ in range(b):
                w.put(rng.randbytes(8), rng.randbytes(rng.randint(0, 300)), u)
            w.commit(u, b if rng.random() < 0.7 else b + 1)
            for _ in range(rng.randint(1, 3)):
                w.put(rng.randbytes(8), rng.randbytes(rng.randint(0, 300)), t)
                a += 1
            w.commit(t, a)
        else:
            w.checkpoint(rng.randint(1, 9), rng.randbytes(rng.randint(0, 50)))
    h.wal.commit(w.end_lsn)
    h.wal.close()


def test_scanner_copies_simple_records_without_block_headers():
    buf = bytearray(SMALL)
    w = StreamWriter(SMALL, buf, 0, BLOCK, 0)
    recs = [encode_record(PUT, w.put(b"k%d" % i, bytes(700))[0], payload_put(b"k%d" % i, bytes(700)))
            for i in range(20)]
    n, raw, end = _native.wal_scan(buf, 0, FIRST_RECORD, SMALL)
    assert n == 20 and bytes(raw) == b"".join(recs) and end == w.end_lsn
    # stops before a transaction's record, and before a record that does not fit in cap
    w.put(b"t", b"x", txid=7)
    n2, raw2, end2 = _native.wal_scan(buf, 0, FIRST_RECORD, SMALL, cap=len(recs[0]) * 3 + 5)
    assert n2 == 3 and bytes(raw2) == b"".join(recs[:3])
    assert _native.wal_scan(buf, 0, end, SMALL)[0] == 0


def test_scanner_takes_a_whole_transaction_but_not_a_part_of_one():
    buf = bytearray(SMALL)
    w = StreamWriter(SMALL, buf, 0, BLOCK, 0)
    ops = []
    for i in range(4):
        lsn = w.put(b"t%d" % i, bytes(500), txid=9)[0]
        ops.append(encode_record(PUT, lsn, payload_put(b"t%d" % i, bytes(500), 9)))
    w.commit(9, 4)
    n, raw, end = _native.wal_scan(buf, 0, FIRST_RECORD, SMALL)
    assert n == 5 and bytes(raw) == b"".join(ops) and end == w.end_lsn   # COMMIT consumed, not copied
    # a transaction whose COMMIT counts more operations than lie before it (the
    # first was read by the Python reader) is not taken
    w.put(b"x", b"1", txid=11)
    w.commit(11, 2)
    assert _native.wal_scan(buf, 0, end, SMALL)[0] == 0
    # nor one without its COMMIT yet
    w2 = w.end_lsn
    w.put(b"y", b"2", txid=12)
    assert _native.wal_scan(buf, 0, w2, SMALL)[0] == 0


def test_a_transaction_bigger_than_the_scan_buffer_is_scanned_whole():
    buf = bytearray(SMALL)
    w = StreamWriter(SMALL, buf, 0, BLOCK, 0)
    for i in range(30):
        w.put(b"t%d" % i, bytes(1000), txid=5)
    w.commit(5, 30)
    n, raw, end = _native.wal_scan(buf, 0, FIRST_RECORD, SMALL, cap=8192)
    assert n == 31 and end == w.end_lsn
    assert len(raw) == sum(33 + len(b"t%d" % i) + 1000 for i in range(30))


def test_scanner_rejects_a_wrong_base_and_a_flipped_crc():
    buf = bytearray(SMALL)
    w = StreamWriter(SMALL, buf, 0, BLOCK, 0)
    for i in range(5):
        w.put(b"k%d" % i, b"v")
    assert _native.wal_scan(buf, SMALL, FIRST_RECORD, SMALL)[0] == 0   # block_lsn is not this base
    buf[FIRST_RECORD + 20] ^= 1   # the first record's txid field: crc fails
    assert _native.wal_scan(buf, 0, FIRST_RECORD, SMALL)[0] == 0


def test_clean_random_logs_match_the_reference():
    for seed in range(12):
        fs = SimFS()
        h = open_fresh(fs)
        write_log(random.Random(seed), 300, h)
        snap = fs.snapshot()
        count = assert_same(snap.clone)
        assert count > 0


_BASE = {}


def base():
    if not _BASE:
        fs = SimFS()
        h = open_fresh(fs)
        write_log(random.Random(99), 250, h)
        _BASE["snap"] = fs.snapshot()
        _BASE["paths"] = sorted(f"/db/wal/{n}" for n in fs.listdir("/db/wal") if n != "NEWEST")
    return _BASE


damage = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 99), st.integers(0, SMALL - 1), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 99), st.integers(0, SMALL - 1), st.just(0)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(damage, min_size=1, max_size=3))
def test_damaged_logs_match_the_reference(hits):
    b = base()
    fs = b["snap"].clone()
    paths = b["paths"]
    for kind, i, off, xor in hits:
        path = paths[i % len(paths)]
        f = fs.open(path)
        if kind == "flip":
            if off < f.size():
                f.pwrite(bytes([f.pread(1, off)[0] ^ xor]), off)
        else:
            f.truncate(min(off, f.size()))
        f.fsync()
        f.close()
    snap = fs.snapshot()
    assert_same(snap.clone)


def test_scan_yields_runs_only_to_a_consumer_that_sends_a_scanner():
    fs = SimFS()
    h = open_fresh(fs)
    write_log(random.Random(5), 100, h)
    snap = fs.snapshot()
    plain = Harness(snap.clone()).recover(0)
    assert all(r.type != RUN for r in plain)
    gen = Harness(snap.clone()).wal.recover(0)
    items = [next(gen)]
    try:
        while True:
            items.append(gen.send(_native.wal_scan))
    except StopIteration:
        pass
    assert any(r.type == RUN for r in items)
    assert sum(getattr(r, "count", 1) for r in items) == len(plain)
