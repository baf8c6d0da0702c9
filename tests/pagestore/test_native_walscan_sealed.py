"""The C WAL scanner over record-sealed segments (`_native.wal_scan(..., key=, salt=)`,
ps_wal_scan with a key, in walscan.c).

The authority is the Python reader: `wal.reader.read_record` with the opener of
`wal.recseal.record_opener`. From any offset the scanner must take exactly the
simple records (txid-0 PUT/DELETE, whole adjacent transactions up to a COMMIT
whose nops matches) that reader accepts there, and return the same plaintext
forms (len - 16, crc recomputed) byte for byte; so a record whose tag does not
authenticate stops it. Segments are written by the C encoder (Core.wal_set_key).
"""

import os
import signal
import struct
import subprocess
import sys
import threading
import warnings

import crc32c
import pytest

import pagestore
from pagestore import _native
from pagestore.cipher import Cipher
from pagestore.wal.format import decode_segment_header
from pagestore.wal.reader import read_record, record_offset
from pagestore.wal.recseal import record_opener

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from native_kit import Segments, wal_core  # noqa: E402

pytestmark = pytest.mark.skipif(not _native.wal_seal_available(), reason="no libcrypto")

BLOCK, BHDR, SEG = 4096, 24, 1 << 20
FIRST = BLOCK + BHDR
PUT, DELETE, COMMIT, CHECKPOINT, ROLLBACK = 1, 2, 3, 4, 7
KEY, KID = bytes(range(32)), 9


def new_core(segs, key=KEY):
    return wal_core(segs, key, KID)


def salt_of(buf):
    return bytes(buf[45:53])


def opener_of(buf):
    return record_opener(decode_segment_header(buf), buf, Cipher({KID: KEY}, KID), "seg")


def scan(buf, seq, o, key=KEY, salt=None, **kw):
    return _native.wal_scan(buf, seq * SEG, o, SEG, key=key,
                            salt=salt_of(buf) if salt is None else salt, **kw)


def reader_records(buf, seq, o, opener):
    """The records read_record accepts from offset o on, to the first it refuses or
    the END trailer (type 8: where the writer left the segment)."""
    base, good, out, p = seq * SEG, set(), [], seq * SEG + o
    while (at := record_offset(p, base, SEG)) is not None:
        rec = read_record(buf, base, at, SEG, good, opener)
        if type(rec) is str or rec.type == 8:
            break
        out.append((at, rec))
        p = rec.end_lsn
    return out


def model(buf, seq, o, opener):
    """What the scanner must return from o: (count, raw, end offset) by the simple-record
    rule applied to what read_record (with the opener) accepts."""
    recs = [r for _, r in reader_records(buf, seq, o, opener)]
    base, n, out, end, i = seq * SEG, 0, [], o, 0
    txid_of = lambda r: struct.unpack_from("<Q", r.raw, 17)[0]   # noqa: E731
    while i < len(recs) and recs[i].type in (PUT, DELETE):
        t = txid_of(recs[i])
        if t == 0:
            out.append(recs[i].raw)
            n, end, i = n + 1, recs[i].end_lsn - base, i + 1
            continue
        j = i
        while j < len(recs) and recs[j].type in (PUT, DELETE) and txid_of(recs[j]) == t:
            j += 1
        c = recs[j] if j < len(recs) else None
        if c is None or c.type != COMMIT or txid_of(c) != t or \
                struct.unpack_from("<I", c.raw, 25)[0] != j - i:
            break
        out += [r.raw for r in recs[i:j]]
        n, end, i = n + j - i + 1, c.end_lsn - base, j + 1
    return n, b"".join(out), end


def split(raw):
    """The records of a scanner output."""
    out, o = [], 0
    while o < len(raw):
        n = struct.unpack_from("<I", raw, o + 4)[0]
        out.append(bytes(raw[o:o + n]))
        o += n
    return out


def room(core):
    """(start offset of the next record, its bytes left in that block)."""
    e = core.signals.wal_end_lsn % SEG
    s = e + BHDR if e % BLOCK == 0 else e
    return s, BLOCK - s % BLOCK


def put_len(core, key, stored_len):
    """A put whose sealed stored record is stored_len bytes."""
    core.put(key, b"v" * (stored_len - 33 - len(key) - 16))


def straddle(core, key, cut, stored_len):
    """A put of stored_len bytes with a block boundary after its first `cut` bytes
    (a filler put first puts the writer there)."""
    _, r = room(core)
    f = r - cut
    if f < 80:
        f += BLOCK - BHDR
    put_len(core, key + b"-fill", f)
    assert room(core)[1] == cut
    put_len(core, key, stored_len)


