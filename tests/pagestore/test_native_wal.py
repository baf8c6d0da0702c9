"""WAL records the C core appends follow docs/wal-format.md byte for byte:
checked with a small decoder written here from the document alone (segment
and block headers, first_record, record crc/length/lsn, segment chaining by
prev_end_lsn). Replaying the decoded committed PUT/DELETE records with
apply_log rebuilds the same tree; the legacy physical mode's PAGE_SNAPSHOT +
PAGE_DELTA records rebuild every page exactly; a failed batch leaves no
committed records and a ROLLBACK."""

import os
import sys
import random
import struct

import crc32c
import pytest

from pagestore import _native
from pagestore._native.testing import page_image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from native_kit import Segments, scan  # noqa: E402

BLOCK, BHDR, SEG = 4096, 24, 1 << 20
PUT, DELETE, COMMIT, CHECKPOINT, SNAP, DELTA, ROLLBACK = 1, 2, 3, 4, 5, 6, 7


def attach(core, segs):
    buf = segs(0)
    core.wal_attach(buf, SEG, 0, BLOCK, 0, True)


# ---- an independent decoder, from docs/wal-format.md -------------------------

def seg_header(buf):
    magic, ver, res, bs, segsize, seq, prev = struct.unpack_from("<8sHHIQQQ", buf, 0)
    (crc,) = struct.unpack_from("<I", buf, 40)
    ok = magic == b"PSWALSEG" and ver == 1 and res == 4 and bs == BLOCK and \
        crc == crc32c.crc32c(bytes(buf[:40])) and not any(buf[44:BLOCK])
    return ok, segsize, seq, prev


def check_block(buf, seq, boff):
    magic, ver, first, blsn, res, crc = struct.unpack_from("<IHHQII", buf, boff)
    # res: the written mark, block_lsn - W (tests/wal/test_torn_tail.py checks it)
    ok = magic == 0x4C575350 and ver == 1 and blsn == seq * SEG + boff and \
        crc == crc32c.crc32c(bytes(buf[boff:boff + 20]))
    return ok, first


def read_logical(buf, seq, pos, n, firsts):
    """n record bytes from physical pos, skipping (and checking) block headers."""
    out = bytearray()
    while len(out) < n:
        if pos % BLOCK == 0:
            if pos + BHDR > SEG:
                return None, pos
            ok, first = check_block(buf, seq, pos)
            if not ok:
                return None, pos
            firsts[pos] = first
            pos += BHDR
        k = min(n - len(out), BLOCK - pos % BLOCK)
        if pos + k > SEG:
            return None, pos
        out += buf[pos:pos + k]
        pos += k
    return bytes(out), pos


def decode(segs, start_seq=0):
    """All valid records: (lsn, end_lsn, type, payload, raw), following segments."""
    recs, seq = [], start_seq
    buf = segs.bufs[seq]
    ok, segsize, hseq, _ = seg_header(buf)
    assert ok and segsize == SEG and hseq == seq
    pos, last_end, starts, firsts = BLOCK, None, {}, {}
    while True:
        start = pos + (BHDR if pos % BLOCK == 0 else 0)
        hdr, p2 = read_logical(buf, seq, pos, 17, firsts)
        rec = None
        if hdr is not None:
            crc, length, lsn, typ = struct.unpack_from("<IIQB", hdr, 0)
            if length >= 17 and lsn == seq * SEG + start and typ != 8:   # 8: the END trailer
                rest, p3 = read_logical(buf, seq, p2, length - 17, firsts)
                if rest is not None and crc32c.crc32c(hdr[4:] + rest) == crc:
                    rec = (lsn, seq * SEG + p3, typ, rest, hdr + rest)
                    pos = p3
        if rec is not None:
            recs.append(rec)
            starts.setdefault(start - start % BLOCK, start)
            last_end = rec[1]
            continue
        nxt = segs.bufs.get(seq + 1)
        if nxt is None:
            break
        ok, _, nseq, prev = seg_header(nxt)
        if not ok or nseq != seq + 1 or prev != last_end:
            break
        check_first_record(firsts, starts)
        seq, buf, pos, starts, firsts = seq + 1, nxt, BLOCK, {}, {}
    check_first_record(firsts, starts)
    return recs


def check_first_record(firsts, starts):
    for boff, first in firsts.items():
        if boff in starts:
            assert first == starts[boff] - boff, (boff, first)


def committed(recs):
    """PUT/DELETE raw records that count: txid 0, or a later COMMIT of their txid."""
    commits = {struct.unpack_from("<Q", r[3])[0] for r in recs if r[2] == COMMIT}
    return [r for r in recs if r[2] in (PUT, DELETE) and
            (struct.unpack_from("<Q", r[3])[0] in commits or struct.unpack_from("<Q", r[3])[0] == 0)]


def new_core(segs, **kw):
    c = _native.Core(4096, 4096 * 4096, 1024 * 4096, 0, wal_segment=segs, **kw)
    c.format_new()
    attach(c, segs)
    return c


# ---- tests ------------------------------------------------------------------------

def test_put_and_delete_records_decode_per_the_format():
    segs = Segments()
    core = new_core(segs)
    e1 = core.put(b"key", b"value")
    e2 = core.delete(b"key")
    assert core.delete(b"key") == -1
    recs = decode(segs)
    assert [r[2] for r in recs] == [PUT, DELETE]
    assert recs[0][0] == BLOCK + BHDR                     # first record right after block 1's header
    assert recs[0][1] == e1 and recs[1][1] == e2 == core.signals.wal_end_lsn
    txid, kl, vl = struct.unpack_from("<QII", recs[0][3])
    assert (txid, recs[0][3][16:16 + kl], recs[0][3][16 + kl:]) == (0, b"key", b"value")
    txid, kl = struct.unpack_from("<QI", recs[1][3])
    assert (txid, recs[1][3][12:]) == (0, b"key")


