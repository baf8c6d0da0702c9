"""The END trailer: the log's last acknowledged record is provable, so damage to it is reported.

After every record the writer writes an END (a record header alone) where
the next record will begin (wal/format.py, "End trailer"). A whole END after
a stop proves the record at the stop was complete, so a flipped byte in any
acknowledged record, the last one included, is damage named by file and
offset; a writer killed while writing the END, or while overwriting it with
the next record, still leaves a torn tail that reopens without a word. The C
encoder and the Python StreamWriter lay the END out byte for byte alike,
wherever it falls: inside a block, at a block's start, across a block
header, at a segment's end.
"""

import os
import shutil
import struct
import sys
import warnings

import pytest

import pagestore
from pagestore import _native as native
from pagestore.cipher import Cipher
from pagestore.diskio import SimFS
from pagestore.verify import verify
from pagestore.wal import WalRecoveryWarning
from pagestore.wal import format as F
from pagestore.wal.format import BLOCK, BLOCK_HDR_LEN, END, REC_HDR_LEN, end_after, physical_end
from pagestore.wal.record import _gather, read_record

sys.path.insert(0, os.path.dirname(__file__))
from wal_testkit import SMALL, Harness, open_fresh  # noqa: E402

S = 1 << 20
OPTS = dict(memory_size=16 << 20, wal_segment_size=S, checkpoint_interval=3600, wal_mode="fsync")
KEY = b"end-key"


def _value_for_end(pos: int, want_end: int, klen: int = len(KEY)):
    """Value length that makes a PUT appended at segment offset `pos` end exactly at
    segment offset `want_end`, or None."""
    start = pos + BLOCK_HDR_LEN if pos % BLOCK == 0 else pos
    for v in range(0, 4 * BLOCK):
        e = physical_end(start, 33 + klen + v)
        if e == want_end:
            return v
        if e > want_end:
            return None
    return None


def _next_end_at(pos: int, in_block: int) -> int:
    """The first segment offset past `pos` (by at least 64 bytes) whose offset in its block
    is `in_block` (0: a block's start)."""
    e = pos - pos % BLOCK + in_block + BLOCK
    return e if e - pos >= 64 + BLOCK_HDR_LEN else e + BLOCK


# -- C and Python lay the END out alike ----------------------------------------------------
ALIGNMENTS = [0, BLOCK - 1, BLOCK - 8, BLOCK - 16, BLOCK - 17, BLOCK - 18, 2000]


def test_the_c_encoder_writes_the_same_end_trailers_as_the_stream_writer_wherever_they_fall():
    c_bufs = {0: bytearray(S)}
    core = native.Core(4096, 32 << 20, 8 << 20, wal_segment=lambda seq: c_bufs.setdefault(seq, bytearray(S)))
    core.format_new()
    core.wal_attach(c_bufs[0], S, 0, BLOCK, 0, True)
    py_bufs = {0: bytearray(S)}
    w = F.StreamWriter(S, py_bufs[0], 0, BLOCK, 0, lambda seq: py_bufs.setdefault(seq, bytearray(S)))

    def put(v: int):
        value = bytes([v % 251]) * v
        lsn, end = w.put(KEY, value)
        assert core.put(KEY, value) == end
        return lsn, end

    for a in ALIGNMENTS:                      # an END inside a block, at its start, across its end
        want = _next_end_at(w.pos, a)
        _lsn, end = put(_value_for_end(w.pos, want))
        assert end % S == want
    while w.pos < S - 3 * BLOCK:
        put(5000)
    # a record ending 10 bytes before the segment's end leaves no room for its END:
    # it goes to the next segment
    lsn, end = put(_value_for_end(w.pos, S - 10))
    assert lsn // S == 1
    while w.pos < S - 3 * BLOCK:
        put(5000)
    # one whose END ends exactly at the segment's end stays
    lsn, end = put(_value_for_end(w.pos, S - REC_HDR_LEN))
    assert lsn // S == 1 and end == 2 * S - REC_HDR_LEN
    lsn, _end = put(10)
    assert lsn // S == 2
    core.close()
    assert sorted(c_bufs) == sorted(py_bufs) == [0, 1, 2]
    for seq in c_bufs:
        if c_bufs[seq] != py_bufs[seq]:
            at = next(i for i, (a, b) in enumerate(zip(c_bufs[seq], py_bufs[seq])) if a != b)
            pytest.fail(f"segment {seq} differs first at offset {at}")
    # every segment's last record is followed by a whole END
    for seq in (0, 1):
        end_off = F.decode_segment_header(c_bufs[seq + 1]).prev_end_lsn - seq * S
        at = end_off + BLOCK_HDR_LEN if end_off % BLOCK == 0 else end_off
        rec = read_record(c_bufs[seq], seq * S, at, S, set())
        assert type(rec) is not str and rec.type == END, rec


