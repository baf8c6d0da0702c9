"""Sealed WAL records of the C encoder (Core.wal_set_key): AES-256-GCM per record
through the run-time loaded libcrypto, checked against `cryptography`'s AESGCM.

Segment header with a key: flags 2 (| 4, marked) @10, key_id @44, salt @45, key-check tag @53
(GCM tag of nothing, nonce salt || ff*4, AAD b"pagestore/walseg/v2\\0" +
header[0:45]). Record: crc32c over [4, len), len = 17 + payload + 16, then
ciphertext and tag; nonce salt || u32 offset in the segment, AAD wire[4:17]."""

import os
import struct
import sys

import crc32c
import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pagestore import _native, errors

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from native_kit import Segments, logical, wal_core, wal_records  # noqa: E402

pytestmark = pytest.mark.skipif(not _native.wal_seal_available(), reason="no libcrypto")

BLOCK, BHDR, SEG = 4096, 24, 1 << 20
PUT, DELETE, COMMIT, CHECKPOINT, SNAP, DELTA, ROLLBACK = 1, 2, 3, 4, 5, 6, 7
KEY = bytes(range(32))
SEG_AAD = b"pagestore/walseg/v2\x00"
END = 17                                             # the END trailer after a segment's last record
DATA_BYTES = (SEG // BLOCK - 1) * (BLOCK - BHDR) - END   # record bytes one segment holds


new_core = wal_core


def header(buf):
    """(flags, key_id, salt, tag) of a segment header whose crc holds."""
    assert bytes(buf[:8]) == b"PSWALSEG"
    assert struct.unpack_from("<I", buf, 40)[0] == crc32c.crc32c(bytes(buf[:40]))
    flags = struct.unpack_from("<H", buf, 10)[0]
    assert flags & 4, "the encoder marks every segment it writes (docs/wal-format.md, flag bit 4)"
    return flags & ~4, buf[44], bytes(buf[45:53]), bytes(buf[53:69])


def check_tag(buf, key):
    """AESGCM's verdict on the key-check tag (raises InvalidTag)."""
    _, _, salt, tag = header(buf)
    AESGCM(key).decrypt(salt + b"\xff" * 4, tag, SEG_AAD + bytes(buf[:45]))


def walk(segs, sealed):
    """Every record of every segment: (seq, offset, wire bytes), checking each crc
    (a record is where the crc holds; the rest of a segment is garbage)."""
    recs = []
    for seq in sorted(segs.bufs):
        buf = segs.bufs[seq]
        assert header(buf)[0] == (2 if sealed else 0)
        recs += [(seq, start, wire) for start, wire in wal_records(buf, seq)]
    return recs


def open_record(key, salt, offset, wire):
    """The plaintext payload of a sealed record (raises InvalidTag)."""
    return AESGCM(key).decrypt(salt + struct.pack("<I", offset), wire[17:], wire[4:17])


def workload(core):
    """Deterministic operations (explicit txids: the default one is an LSN)."""
    for i in range(40):
        core.put(b"k%03d" % i, b"v" * (i * 7))
    core.put(b"big", bytes(range(256)) * 24)                 # 6144 bytes: spans blocks
    core.delete(b"k005")
    core.apply_batch(_native.pack_ops([(1, b"b1", b"x" * 100), (2, b"k006", b"")]), txid=77)
    core.log_record(CHECKPOINT, struct.pack("<Q", 5) + b"opaque")
    core.log_record(ROLLBACK, b"")                           # empty payload
    for i in range(230):                                     # rolls over to segment 1
        core.put(b"r%04d" % i, bytes([i % 251]) * 5000)
    core.put(b"tail", b"t")


def sealed_and_plain(**kw):
    plain, sealed = Segments(), Segments()
    workload(new_core(plain, **kw))
    core = new_core(sealed, key=KEY, key_id=9, **kw)
    workload(core)
    assert len(sealed.bufs) >= 2
    return walk(plain, False), walk(sealed, True), sealed, core


# ---- a) headers ---------------------------------------------------------------------

def test_headers_written_by_attach_and_rollover_are_sealed_with_a_key_check_tag():
    segs = Segments()
    core = new_core(segs, key=KEY, key_id=9)
    for i in range(300):
        core.put(b"r%04d" % i, b"x" * 5000)
    assert len(segs.bufs) >= 2
    for seq, buf in segs.bufs.items():
        flags, key_id, salt, _ = header(buf)
        assert (flags, key_id) == (2, 9)
        assert struct.unpack_from("<QQ", buf, 16) == (SEG, seq)
        assert not any(buf[69:BLOCK])
        check_tag(buf, KEY)
        with pytest.raises(InvalidTag):
            check_tag(buf, bytes(32))
        with pytest.raises(InvalidTag):                   # the tag covers header bytes 0..45
            bad = bytearray(buf[:BLOCK])
            bad[44] ^= 1
            check_tag(bad, KEY)


def test_without_a_key_the_header_is_the_plain_one():
    segs = Segments()
    new_core(segs)
    assert header(segs.bufs[0])[0] == 0 and not any(segs.bufs[0][44:BLOCK])


# ---- b) records ----------------------------------------------------------------------

@pytest.mark.parametrize("physical", [False, True])
def test_sealed_records_decrypt_to_the_plain_runs_payloads(physical):
    kw = {"physical_wal": True, "snapshot_codec": "skip_garbage"} if physical else {}
    plain, sealed, segs, _ = sealed_and_plain(**kw)
    assert len(plain) == len(sealed) > 270
    salts = {seq: header(buf)[2] for seq, buf in segs.bufs.items()}
    spans = 0
    for (_, _, pw), (seq, off, sw) in zip(plain, sealed):
        assert sw[16] == pw[16]                                   # type
        assert len(sw) == len(pw) + 16
        assert struct.unpack_from("<I", sw, 4)[0] == len(sw)
        assert open_record(KEY, salts[seq], off, sw) == pw[17:]
        assert sw[17:-16] != pw[17:] or len(pw) == 17           # really encrypted
        spans += off // BLOCK != (off + len(sw) - 1) // BLOCK
    assert spans > 100
    types = {w[16] for _, _, w in sealed}
    assert {PUT, DELETE, COMMIT, CHECKPOINT, ROLLBACK} <= types
    if physical:
        assert {SNAP, DELTA} <= types


def test_sealed_end_lsn_and_chaining():
    _, sealed, segs, core = sealed_and_plain()
    seq, off, wire = sealed[-1]
    assert core.signals.wal_end_lsn == seq * SEG + logical(segs.bufs[seq], off, len(wire))[1]
    for s in sorted(segs.bufs)[1:]:
        prev = [r for r in sealed if r[0] == s - 1][-1]
        prev_end = prev[0] * SEG + logical(segs.bufs[s - 1], prev[1], len(prev[2]))[1]
        assert struct.unpack_from("<Q", segs.bufs[s], 32)[0] == prev_end


# ---- c) tampering --------------------------------------------------------------------

def test_a_flipped_ciphertext_byte_fails_the_crc_then_the_tag():
    _, sealed, segs, _ = sealed_and_plain()
    seq, off, wire = sealed[3]
    salt = header(segs.bufs[seq])[2]
    bad = bytearray(wire)
    bad[20] ^= 0x01
    assert crc32c.crc32c(bytes(bad[4:])) != struct.unpack_from("<I", bad)[0]
    struct.pack_into("<I", bad, 0, crc32c.crc32c(bytes(bad[4:])))
    with pytest.raises(InvalidTag):
        open_record(KEY, salt, off, bytes(bad))
    with pytest.raises(InvalidTag):                              # the nonce binds the offset
        open_record(KEY, salt, off + 1, wire)
    open_record(KEY, salt, off, wire)


# ---- d) attach and key rules ----------------------------------------------------------

def test_attach_without_a_header_checks_the_segment_is_sealed_with_this_key():
    plain = Segments()
    new_core(plain)
    core = _native.Core(4096, 4096 * 4096, 0, 0)
    core.format_new()
    core.wal_set_key(KEY, 3)
    with pytest.raises(ValueError, match="not a sealed"):
        core.wal_attach(plain.bufs[0], SEG, 0, BLOCK, 0, False)
    assert core.signals.wal_end_lsn == 0 and core.put(b"a", b"1") == 0   # nothing attached

    sealed = Segments()
    w = new_core(sealed, key=KEY, key_id=3)
    end = w.put(b"a", b"1")
    salt = header(sealed.bufs[0])[2]
    for key, key_id, what in [(KEY, 4, "key id"), (bytes(32), 3, "key check")]:
        other = _native.Core(4096, 4096 * 4096, 0, 0)
        other.format_new()
        other.wal_set_key(key, key_id)
        with pytest.raises(ValueError, match=what):
            other.wal_attach(sealed.bufs[0], SEG, 0, end, 0, False)
    # the right key goes on with the header's salt
    core.wal_attach(sealed.bufs[0], SEG, 0, end, 0, False)
    core.put(b"b", b"2")
    recs = walk(sealed, True)
    assert len(recs) == 2 and header(sealed.bufs[0])[2] == salt
    assert open_record(KEY, salt, recs[1][1], recs[1][2])[16:] == b"b2"


def test_plain_attach_refuses_a_sealed_segment():
    sealed = Segments()
    new_core(sealed, key=KEY)
    core = _native.Core(4096, 4096 * 4096, 0, 0)
    core.format_new()
    with pytest.raises(ValueError, match="no key"):
        core.wal_attach(sealed.bufs[0], SEG, 0, BLOCK, 0, False)


def test_wal_set_key_arguments():
    core = _native.Core(4096, 4096 * 4096, 0, 0)
    with pytest.raises(ValueError):
        core.wal_set_key(KEY[:31], 1)
    with pytest.raises(ValueError):
        core.wal_set_key(KEY + b"x", 1)
    with pytest.raises(ValueError):
        core.wal_set_key(KEY, 256)
    core.wal_set_key(KEY, 255)
    core.wal_set_key(b"", 0)                       # sealing off again
    segs = Segments()
    core.format_new()
    core.wal_attach(segs(0), SEG, 0, BLOCK, 0, True)
    with pytest.raises(ValueError, match="before wal_attach"):
        core.wal_set_key(KEY, 1)
    core.put(b"a", b"1")
    assert header(segs.bufs[0])[0] == 0
    ref = Segments()
    new_core(ref).put(b"a", b"1")
    assert segs.bufs[0] == ref.bufs[0]             # byte-identical to a never-keyed core
    core.wal_disable()
    core.wal_set_key(KEY, 1)                       # allowed once detached


def test_a_disabled_key_stops_sealing_on_the_next_attach():
    segs = Segments()
    core = _native.Core(4096, 4096 * 4096, 0, 0, wal_segment=segs)
    core.format_new()
    core.wal_set_key(KEY, 1)
    core.wal_set_key(KEY, 0)
    core.wal_attach(segs(0), SEG, 0, BLOCK, 0, True)
    core.put(b"a", b"1")
    assert header(segs.bufs[0])[0] == 0 and len(walk(segs, False)) == 1


# ---- sizes -----------------------------------------------------------------------------

def test_the_segment_limit_counts_the_tag():
    for key, payload, ok in [(None, DATA_BYTES - 17, True), (KEY, DATA_BYTES - 17, False),
                             (KEY, DATA_BYTES - 33, True)]:
        segs = Segments()
        core = new_core(segs, key=key)
        if ok:
            core.log_record(CHECKPOINT, b"p" * payload)
        else:
            with pytest.raises(errors.ValueTooLargeError):
                core.log_record(CHECKPOINT, b"p" * payload)


def phys_end(off, n):
    """Segment offset just past n record bytes written from off."""
    return logical(bytearray(SEG + 2 * BLOCK), off, n)[1]


def test_fast_path_put_that_fits_only_without_the_tag_is_rolled_back():
    """The put's plain record would end exactly where its END trailer ends at the
    segment end, the sealed one does not fit and no next segment exists: Retry, and
    the tree is unchanged (the unguarded fast path must not be taken on the
    plaintext length)."""
    k, v = b"key", b"v" * 100
    for key, tag in [(None, 0), (KEY, 16)]:
        segs = Segments(limit=1)
        core = new_core(segs, key=key)
        core.put(b"first", b"1")
        off = core.signals.wal_end_lsn
        target = SEG - END - (17 + 16 + len(k) + len(v))     # where the plain put must start
        n = target - off - BHDR * len(range(-(-off // BLOCK) * BLOCK, target, BLOCK))
        assert phys_end(off, n) == target
        core.log_record(CHECKPOINT, b"p" * (n - 17 - tag))
        assert core.signals.wal_end_lsn == target
        if key is None:
            core.put(k, v)
            assert core.signals.wal_end_lsn == SEG - END and core.get(k) == v
        else:
            with pytest.raises(_native.Retry):
                core.put(k, v)
            assert core.get(k) is None and core.get(b"first") == b"1"
            core.verify()


# ---- e) salts --------------------------------------------------------------------------

def test_every_segment_and_attach_draws_a_fresh_salt():
    salts = []
    for _ in range(2):
        segs = Segments()
        core = new_core(segs, key=KEY)
        for i in range(450):
            core.put(b"r%04d" % i, b"x" * 5000)
        assert len(segs.bufs) >= 3
        salts += [header(b)[2] for b in segs.bufs.values()]
    assert len(set(salts)) == len(salts)
