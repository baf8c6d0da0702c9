"""The reader stops at damage, warns with file and offset, and never replays garbage."""

import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagestore.diskio import SimFS
from pagestore.wal import BLOCK, WalRecoveryWarning
from pagestore.wal.format import block_mark, decode_block_header, decode_segment_header, physical_end

sys.path.insert(0, os.path.dirname(__file__))
from wal_testkit import SMALL, Harness, kv, open_fresh  # noqa: E402


def build(n=150, seed_size=5000):
    """A closed WAL of n records over several SMALL segments; returns (fs, written, records)."""
    fs = SimFS()
    h = open_fresh(fs)
    written = [(b"key-%04d" % i, bytes([i % 256]) * (i * 131 % seed_size)) for i in range(n)]
    for k, v in written:
        h.put(k, v)
    h.wal.close()
    recs = Harness(fs).recover(0)
    assert kv(recs) == written
    return fs, written, recs


def seg_paths(fs, d="/db/wal"):
    """seq -> path, from the segment headers."""
    out = {}
    for name in fs.listdir(d):
        path = f"{d}/{name}"
        f = fs.open(path)
        h = decode_segment_header(f.pread(44, 0))
        f.close()
        if h is not None:
            out[h.seq] = path
    return out


def flip(fs, path, offset, xor=0x5A):
    f = fs.open(path)
    b = f.pread(1, offset)
    f.pwrite(bytes([b[0] ^ xor]), offset)
    f.fsync()
    f.close()


def recover_warned(fs):
    h = Harness(fs)
    with pytest.warns(WalRecoveryWarning) as caught:
        recs = h.recover(0, quiet=False)
    return h, recs, [str(w.message) for w in caught]