# -- the Python writer on the simulator ------------------------------------------------------
def _log_ending_at(in_block: int, crossing: bool = False):
    """A simulated WAL of 30 records whose last one ends at `in_block` of its block
    (crossing: the last one spans a block boundary); returns (fs snapshot, records, path)."""
    fs = SimFS()
    h = open_fresh(fs)
    for i in range(29):
        h.put(b"k%03d" % i, bytes([i]) * (i * 97 % 700))
    pos = h.writer.pos
    want = _next_end_at(pos, in_block)
    if crossing:
        want += BLOCK
    v = _value_for_end(pos, want)
    h.put(KEY, b"\x5a" * v)
    assert h.writer.pos == want and h.writer.seq == 0
    h.wal.close()
    recs = Harness(fs).recover(0)
    assert len(recs) == 30
    name = next(n for n in fs.listdir("/db/wal") if n.endswith("00.wal"))
    return fs.snapshot(), recs, f"/db/wal/{name}"


def _flip(snap, path: str, at: int):
    fs = snap.clone()
    f = fs.open(path)
    b = f.pread(1, at)
    f.pwrite(bytes([b[0] ^ 0x20]), at)
    f.close()
    return fs


@pytest.mark.parametrize("in_block,crossing", [(1500, False), (0, False), (BLOCK - 5, False),
                                               (BLOCK - 17, False), (700, True)],
                         ids=["inside", "at-block-start", "across-block", "block-full", "last-spans"])
def test_a_flipped_byte_in_every_record_the_last_included_is_damage_named_every_time(in_block, crossing):
    snap, recs, path = _log_ending_at(in_block, crossing)
    h = Harness(snap.clone())
    with warnings.catch_warnings():
        warnings.simplefilter("error", WalRecoveryWarning)   # intact: a clean end, no tail
        assert [r.lsn for r in h.recover(0)] == [r.lsn for r in recs]
    assert h.wal.recovery_report.clean and h.wal.recovery_report.tail_bytes == 0
    for r in recs:
        at = r.lsn % SMALL + REC_HDR_LEN + 5               # a payload byte (or the crc of an empty one)
        if at % BLOCK < BLOCK_HDR_LEN:
            at += BLOCK_HDR_LEN
        if len(r.raw) <= REC_HDR_LEN + 5:
            at = r.lsn % SMALL
        h = Harness(_flip(snap, path, at))
        with pytest.warns(WalRecoveryWarning) as caught:
            got = h.recover(0, quiet=False)
        report = h.wal.recovery_report
        off = r.lsn % SMALL
        assert [x.lsn for x in got] == [x.lsn for x in recs if x.lsn < r.lsn]
        assert report.damage and report.damage[0]["file"] == path and report.damage[0]["offset"] == off
        assert any(path in str(w.message) and f"offset {off} " in str(w.message) for w in caught)
        assert report.tail_bytes == 0
        if r is recs[-1]:
            assert not report.gaps            # the END after it is the log's end, not a gap


def _segment_bytes(fs, path):
    f = fs.open(path)
    data = f.pread(f.size(), 0)
    f.close()
    return data


@pytest.mark.parametrize("in_block", [1500, 0, BLOCK - 5])
def test_a_writer_killed_writing_the_end_or_overwriting_it_leaves_a_tail_without_warning(in_block):
    before, recs, path = _log_ending_at(in_block)
    # the next record, appended where the writer left off (in the same segment, as a
    # running writer does): a kill stops its copy, or its END's, at any byte
    last_end = recs[-1].end_lsn
    old = _segment_bytes(before.clone(), path)
    buf = bytearray(old)
    w = F.StreamWriter(SMALL, buf, 0, last_end % SMALL, last_end, write_header=False)
    nxt_lsn, nxt_end = w.put(b"next", b"n" * 3000)
    new = bytes(buf)
    stop = last_end % SMALL
    written_end = end_after(nxt_end % SMALL)
    changed = [i for i in range(stop - stop % BLOCK, written_end) if old[i] != new[i]]
    assert changed
    # a kill after k bytes of the writer's sequential copy: new bytes below the cut, old above
    for cut in sorted({changed[0] + 1, changed[0] + 8, changed[0] + REC_HDR_LEN, stop + 1500,
                       nxt_end % SMALL - 1, nxt_end % SMALL + 1, nxt_end % SMALL + 9, written_end - 1}):
        data = new[:cut] + old[cut:]
        fs2 = before.clone()
        f = fs2.open(path)
        f.pwrite(data, 0)
        f.close()
        h2 = Harness(fs2)
        with warnings.catch_warnings():
            warnings.simplefilter("error", WalRecoveryWarning)
            got = h2.recover(0, quiet=False)
        report = h2.wal.recovery_report
        assert report.clean, (cut, report.damage)
        done = cut >= nxt_end % SMALL            # the record itself complete: replayed
        assert [r.lsn for r in got] == [r.lsn for r in recs] + ([nxt_lsn] if done else []), cut
    # the END itself torn (its bytes, and a block header it writes, copied in order up to
    # the cut), the record before it complete: the same
    no_end = bytearray(old)
    no_end[stop:end_after(stop)] = bytes(end_after(stop) - stop)
    for cut in range(stop + 1, end_after(stop)):
        data = old[:cut] + no_end[cut:]
        fs2 = before.clone()
        f = fs2.open(path)
        f.pwrite(data, 0)
        f.close()
        h2 = Harness(fs2)
        with warnings.catch_warnings():
            warnings.simplefilter("error", WalRecoveryWarning)
            got = h2.recover(0, quiet=False)
        assert [r.lsn for r in got] == [r.lsn for r in recs] and h2.wal.recovery_report.clean