def workload(core, straddles=True):
    """Simple records only: puts, deletes, put_many transactions, and (sealed only: the
    fillers depend on where records fall) records straddling a block boundary at chosen
    places."""
    for i in range(40):
        core.put(b"k%03d" % i, b"v" * (i * 7))
    core.delete(b"k005")
    core.apply_batch(_native.pack_ops([(1, b"b1", b"x" * 100), (2, b"k006", b""),
                                       (1, b"b2", b"y" * 5000)]), txid=77)
    core.put(b"big", bytes(range(256)) * 24)                  # spans blocks
    for cut in (3, 5, 16, 17, 40) if straddles else ():    # header / payload split
        straddle(core, b"h%d" % cut, cut, 300)
    for back in (16, 8, 1) if straddles else ():            # the tag in the next block, or split
        straddle(core, b"t%d" % back, 300 - back, 300)
    for i in range(10):
        core.apply_batch(_native.pack_ops([(1, b"m%d-%d" % (i, j), b"z" * (j * 30))
                                           for j in range(i + 1)]), txid=1000 + i)
        core.delete(b"k%03d" % (10 + i))


def records_of(segs):
    """(seq, offset, Record) of every record read_record accepts, segment by segment."""
    return [(seq, at, r) for seq in sorted(segs.bufs)
            for at, r in reader_records(segs.bufs[seq], seq, FIRST, opener_of(segs.bufs[seq]))]


def refix_crc(buf, at, length):
    """Recompute the crc of the record of `length` stored bytes at `at` (inside one block)."""
    assert at // BLOCK == (at + length - 1) // BLOCK
    struct.pack_into("<I", buf, at, crc32c.crc32c(bytes(buf[at + 4:at + length])))


# ---- agreement with the reader ----------------------------------------------------------