def test_flipped_byte_stops_replay_with_a_warning_naming_file_and_offset():
    fs, written, recs = build()
    victim = recs[100]
    path = seg_paths(fs)[victim.lsn // SMALL]
    off = victim.lsn % SMALL
    flip(fs, path, off + 20)
    h, got, msgs = recover_warned(fs)
    assert kv(got) == written[:100]
    assert any(path in m and f"offset {off} " in m and "crc" in m for m in msgs), msgs
    assert h.wal.recovery_report.stop_lsn == victim.lsn
    assert h.wal.recovery_report.damage[0]["file"] == path


def test_flipped_lsn_field_of_the_last_record_is_reported_as_damage():
    fs, written, recs = build(n=40)
    last = recs[-1]
    path = seg_paths(fs)[last.lsn // SMALL]
    flip(fs, path, last.lsn % SMALL + 9, 0xFF)
    h, got, msgs = recover_warned(fs)
    assert kv(got) == written[:-1]
    assert any(f"offset {last.lsn % SMALL} " in m for m in msgs)


def test_truncated_segment_stops_replay_with_a_warning():
    fs, written, recs = build()
    victim = recs[70]
    seq = victim.lsn // SMALL
    path = seg_paths(fs)[seq]
    f = fs.open(path)
    f.truncate(victim.lsn % SMALL + 30)
    f.fsync()
    f.close()
    h, got, msgs = recover_warned(fs)
    assert kv(got) == written[:70]
    assert any(path in m and "shorter than segment_size" in m for m in msgs)
    assert any(path in m and f"offset {victim.lsn % SMALL} " in m for m in msgs)


def test_records_after_a_gap_are_reported_and_not_replayed():
    fs, written, recs = build(n=300, seed_size=300)
    # Zero one whole block in the middle of a segment: the records after it are intact.
    victim = next(r for r in recs if (r.lsn % SMALL) // BLOCK == 5)
    seq = victim.lsn // SMALL
    path = seg_paths(fs)[seq]
    f = fs.open(path)
    f.pwrite(bytes(BLOCK), 5 * BLOCK)
    f.fsync()
    f.close()
    h, got, msgs = recover_warned(fs)
    stop = h.wal.recovery_report.stop_lsn
    assert kv(got) == [kv_ for kv_, r in zip(written, recs) if r.end_lsn <= stop]
    assert stop <= seq * SMALL + 5 * BLOCK
    assert h.wal.recovery_report.gaps, msgs
    gap = h.wal.recovery_report.gaps[0]
    assert gap["file"] == path and gap["offset"] > 5 * BLOCK
    assert all(r.lsn < gap["lsn"] for r in got)


def test_a_clean_end_gives_no_warning(recwarn):
    fs, written, recs = build(n=30)
    h = Harness(fs)
    got = h.recover(0, quiet=False)
    assert kv(got) == written and not recwarn.list and h.wal.recovery_report.clean


# -- fuzzing -----------------------------------------------------------------------
_BASE = {}


def base():
    if not _BASE:
        fs, written, recs = build(n=120, seed_size=3000)
        paths = seg_paths(fs)
        _BASE.update(snap=fs.snapshot(), written=written, recs=recs, paths=paths, before=contents(fs, paths))
    return _BASE


def contents(fs, paths):
    """seq -> the segment's bytes as the reader sees them (zeros past the end of a short file)."""
    out = {}
    for seq, path in paths.items():
        f = fs.open(path)
        data = f.pread(SMALL, 0)
        f.close()
        out[seq] = data + bytes(SMALL - len(data))
    return out


def proven_written(lsn, segments):
    """True if a valid block header of the log after `lsn` marks it written (wal/format.py)."""
    for seq, data in segments.items():
        for nb in range(BLOCK, SMALL, BLOCK):
            h = decode_block_header(data, nb)
            if h is None or h[1] != seq * SMALL + nb or h[1] <= lsn:
                continue
            w = block_mark(data, nb)
            if w is not None and w > lsn:
                return True
    return False


def first_damaged(recs, before, after):
    """Index of the first record whose bytes (or segment/block header it needs) changed."""
    for i, r in enumerate(recs):
        seq, o = divmod(r.lsn, SMALL)
        start = o - 24 if o % BLOCK == 24 else o  # its block header, when it opens the block
        end = physical_end(o, len(r.raw))
        if before[seq][:44] != after[seq][:44] or before[seq][start:end] != after[seq][start:end]:
            return i
    return len(recs)


damage = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 3), st.integers(0, SMALL - 1), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 3), st.integers(0, SMALL - 1), st.just(0)),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(damage, min_size=1, max_size=3))
def test_fuzzed_flips_and_truncations_never_replay_garbage(hits):
    b = base()
    fs = b["snap"].clone()
    recs, paths = b["recs"], b["paths"]
    for kind, seq, off, xor in hits:
        seq = min(seq, max(paths))
        if kind == "flip":
            if off >= fs.size(paths[seq]):
                continue  # past an earlier truncation
            flip(fs, paths[seq], off, xor)
        else:
            f = fs.open(paths[seq])
            f.truncate(min(off, f.size()))
            f.fsync()
            f.close()
    after = contents(fs, paths)
    k = first_damaged(recs, b["before"], after)
    h = Harness(fs)
    got = h.recover(0)
    assert [(r.lsn, r.raw) for r in got] == [(r.lsn, r.raw) for r in recs[:k]]
    report = h.wal.recovery_report
    if k < len(recs) and proven_written(recs[k].lsn, after):
        # a block header written after record k survived: the stop is damage, not a torn tail
        assert report.damage or report.gaps
        assert all(isinstance(d["offset"], int) and d["file"].startswith("/db/wal/") for d in report.damage)
    h.start()  # the log stays writable after any damage
    h.put(b"after", b"damage")
    h.wal.close()
    again = Harness(fs).recover(0)
    assert [(r.lsn, r.raw) for r in again[:-1]] == [(r.lsn, r.raw) for r in recs[:k]]
    assert kv(again[-1:]) == [(b"after", b"damage")]