# -- a real store: acknowledged (fsync) puts, the C encoder ------------------------------------
def _segments(path):
    out = {}
    for name in os.listdir(os.path.join(path, "wal")):
        if name.endswith(".wal"):
            with open(os.path.join(path, "wal", name), "rb") as f:
                h = F.decode_segment_header(f.read(44))
            if h is not None:
                out[h.seq] = os.path.join(path, "wal", name)
    return out


def _record_spans(buf, base):
    """(offset, length, type) of the records of a segment up to its END (headers only:
    sealed records are not opened)."""
    o = F.FIRST_RECORD
    while physical_end(o, REC_HDR_LEN) <= S:
        _crc, length, lsn, rtype = struct.unpack("<IIQB", _gather(buf, base, o, REC_HDR_LEN, None))
        if lsn != base + o or length < REC_HDR_LEN or rtype == END:
            return
        yield o, length, rtype
        o = physical_end(o, length)
        if o % BLOCK == 0:
            o += BLOCK_HDR_LEN


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_a_flipped_byte_in_every_acknowledged_put_of_a_store_the_last_included_is_reported(tmp_path, encrypted):
    key = bytes(range(32))
    extra = dict(encryption_key=key) if encrypted else {}
    path = str(tmp_path / "s")
    db = pagestore.open(path, **OPTS, **extra)
    acked = {}
    for i in range(40):
        k, v = b"key-%03d" % i, bytes([i % 251]) * (i * 419 % 6000)
        db.put(k, v)                     # fsync mode: durable when it returns
        acked[k] = v
    db._abandon()
    segs = _segments(path)
    seg = segs[max(segs)]
    with open(seg, "rb") as f:
        buf = f.read()
    spans = list(_record_spans(buf, max(segs) * S))
    puts = [(o, n) for o, n, t in spans if t == F.PUT]
    assert len(puts) >= 40 and spans[-1][2] == F.PUT     # the log's last record among them
    cipher = Cipher.from_option(key) if encrypted else None
    for i, (o, n) in enumerate(puts):
        at = o + REC_HDR_LEN + 20
        if at % BLOCK < BLOCK_HDR_LEN:
            at += BLOCK_HDR_LEN
        copy = str(tmp_path / f"c{i}")
        shutil.copytree(path, copy)
        cseg = os.path.join(copy, os.path.relpath(seg, path))
        with open(cseg, "r+b") as f:
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0x20]))
        faults = [x for x in verify(copy, cipher=cipher)["faults"] if x["check"] == "wal"]
        assert faults and faults[0]["file"] == cseg and faults[0]["offset"] == o, (i, faults)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pagestore.open(copy, **OPTS, **extra).close()
        msgs = [str(w.message) for w in caught if issubclass(w.category, WalRecoveryWarning)]
        assert any(cseg in m and f"offset {o} " in m for m in msgs), (i, len(puts), msgs)
        shutil.rmtree(copy)


@pytest.mark.parametrize("blocks", [F.WINDOW // 2, F.WINDOW + 2, 3 * F.WINDOW])
def test_damage_to_a_last_record_of_any_length_is_reported_not_cut_as_a_torn_tail(tmp_path, blocks):
    # the END after a value of many blocks is as far from the stop as the value is long
    seg_size = 4 << 20
    opts = dict(memory_size=8 << 20, wal_segment_size=seg_size, checkpoint_interval=3600, wal_mode="fsync")
    db = pagestore.open(tmp_path, **opts)
    for i in range(50):
        db.put(b"k%03d" % i, bytes([i]) * 1000)
    sig = db._engine.core.signals
    start = sig.wal_end_lsn
    db.put(b"LAST", b"\x5a" * (blocks * BLOCK))     # fsync mode: durable on return
    end = sig.wal_end_lsn
    db._abandon()                                    # as a kill -9 leaves it
    seg = next(p for p in (tmp_path / "wal").glob("*.wal")
               if (h := F.decode_segment_header(p.read_bytes()[:44])) is not None
               and h.seq == end // seg_size)
    at = start % seg_size + REC_HDR_LEN + 40         # a byte of LAST's value
    if at % BLOCK < BLOCK_HDR_LEN:
        at += BLOCK_HDR_LEN
    with open(seg, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 1]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pagestore.open(tmp_path, **opts) as db:
            assert db.get(b"LAST") is None           # not replayed: it is damaged
            damage = db.recovery.get("wal_damage")
    assert any(issubclass(w.category, WalRecoveryWarning) and str(seg) in str(w.message) for w in caught)
    assert damage and damage[0]["file"] == str(seg)
