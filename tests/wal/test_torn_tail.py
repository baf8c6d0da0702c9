"""A torn tail is the end of the log, not damage; damage below the written mark still is.

A process killed while the encoder copies a record leaves a prefix of the
byte stream (the tree lock serialises appends, so at most that one record is
unfinished). These tests cut the log of a real store where such a kill can
cut it, inside the last record, and check that reopening warns of nothing,
that `verify` finds no WAL fault, and that the tail's size is reported; then
that damage to records the log proves were written (a block header written
later marks them) is reported by name every time, and that the same tear in
a segment of an older store (unmarked) is still reported as damage.
"""

import os
import random
import shutil
import struct
import sys
import threading
import warnings

import pytest

import pagestore
from pagestore.diskio import SimFS
from pagestore.verify import verify
from pagestore.wal import WalRecoveryWarning
from pagestore.cipher import Cipher
from pagestore.wal.format import (BLOCK, BLOCK_HDR_LEN, PUT, REC_HDR_LEN, TYPE_NAMES, block_mark,
                                  decode_segment_header, physical_end)
from pagestore.wal.record import _gather, record_offset

sys.path.insert(0, os.path.dirname(__file__))
from wal_testkit import SMALL, Harness, kv, open_fresh, unmark  # noqa: E402

S = 1 << 20
# The writers of `_killed_store` dirty about 2,100 pages. 64 MiB of page memory
# (16,384 slots) keeps them under the dirty-page trigger's floor, a quarter of
# page memory (throttling/trigger.py), so no checkpoint begins while they write.
# With 16 MiB the trigger fired or not with the pace of the writers and the
# length of the checkpoint at open (slow fsyncs on a busy disk move it earlier),
# and a CHECKPOINT record among the last PUTs broke the cuts below: a kill
# before such a record leaves no checkpoint, but the copies kept its markers
# and pages.
OPTS = dict(memory_size=64 << 20, wal_segment_size=S, checkpoint_interval=3600)
KEY = b"k" * 32


def _value(key: bytes) -> bytes:
    return key * (1 + len(key) % 3) + bytes([key[-1]]) * (len(key) * 197 % 9000)


def _segments(path):
    """seq -> segment file path of the store at `path`."""
    out = {}
    for name in os.listdir(os.path.join(path, "wal")):
        if name.endswith(".wal"):
            with open(os.path.join(path, "wal", name), "rb") as f:
                h = decode_segment_header(f.read(44))
            if h is not None:
                out[h.seq] = os.path.join(path, "wal", name)
    return out


def _record_spans(buf, base):
    """(offset, length, type) of the records of one segment buffer, from the first to the
    first whose header does not carry its own lsn (sealed records are not opened)."""
    o = record_offset(base, base, S)
    while o is not None and physical_end(o, REC_HDR_LEN) <= S:
        _crc, length, lsn, rtype = struct.unpack("<IIQB", _gather(buf, base, o, REC_HDR_LEN, None))
        if lsn != base + o or length < REC_HDR_LEN:
            return
        yield o, length, rtype
        o = record_offset(base + physical_end(o, length), base, S)


def _killed_store(root, **extra):
    """A store three threads wrote into, dropped as a killed process drops it;
    returns (path, {key: value} acknowledged, last segment file, its records)."""
    path = str(root / "s")
    db = pagestore.open(path, **OPTS, **extra)
    acked, lock = {}, threading.Lock()

    def writer(t):
        rng = random.Random(t)
        for i in range(400):
            k = b"t%d-%04d-" % (t, i) + b"x" * rng.randrange(0, 40)
            v = _value(k)
            db.put(k, v)
            with lock:
                acked[k] = v

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    db._abandon()
    segs = _segments(path)
    last = max(segs)
    with open(segs[last], "rb") as f:
        buf = f.read()
    spans = list(_record_spans(buf, last * S))
    assert len(spans) > 10
    # what a kill mid-append can cut: only the writers' records (see OPTS)
    kinds = {TYPE_NAMES.get(t, t) for _o, _n, t in spans}
    assert kinds <= {"PUT", "END"}, f"a checkpoint began while the threads wrote: {sorted(kinds)}"
    return path, acked, segs[last], spans


def _copy_with_zeros(src, dst, seg_file, lo, hi):
    shutil.copytree(src, dst)
    with open(os.path.join(dst, os.path.relpath(seg_file, src)), "r+b") as f:
        f.seek(lo)
        f.write(bytes(hi - lo))
    return dst


def _reopen(path, **extra):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        db = pagestore.open(path, **OPTS, **extra)
    return db, [str(w.message) for w in caught if issubclass(w.category, WalRecoveryWarning)]