def test_records_cross_blocks_and_segments_and_replay_to_the_same_tree():
    segs = Segments()
    core = new_core(segs)
    rng = random.Random(1)
    model = {}
    for i in range(6000):
        r = rng.random()
        if r < 0.7:
            k, v = rng.randbytes(rng.randrange(1, 30)), rng.randbytes(rng.choice([10, 200, 5000]))
            core.put(k, v)
            model[k] = v
        elif r < 0.9 and model:
            k = rng.choice(list(model))
            core.delete(k)
            del model[k]
        else:
            ops = [(1, rng.randbytes(5), rng.randbytes(50)) for _ in range(rng.randrange(1, 20))]
            core.apply_batch(_native.pack_ops(ops))
            model.update((k, v) for _, k, v in ops)
    assert len(segs.bufs) >= 3                             # segments switched through the callback
    core.log_record(CHECKPOINT, struct.pack("<Q", 99))
    recs = decode(segs)
    assert recs[-1][2] == CHECKPOINT and recs[-1][1] == core.signals.wal_end_lsn
    txids = [struct.unpack_from("<Q", r[3])[0] for r in recs if r[2] == COMMIT]
    assert len(txids) == len(set(txids)) and all(txids)
    replica = _native.Core(4096, 4096 * 4096, 0, 0)
    replica.wal_disable()
    replica.format_new()
    raw = b"".join(r[4] for r in committed(recs))
    assert replica.apply_log(raw) == len(committed(recs))
    assert scan(replica) == scan(core) == sorted(model.items())
    replica.verify()


def test_ckpt_begin_logs_a_checkpoint_record_of_its_id_at_the_returned_lsn():
    segs = Segments()
    core = new_core(segs)
    core.put(b"a", b"1")
    ids, lsn = core.ckpt_begin(42)
    core.ckpt_end()
    rec = [r for r in decode(segs) if r[2] == CHECKPOINT][0]
    assert rec[0] == lsn and rec[3] == struct.pack("<Q", 42)


def test_failed_batch_logs_no_commit_but_a_rollback_and_changes_nothing():
    segs = Segments()
    core = _native.Core(4096, 4096 * 4096, 2 * 4096, 0, wal_segment=segs)
    core.format_new()
    attach(core, segs)
    for i in range(2000):
        core.put(b"%05d" % i, b"v" * 50)
    ids, _ = core.ckpt_begin(1)
    ops = [(1, b"%05d" % i, b"w" * 50) for i in range(0, 2000, 7)]
    with pytest.raises(_native.Retry):
        core.apply_batch(_native.pack_ops(ops), 777)
    recs = decode(segs)
    mine = [r for r in recs if r[2] in (PUT, COMMIT, ROLLBACK) and struct.unpack_from("<Q", r[3])[0] == 777]
    assert mine and mine[-1][2] == ROLLBACK and COMMIT not in [r[2] for r in mine]
    assert all(r[3][:8] != struct.pack("<Q", 777) for r in committed(recs))
    assert all(v == b"v" * 50 for _, v in scan(core))
    core.ckpt_end()


def test_no_segment_means_wal_full_and_nothing_applied():
    segs = Segments(limit=1)
    core = new_core(segs)
    with pytest.raises(_native.Retry) as ei:
        for i in range(100000):
            core.put(b"%06d" % i, b"x" * 100)
    assert ei.value.code == _native.PS_E_WAL_FULL
    end = core.signals.wal_end_lsn
    n = core.count()
    recs = decode(segs)
    assert len(recs) == n and recs[-1][1] == end
    assert core.get(b"%06d" % n) is None
    core.verify()


def test_physical_mode_snapshots_and_deltas_rebuild_every_page_exactly():
    segs = Segments()
    core = new_core(segs, physical_wal=True)
    rng = random.Random(3)
    for i in range(500):
        core.put(rng.randbytes(8), rng.randbytes(100))
    ids, lsn = core.ckpt_begin(1)
    out = bytearray(len(ids) * 4096)
    core.ckpt_copy(ids, out)
    core.ckpt_release(ids)
    core.ckpt_end()
    model = {}
    for i in range(3000):
        k = rng.randbytes(8)
        if rng.random() < 0.1:
            core.put(k, rng.randbytes(9000))               # overflow pages too
        else:
            core.put(k, rng.randbytes(rng.randrange(200)))
        model[k] = 1
        if rng.random() < 0.2:
            core.delete(rng.choice(list(model)))
    pages, snaps = {}, 0
    for r in decode(segs):
        if r[0] < lsn:
            continue
        if r[2] == SNAP:
            pid, codec, n = struct.unpack_from("<QBI", r[3])
            assert codec == 0 and n == 4096
            assert pid not in pages                         # first modification since ckpt_begin
            pages[pid] = bytearray(r[3][13:13 + n])
            snaps += 1
        elif r[2] == DELTA:
            pid, nr = struct.unpack_from("<QH", r[3])
            off = 10
            img = pages[pid]
            for _ in range(nr):
                o, n = struct.unpack_from("<HH", r[3], off)
                img[o:o + n] = r[3][off + 4:off + 4 + n]
                off += 4 + n
            assert off == len(r[3])
    assert snaps > 10
    for pid, img in pages.items():
        assert bytes(img) == page_image(core, pid), pid
    core.verify()
