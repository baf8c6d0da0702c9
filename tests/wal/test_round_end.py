"""A commit round writes the END of the record it acknowledges, not what the buffer holds there.

On the pwrite path (fsync mode, O_DIRECT) a round copies the writers' buffer
up to its target, the END after it included. With concurrent writers the
next record may already be half over that END in the buffer; if the round
wrote those bytes and the process died before the next round, the log's
last acknowledged record would have no END on disk and damage to it would
read as a torn tail. So the round lays the END image for its target
(wal/format.py `end_image`, walenc.c `ps_wal_end_image`) over what it
writes: the Python publish (plain, O_DIRECT, sealed) and the round in C.
"""

import mmap
import os
import sys
import warnings

import pytest

from pagestore import _native
from pagestore._native import ffi
from pagestore._native.testing import end_image as c_end_image
from pagestore.cipher import Cipher
from pagestore.diskio import PosixFS, SimFS, layout
from pagestore.wal import WalRecoveryWarning
from pagestore.wal import format as F
from pagestore.wal.format import BLOCK, BLOCK_HDR_LEN, END, REC_HDR_LEN, end_after, end_image, physical_end
from pagestore.wal.record import read_record

sys.path.insert(0, os.path.dirname(__file__))
from wal_testkit import SMALL, Harness, open_fresh  # noqa: E402

S = 1 << 20
KEY = b"round-key"
# where a record can end in its block: inside, at the block's start, with the END
# across the next block header, with exactly 17 bytes left
POSITIONS = {"inside": 1500, "at-block-start": 0, "across-block": BLOCK - 5, "block-full": BLOCK - 17}


def _value_for_end(pos: int, want_end: int, tag: int = 0):
    """Value length that makes a PUT of KEY (with a `tag` of that many bytes) appended at
    segment offset `pos` end at `want_end`."""
    start = pos + BLOCK_HDR_LEN if pos % BLOCK == 0 else pos
    for v in range(4 * BLOCK):
        e = physical_end(start, 33 + len(KEY) + tag + v)
        if e == want_end:
            return v
        if e > want_end:
            break
    raise AssertionError(f"no PUT from {pos} ends at {want_end}")


def _end_at(pos: int, in_block: int) -> int:
    """The first segment offset past `pos` by at least a block whose offset in its block is `in_block`."""
    return pos - pos % BLOCK + BLOCK + in_block + (BLOCK if in_block < BLOCK_HDR_LEN + 64 else 0)


# -- one builder, the encoders' bytes -------------------------------------------------------
def test_the_end_image_is_the_end_both_encoders_write_wherever_it_falls():
    c_bufs = {0: bytearray(S)}
    core = _native.Core(4096, 32 << 20, 8 << 20, wal_segment=lambda seq: c_bufs.setdefault(seq, bytearray(S)))
    core.format_new()
    core.wal_attach(c_bufs[0], S, 0, BLOCK, 0, True)
    w = F.StreamWriter(S, bytearray(S), 0, BLOCK, 0)
    wants = [_end_at(BLOCK * (2 + 2 * i), a) for i, a in enumerate(POSITIONS.values())]
    wants.append(S - 3 * BLOCK + 100)
    wants.append(S - REC_HDR_LEN)                      # the END ends at the segment's end
    seen = set()
    for want in wants:
        while physical_end(w.pos, 5000) < want - BLOCK:
            w.put(KEY, bytes(5000 - 33 - len(KEY)))
            core.put(KEY, bytes(5000 - 33 - len(KEY)))
        value = b"\x5a" * _value_for_end(w.pos, want)
        _lsn, end = w.put(KEY, value)
        assert core.put(KEY, value) == end == want
        img = end_image(end)
        # what each encoder has just written at `end`, before the next record overwrites it
        assert bytes(c_bufs[0][end:end + len(img)]) == img
        assert bytes(w.buffer[end:end + len(img)]) == img
        assert c_end_image(end) == img and end_after(end) == end + len(img)
        at = end + BLOCK_HDR_LEN if end % BLOCK == 0 else end
        rec = read_record(c_bufs[0], 0, at, S, set())
        assert type(rec) is not str and rec.type == END and rec.lsn == at
        for b in range(end - end % BLOCK + BLOCK * (end % BLOCK != 0), end + len(img), BLOCK):
            assert F.block_mark(c_bufs[0], b) == end                 # the mark its writer gives
            first = F.decode_block_header(c_bufs[0], b)[0]
            assert first == (BLOCK_HDR_LEN + REC_HDR_LEN - (b - at) if at < b else BLOCK_HDR_LEN)
        seen.add(len(img))
    core.close()
    assert seen == {REC_HDR_LEN, REC_HDR_LEN + BLOCK_HDR_LEN}