def test_scanner_takes_what_the_reader_with_the_opener_accepts():
    segs = Segments()
    workload(new_core(segs))
    buf = segs.bufs[0]
    got = scan(buf, 0, FIRST)
    want = model(buf, 0, FIRST, opener_of(buf))
    recs = reader_records(buf, 0, FIRST, opener_of(buf))
    assert got == want and got[0] == len(recs) > 60           # the whole log in one run
    assert got[2] == recs[-1][1].end_lsn
    # it is plaintext, not the stored bytes, and every crc is the plaintext form's
    for r in split(got[1]):
        assert struct.unpack_from("<I", r)[0] == crc32c.crc32c(r[4:])
    assert b"v" * 273 in got[1] and b"y" * 5000 in got[1]
    # records straddling a block boundary at every interesting place were taken
    firsts = {BLOCK - at % BLOCK for at, r in recs if at // BLOCK != (r.end_lsn - 1) // BLOCK}
    assert {3, 5, 16, 17, 40, 284, 292, 299} <= firsts


def test_from_every_record_offset_it_agrees_with_the_reader():
    """Mixed log (checkpoints, rollbacks, a transaction broken by another): from every
    record's offset the scanner returns what the model of the reader says."""
    segs = Segments()
    core = new_core(segs)
    workload(core)
    core.log_record(CHECKPOINT, struct.pack("<Q", 5) + b"opaque")
    core.put(b"after-ckpt", b"1")
    core.log_record(ROLLBACK, struct.pack("<Q", 4242))
    ops = _native.pack_ops([(1, b"tx%d" % j, b"q" * 50) for j in range(3)])
    core.apply_batch(ops, txid=500)
    core.put(b"plain", b"2")
    for i in range(260):                                        # rolls over to segment 1
        core.put(b"r%04d" % i, bytes([i % 251]) * 4000)
    assert len(segs.bufs) >= 2
    taken = 0
    for seq, buf in segs.bufs.items():
        op = opener_of(buf)
        for at, _ in [(FIRST, None)] + reader_records(buf, seq, FIRST, op):
            got = scan(buf, seq, at)
            assert got == model(buf, seq, at, op), (seq, at)
            taken += got[0] > 0
    assert taken > 300


def test_sealed_output_equals_the_plain_scan_record_for_record():
    plain, sealed = Segments(), Segments()
    workload(new_core(plain, key=None), straddles=False)
    workload(new_core(sealed), straddles=False)
    p = _native.wal_scan(plain.bufs[0], 0, FIRST, SEG)
    s = scan(sealed.bufs[0], 0, FIRST)
    pr, sr = split(p[1]), split(s[1])
    assert p[0] == s[0] > 60 and len(pr) == len(sr) > 60
    lsns = [r.lsn for _, r in reader_records(sealed.bufs[0], 0, FIRST, opener_of(sealed.bufs[0]))
            if r.type != COMMIT]
    for a, b, lsn in zip(pr, sr, lsns):
        assert len(a) == len(b) and a[16] == b[16] and a[17:] == b[17:]
        assert struct.unpack_from("<Q", b, 8)[0] == lsn
    # no key: the sealed segment's records do not have the plain shape (tag in the way)
    assert _native.wal_scan(sealed.bufs[0], 0, FIRST, SEG)[0] == 0


# ---- tampering ----------------------------------------------------------------------------

def one_block_records(buf, seq=0):
    return [(at, r) for at, r in reader_records(buf, seq, FIRST, opener_of(buf))
            if at // BLOCK == (r.end_lsn - 1) // BLOCK]


@pytest.mark.parametrize("where", ["value", "key", "tag", "type", "crc only"])
def test_a_record_that_does_not_authenticate_stops_the_scan_before_it(where):
    segs = Segments()
    workload(new_core(segs))
    buf = segs.bufs[0]
    recs = reader_records(buf, 0, FIRST, opener_of(buf))
    k = 12
    at, rec = recs[k]
    stored = rec.end_lsn - at
    assert at // BLOCK == (rec.end_lsn - 1) // BLOCK and rec.type == PUT
    # the type is in the AAD: with the crc fixed only the tag can refuse it
    # GCM is CTR mode: a ciphertext flip flips the same plaintext bit, so these keep the
    # plaintext's shape (a value byte, a key byte) and only the tag can refuse them
    flip = {"value": at + stored - 17, "key": at + 33, "tag": at + stored - 3, "type": at + 16,
            "crc only": at + 1}[where]
    buf[flip] ^= 0x03 if where == "type" else 0x40
    if where != "crc only":                   # the crc is over the stored bytes: it still holds
        refix_crc(buf, at, stored)
    assert type(read_record(buf, 0, at, SEG, set(), opener_of(buf))) is str
    n, raw, end = scan(buf, 0, FIRST)
    assert n == k and end == at and (n, raw, end) == model(buf, 0, FIRST, opener_of(buf))
    assert scan(buf, 0, at)[0] == 0
    assert scan(buf, 0, recs[k + 1][0]) == model(buf, 0, recs[k + 1][0], opener_of(buf))
    assert scan(buf, 0, recs[k + 1][0])[0] > 0


@pytest.mark.parametrize("length", [17, 20, 32])
def test_a_record_too_short_to_hold_a_tag_is_not_taken(length):
    """crc and lsn hold, but len < 17 + 16: no room for ciphertext and tag."""
    segs = Segments()
    core = new_core(segs)
    for i in range(5):
        core.put(b"s%d" % i, b"v" * 10)
    buf = segs.bufs[0]
    at = core.signals.wal_end_lsn
    rec = bytearray(struct.pack("<IIQB", 0, length, at, PUT) + bytes(length - 17))
    struct.pack_into("<I", rec, 0, crc32c.crc32c(bytes(rec[4:])))
    buf[at:at + length] = rec
    assert type(read_record(buf, 0, at, SEG, set(), opener_of(buf))) is str
    assert scan(buf, 0, FIRST) == model(buf, 0, FIRST, opener_of(buf))
    assert scan(buf, 0, FIRST)[0] == 5 and scan(buf, 0, at) == (0, b"", at)


def test_a_wrong_key_or_salt_takes_nothing():
    segs = Segments()
    workload(new_core(segs))
    buf = segs.bufs[0]
    salt = salt_of(buf)
    assert scan(buf, 0, FIRST)[0] > 60
    assert scan(buf, 0, FIRST, key=bytes(32)) == (0, b"", FIRST)
    assert scan(buf, 0, FIRST, salt=bytes([salt[0] ^ 1]) + salt[1:]) == (0, b"", FIRST)
    with pytest.raises(ValueError):
        scan(buf, 0, FIRST, salt=salt[:7])
    with pytest.raises(ValueError):
        _native.wal_scan(buf, 0, FIRST, SEG, key=KEY)


@pytest.mark.parametrize("victim", ["commit", "middle op"])
def test_a_transaction_with_a_record_that_does_not_authenticate_is_not_taken(victim):
    segs = Segments()
    core = new_core(segs)
    for i in range(4):
        core.put(b"p%d" % i, b"v" * 20)
    core.apply_batch(_native.pack_ops([(1, b"t%d" % j, b"w" * 40) for j in range(3)]), txid=31)
    core.put(b"after", b"1")
    buf = segs.bufs[0]
    recs = reader_records(buf, 0, FIRST, opener_of(buf))
    assert [r.type for _, r in recs] == [PUT] * 4 + [PUT] * 3 + [COMMIT, PUT]
    assert scan(buf, 0, FIRST)[0] == 9
    at, rec = recs[7 if victim == "commit" else 5]
    # the commit's tag (its txid and nops must stay right), the op's last value byte
    buf[rec.end_lsn - (3 if victim == "commit" else 17)] ^= 0x01
    refix_crc(buf, at, rec.end_lsn - at)
    n, raw, end = scan(buf, 0, FIRST)
    assert (n, end) == (4, recs[4][0]) and raw == b"".join(r.raw for _, r in recs[:4])
    assert (n, raw, end) == model(buf, 0, FIRST, opener_of(buf))
    assert scan(buf, 0, recs[4][0])[0] == 0


# ---- cap --------------------------------------------------------------------------------

def test_cap_counts_the_plaintext_size():
    segs = Segments()
    core = new_core(segs)
    for i in range(10):
        core.put(b"c%d" % i, b"v" * 100)
    buf = segs.bufs[0]
    recs = reader_records(buf, 0, FIRST, opener_of(buf))
    plain = sum(len(r.raw) for _, r in recs)
    assert plain + 16 * 10 == recs[-1][1].end_lsn - FIRST
    assert scan(buf, 0, FIRST, cap=plain)[0] == 10
    n, raw, end = scan(buf, 0, FIRST, cap=plain - 1)
    assert n == 9 and len(raw) == plain - len(recs[-1][1].raw) and end == recs[-1][0]


def test_a_transaction_bigger_than_the_scan_buffer_is_scanned_whole():
    segs = Segments()
    core = new_core(segs)
    core.apply_batch(_native.pack_ops([(1, b"t%d" % i, bytes(1000)) for i in range(30)]), txid=5)
    buf = segs.bufs[0]
    n, raw, end = scan(buf, 0, FIRST, cap=8192)
    assert n == 31 and (n, raw, end) == model(buf, 0, FIRST, opener_of(buf))
    assert len(raw) == sum(33 + len(b"t%d" % i) + 1000 for i in range(30))


# ---- threads, and replay ------------------------------------------------------------------

def test_concurrent_scans_share_nothing():
    segs = Segments()
    workload(new_core(segs))
    buf = segs.bufs[0]
    want = scan(buf, 0, FIRST)
    errors = []

    def run(key):
        try:
            for _ in range(30):
                got = scan(buf, 0, FIRST, key=key)
                assert got == (want if key == KEY else (0, b"", FIRST))
        except AssertionError as e:                     # pragma: no cover
            errors.append(e)

    ts = [threading.Thread(target=run, args=(KEY if i % 2 else bytes(32),)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_replay_of_an_encrypted_store_reads_in_bulk(tmp_path, monkeypatch):
    opts = dict(memory_size=8 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)
    path = tmp_path / "s"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = (f"import os, signal, sys\nsys.path.insert(0, {root!r})\nimport pagestore\n"
            f"db = pagestore.open({str(path)!r}, encryption_key={KEY!r}, **{opts!r})\n"
            "for i in range(3000):\n    db.put(b'key-%05d' % i, b'value-%05d' % i)\n"
            "db.put_many([(b'tx-%d' % i, b't' * i) for i in range(20)])\n"
            "db.delete(b'key-00007')\nos.kill(os.getpid(), signal.SIGKILL)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr.decode()[-2000:]
    bulk = {"sealed": 0}
    real = _native.WalScanner.__call__

    def spy(self, *a, **kw):
        out = real(*a, **kw)
        if kw.get("key") is not None:
            bulk["sealed"] += out[0]
        return out
    # on the class: whoever holds the process's scanner object calls the spy
    monkeypatch.setattr(_native.WalScanner, "__call__", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pagestore.open(path, encryption_key=KEY, **opts) as db2:
            assert db2.get(b"key-02999") == b"value-02999" and db2.get(b"key-00007") is None
            assert db2.get(b"tx-19") == b"t" * 19
    assert bulk["sealed"] > 3000