def _cuts(o, length):
    """Where a kill can stop the copy of a record of `length` bytes at offset o (record bytes
    copied before it), including both sides of each block header the record crosses."""
    end = physical_end(o, length)
    cuts = {o + 1, o + 16, o + REC_HDR_LEN, o + length // 2, end - 1}
    for b in range(o - o % BLOCK + BLOCK, end, BLOCK):
        cuts |= {b, b + BLOCK_HDR_LEN // 2, b + BLOCK_HDR_LEN, b + BLOCK_HDR_LEN + 1}
    return sorted(c for c in cuts if o < c < end)


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_a_kill_mid_append_leaves_a_tail_that_reopens_without_warning_and_verifies_clean(tmp_path, encrypted):
    key = bytes(range(32))
    extra = dict(encryption_key=key) if encrypted else {}
    path, acked, seg_file, spans = _killed_store(tmp_path, **extra)
    seq = int(decode_segment_header(open(seg_file, "rb").read(44)).seq)
    at = max(i for i, (_o, n, _t) in enumerate(spans) if n > 2 * BLOCK)   # a record crossing two blocks
    o, length, _t = spans[at]
    unwritten = sum(t == PUT for _o, _n, t in spans[at:])   # the kill came before these were copied
    end_of_log = physical_end(*spans[-1][:2])
    cipher = Cipher.from_option(key) if encrypted else None
    for i, cut in enumerate(_cuts(o, length)):
        copy = _copy_with_zeros(path, str(tmp_path / f"cut{i}"), seg_file, cut, end_of_log)
        rep = verify(copy, cipher=cipher)
        assert [f for f in rep["faults"] if f["check"] == "wal"] == [], (cut - o, rep["faults"])
        db, damage = _reopen(copy, **extra)
        try:
            assert damage == [], (cut - o, damage)
            rec = db.recovery
            assert rec["wal_damage"] == [] and rec["wal_gaps"] == []
            # the record's header, its lsn field included, was copied (a header that
            # starts in a block's last 16 bytes goes on after the next block header)
            if cut >= physical_end(o, 16):
                assert rec["wal_tail_bytes"] >= cut - o
                assert rec["wal_tail_file"].endswith(f".tail-{seq * S + o}")
            assert sum(db.get(k) == v for k, v in acked.items()) == len(acked) - unwritten
        finally:
            db.close()


# -- the Python writer on the simulator: every record the log marks written ---------------
def _marked_log():
    fs = SimFS()
    h = open_fresh(fs)
    written = [(b"key-%04d" % i, bytes([i % 256]) * (i * 131 % 5000)) for i in range(150)]
    for k, v in written:
        h.put(k, v)
    h.wal.close()
    recs = Harness(fs).recover(0)
    assert kv(recs) == written
    paths = {}
    for name in fs.listdir("/db/wal"):
        f = fs.open(f"/db/wal/{name}")
        hdr = decode_segment_header(f.pread(44, 0))
        f.close()
        if hdr is not None:             # not a blank spare slot
            paths[hdr.seq] = f"/db/wal/{name}"
    return fs, recs, paths


def _highest_mark(fs, paths):
    best = 0
    for seq, path in paths.items():
        f = fs.open(path)
        data = f.pread(SMALL, 0)
        f.close()
        for nb in range(BLOCK, SMALL, BLOCK):
            w = block_mark(data, nb)
            if w is not None:
                best = max(best, w)
    return best


def test_a_flipped_byte_in_any_record_the_log_marks_written_is_damage_named_every_time():
    fs, recs, paths = _marked_log()
    snap = fs.snapshot()
    mark = _highest_mark(fs, paths)
    proven = [r for r in recs if r.end_lsn <= mark]
    # only the records the writer began after its last block header are left unproven
    assert len(proven) >= len(recs) - 3
    for r in proven:
        for at in (0, REC_HDR_LEN + 1):       # its crc, and a payload byte
            if (r.lsn + at) % BLOCK < BLOCK_HDR_LEN or at >= len(r.raw):
                continue
            fs2 = snap.clone()
            path, off = paths[r.lsn // SMALL], r.lsn % SMALL
            f = fs2.open(path)
            byte = f.pread(1, off + at)
            f.pwrite(bytes([byte[0] ^ 0x20]), off + at)
            f.close()
            h = Harness(fs2)
            with pytest.warns(WalRecoveryWarning) as caught:
                got = h.recover(0, quiet=False)
            report = h.wal.recovery_report
            assert [x.lsn for x in got] == [x.lsn for x in recs if x.lsn < r.lsn]
            assert report.damage[0]["file"] == path and report.damage[0]["offset"] == off
            assert any(path in str(w.message) and f"offset {off} " in str(w.message) for w in caught)
            assert report.tail_bytes == 0


def test_an_unmarked_log_keeps_the_older_rule_for_damage_and_clean_ends(recwarn):
    fs, recs, paths = _marked_log()
    for path in paths.values():
        unmark(fs, path)
    h = Harness(fs)
    assert [r.lsn for r in h.recover(0, quiet=False)] == [r.lsn for r in recs]
    assert h.wal.recovery_report.clean and not recwarn.list
    victim = recs[100]
    path, off = paths[victim.lsn // SMALL], victim.lsn % SMALL
    f = fs.open(path)
    f.pwrite(b"\xff", off + 20)
    f.close()
    h = Harness(fs)
    with pytest.warns(WalRecoveryWarning, match=f"offset {off} .*crc"):
        h.recover(0, quiet=False)


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "python-sealed"])
def test_a_torn_last_record_of_the_python_writer_is_a_tail_sealed_or_not(recwarn, sealed):
    # A core without libcrypto lays records out and the Wal seals them in Python (pwrite path).
    kw = dict(cipher=Cipher.from_option(bytes(range(32)))) if sealed else {}
    fs = SimFS()
    h = open_fresh(fs, **kw)
    written = [(b"a%03d" % i, b"x" * 300) for i in range(40)]
    for k, v in written:
        h.put(k, v)
    torn_lsn, _ = h.writer.put(b"torn", b"y" * 6000)    # crosses two block boundaries
    h.wal.flush()
    h.wal.close()
    path = next(f"/db/wal/{n}" for n in fs.listdir("/db/wal") if n.endswith("00.wal"))
    f = fs.open(path)
    f.pwrite(bytes(3000), torn_lsn % SMALL + 3100)     # the copy stopped after 3100 bytes
    f.close()
    h2 = Harness(fs, **kw)
    got = h2.recover(0, quiet=False)
    report = h2.wal.recovery_report
    assert kv(got) == written and report.stop_lsn == torn_lsn and report.clean
    assert not [w for w in recwarn.list if issubclass(w.category, WalRecoveryWarning)]
    assert report.tail_bytes >= 3100 and report.tail_file.endswith(f".tail-{torn_lsn}")


@pytest.mark.parametrize("copied", [10, 16, 16 + BLOCK_HDR_LEN])
def test_a_torn_record_whose_header_crosses_a_block_header_is_a_tail_once_its_lsn_is_copied(recwarn, copied):
    # `copied`: file bytes from the record's start. The header's first 10 bytes end
    # a block and the rest follows the next block header, so 16 file bytes hold
    # only part of its lsn field (the kill test's cuts must allow for that).
    fs = SimFS()
    h = open_fresh(fs)
    written = [(b"a%03d" % i, b"x" * 300) for i in range(5)]
    for k, v in written:
        h.put(k, v)
    start = h.writer.end_lsn % SMALL
    target = (start // BLOCK + 2) * BLOCK - 10       # the next record starts 10 bytes before a block ends
    filler = next(n for n in range(REC_HDR_LEN, 3 * BLOCK) if physical_end(start, n) == target)
    written.append((b"f", b"z" * (filler - REC_HDR_LEN - 17)))   # PUT payload: txid, klen, vlen, key, value
    h.put(*written[-1])
    torn_lsn, _ = h.writer.put(b"torn", b"y" * 6000)
    assert torn_lsn % SMALL == target
    h.wal.flush()
    h.wal.close()
    path = next(f"/db/wal/{n}" for n in fs.listdir("/db/wal") if n.endswith("00.wal"))
    f = fs.open(path)
    f.pwrite(bytes(8000), target + copied)
    f.close()
    h2 = Harness(fs)
    got = h2.recover(0, quiet=False)
    report = h2.wal.recovery_report
    assert kv(got) == written and report.stop_lsn == torn_lsn and report.clean
    assert not [w for w in recwarn.list if issubclass(w.category, WalRecoveryWarning)]
    if copied >= physical_end(target, 16) - target:
        assert report.tail_bytes >= copied and report.tail_file.endswith(f".tail-{torn_lsn}")
    else:
        assert report.tail_bytes == 0


def test_the_c_encoders_marks_are_the_end_of_the_last_record_completed_before_each_block():
    from test_c_encoder_matches_format import S as CS, c_written_log, read_back
    bufs, _expect, _ends = c_written_log()
    recs, _report = read_back(bufs)
    ends = sorted(r.end_lsn for r in recs)
    checked = 0
    for seq, buf in bufs.items():
        hdr = decode_segment_header(buf)
        assert hdr.marked and hdr.flags == 0
        for nb in range(BLOCK, CS, BLOCK):
            w = block_mark(buf, nb)
            if w is None:
                continue
            block_lsn = seq * CS + nb
            before = [e for e in ends if e <= block_lsn]
            assert w == (before[-1] if before else BLOCK), (seq, nb)   # BLOCK: where it was attached
            checked += 1
    assert checked > 100