# -- the Python publish ------------------------------------------------------------------
def _flip_and_recover(fs, path: str, at: int, **kw):
    f = fs.open(path)
    b = f.pread(1, at)
    f.pwrite(bytes([b[0] ^ 0x20]), at)
    f.close()
    h = Harness(fs, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WalRecoveryWarning)
        recs = h.recover(0, quiet=False)
    return recs, h.wal.recovery_report


def _assert_end_and_damage(fs_after_kill, path, lsn, end, size, **kw):
    """The file holds the END image at `end`, and a flipped byte in the record at `lsn` is damage."""
    f = fs_after_kill.open(path)
    img = end_image(end)
    assert f.pread(len(img), end % size) == img
    f.close()
    recs, report = _flip_and_recover(fs_after_kill, path, lsn % size + REC_HDR_LEN + 2, segment_size=size, **kw)
    assert recs and recs[-1].lsn < lsn
    assert report.damage and report.damage[0]["file"] == path and report.damage[0]["offset"] == lsn % size
    assert report.tail_bytes == 0


@pytest.mark.parametrize("kind", ["buffered", "direct", "sealed"])
@pytest.mark.parametrize("in_block", POSITIONS.values(), ids=POSITIONS.keys())
def test_a_publish_writes_a_whole_end_at_its_target_while_the_next_record_is_half_over_it(kind, in_block):
    fs = SimFS(direct=kind == "direct")
    kw = {"direct": True} if kind == "direct" else {}
    if kind == "sealed":
        kw["cipher"] = Cipher({1: b"k" * 32}, 1)
    h = open_fresh(fs, mode="fsync", **kw)
    assert h.wal.stats()["wal_write_path"] == "pwrite"
    for i in range(5):
        h.put(b"k%d" % i, bytes([i]) * 300)
    want = _end_at(h.writer.pos, in_block)
    lsn, end = h.writer.put(KEY, b"\x5a" * _value_for_end(h.writer.pos, want, 16 if kind == "sealed" else 0))
    assert end == want
    # the next writer has begun its record over the END, header and block header included
    h.writer.buffer[end:end + 45] = b"\xab" * 45
    h.wal.commit(end)
    fs.crash(mode="keep")                 # the process dies before another round
    name = next(n for n in fs.listdir("/db/wal") if n == layout.slot_name(0))
    _assert_end_and_damage(fs, f"/db/wal/{name}", lsn, end, SMALL, **kw)


# -- the round in C ----------------------------------------------------------------------
@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "direct"])
@pytest.mark.parametrize("in_block", POSITIONS.values(), ids=POSITIONS.keys())
def test_a_round_in_c_writes_a_whole_end_at_its_target_while_the_next_record_is_half_over_it(
        tmp_path, in_block, direct):
    d = tmp_path / "wal"
    d.mkdir()
    path = str(d / layout.slot_name(0))
    with open(path, "wb") as f:
        f.truncate(S)
    try:
        fd = os.open(path, os.O_RDWR | (os.O_DIRECT if direct else 0))
    except OSError as exc:                       # tmpfs has no O_DIRECT
        if not direct:
            raise
        pytest.skip(f"no O_DIRECT here: {exc}")
    buf = mmap.mmap(-1, S)                       # page aligned, as O_DIRECT wants
    w = F.StreamWriter(S, buf, 0, BLOCK, 0)
    cell = ffi.new("uint64_t *")
    gate = _native.GroupCommit(cell, owner=cell)
    gate.io_enable(True, S, direct)
    gate.io_segment(0, fd, buf)
    ticket = gate.ticket()
    for i in range(5):
        _lsn, cell[0] = w.put(b"k%d" % i, bytes([i]) * 300)
    assert gate.wait(cell[0], True, ticket, io=True) is False     # a round in C
    want = _end_at(w.pos, in_block)
    lsn, end = w.put(KEY, b"\x5a" * _value_for_end(w.pos, want))
    assert end == want
    cell[0] = end
    buf[end:end + 45] = b"\xab" * 45
    assert gate.wait(end, True, ticket, io=True) is False
    assert gate.stats()["io_rounds"] == 2
    gate.io_enable(False, S)
    os.close(fd)
    _assert_end_and_damage(PosixFS(), path, lsn, end, S, dirpath=str(d))
