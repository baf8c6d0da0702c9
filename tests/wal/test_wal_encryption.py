"""Encrypted WAL segments (wal/recseal.py), sealed here by the Python sealer the
store falls back to without libcrypto: no plaintext on disk, the right key
replays everything, a wrong or missing key is a typed error naming the file,
a changed byte or a torn write never replays garbage and loses nothing synced."""

from __future__ import annotations

import os
import random
import struct
import sys

import pytest
from crc32c import crc32c

from pagestore.diskio import SimFS
from pagestore.cipher import Cipher, add_key
from pagestore.errors import EncryptionError
from pagestore.wal import WalRecoveryWarning, iter_archive
from pagestore.wal.compact import compact, list_archive, read_file
from pagestore.wal.format import BLOCK, decode_segment_header
from pagestore.wal.recseal import SEALED_RECORDS, NoKeyError

sys.path.insert(0, os.path.dirname(__file__))
from wal_testkit import SMALL, Harness, kv, open_fresh  # noqa: E402

KEY = bytes(range(32))
C = Cipher({1: KEY}, 1)
MARK = b"DISTINCTIVE-VALUE"
D = "/db/wal"


def write(fs, n=120, cipher=C, **kw):
    """A closed WAL of n records over several SMALL segments; returns what was written."""
    h = open_fresh(fs, cipher=cipher, **kw)
    written = [(b"key-%04d" % i, MARK + bytes([i % 251]) * (i * 37 % 1500)) for i in range(n)]
    for k, v in written:
        h.put(k, v)
    h.wal.close()
    return written


def files(fs, d=D):
    return {f"{d}/{n}": read_file(fs, f"{d}/{n}") for n in sorted(fs.listdir(d)) if n != "NEWEST"}


def by_seq(fs):
    out = {}
    for path, raw in files(fs).items():
        h = decode_segment_header(raw)
        if h is not None:
            out[h.seq] = path
    return out


def recover(fs, cipher=C, quiet=True):
    return Harness(fs, cipher=cipher).recover(0, quiet=quiet)


def test_sealed_segment_files_hold_no_plaintext_and_the_plain_ones_do():
    plain_fs, sealed_fs = SimFS(), SimFS()
    write(plain_fs, cipher=None)
    write(sealed_fs)
    assert any(MARK in raw for raw in files(plain_fs).values())   # the search finds it when it is there
    sealed = files(sealed_fs)
    assert len(sealed) >= 3
    for path, raw in sealed.items():
        if decode_segment_header(raw) is None:
            assert not any(raw), path                # the spare slot, never written
            continue
        assert MARK not in raw and b"key-00" not in raw, path
        assert len(raw) == SMALL
        assert decode_segment_header(raw).flags == SEALED_RECORDS


def test_reopen_with_the_right_key_replays_every_record():
    fs = SimFS()
    written = write(fs)
    assert kv(recover(fs)) == written


def test_wrong_key_raises_encryption_error_naming_the_wal_file():
    fs = SimFS()
    write(fs)
    with pytest.raises(EncryptionError) as e:
        recover(fs, Cipher({1: bytes(32)}, 1))
    assert e.value.path.startswith(D + "/seg-") and e.value.path in str(e.value)


def test_no_key_raises_naming_the_wal_file():
    fs = SimFS()
    write(fs)
    with pytest.raises(NoKeyError) as e:
        recover(fs, None)
    assert e.value.path.startswith(D + "/seg-") and "encrypted" in str(e.value)


def test_key_rotation_old_segments_open_with_the_old_id_new_seals_use_the_new_one(tmp_path):
    keyfile = str(tmp_path / "keys")
    add_key(keyfile)
    fs = SimFS()
    first = write(fs, 60, Cipher.from_option(keyfile))
    old = set(by_seq(fs).values())
    add_key(keyfile)
    rotated = Cipher.from_option(keyfile)
    assert rotated.key_id == 2
    h = Harness(fs, cipher=rotated)
    assert kv(h.recover(0)) == first
    h.start()
    second = [(b"new-%04d" % i, MARK * 20) for i in range(60)]
    for k, v in second:
        h.put(k, v)
    h.wal.close()
    kids = {path: raw[44] for path, raw in files(fs).items() if decode_segment_header(raw)}
    assert {kids[p] for p in old} == {1}
    assert {kid for p, kid in kids.items() if p not in old} == {2}
    assert kv(recover(fs, rotated)) == first + second
    with pytest.raises(EncryptionError) as e:        # the new key alone cannot open the old segments
        recover(fs, Cipher({2: Cipher.from_option(keyfile)._aes and _key(keyfile, 2)}, 2))
    assert "key id 1" in str(e.value)


def _key(keyfile, kid):
    from pagestore.cipher import load_key_file
    return load_key_file(keyfile)[0][kid]


def test_a_changed_ciphertext_byte_under_a_valid_crc_fails_authentication_and_stops_replay():
    fs = SimFS()
    written = write(fs)
    recs = recover(fs)
    segs = by_seq(fs)
    seq = sorted(segs)[1]
    # a record inside one block, so its stored bytes are contiguous in the file
    victim = next(r for r in recs if r.lsn // SMALL == seq and r.lsn % SMALL > 5 * BLOCK
                  and r.lsn % BLOCK + len(r.raw) + 16 <= BLOCK)
    o = victim.lsn % SMALL
    f = fs.open(segs[seq])
    length = struct.unpack_from("<I", f.pread(8, o), 4)[0]
    stored = bytearray(f.pread(length, o))
    stored[17 + 3] ^= 0x20                           # a sealed payload byte
    struct.pack_into("<I", stored, 0, crc32c(bytes(stored[4:])))   # the crc holds: only the tag can tell
    f.pwrite(bytes(stored), o)
    f.fsync()
    f.close()
    h = Harness(fs, cipher=C)
    with pytest.warns(WalRecoveryWarning) as caught:
        got = h.recover(0, quiet=False)
    expected = [r for r in recs if r.end_lsn <= victim.lsn]
    assert 0 < len(expected) < len(written)
    assert kv(got) == kv(expected)                   # a prefix: nothing after the damage, no garbage
    msgs = [str(w.message) for w in caught]
    assert any(segs[seq] in m and "does not authenticate" in m for m in msgs), msgs


def test_torn_rewrite_of_the_last_block_loses_nothing_synced():
    torn = 0
    for seed in range(40):
        fs = SimFS()
        h = open_fresh(fs, mode="log_only", cipher=C)
        rng = random.Random(seed)
        written = [(b"k%03d" % i, MARK + rng.randbytes(rng.randint(10, 400))) for i in range(30)]
        for k, v in written[:20]:
            h.put(k, v)
        h.wal.flush()                                # records 0..19 are durable
        for k, v in written[20:]:
            h.put(k, v)                              # published (pwrites of the partial block), not synced
        h.wal.abandon()
        report = fs.crash(random.Random(seed), "random")
        torn += report.torn + report.garbage + report.cut
        got = kv(recover(fs))
        assert got == written[:len(got)] and len(got) >= 20, (seed, len(got))
    assert torn > 0                                  # the crash model did damage some rewrites


def test_plain_segments_are_still_read_by_an_encrypted_wal_and_new_ones_are_sealed():
    fs = SimFS()
    first = write(fs, 40, cipher=None)
    h = Harness(fs, cipher=C)
    assert kv(h.recover(0)) == first
    h.start()
    second = [(b"z%03d" % i, MARK) for i in range(40)]
    for k, v in second:
        h.put(k, v)
    h.wal.close()
    flags = {decode_segment_header(raw).flags for raw in files(fs).values() if decode_segment_header(raw)}
    assert flags == {0, SEALED_RECORDS}
    assert kv(recover(fs)) == first + second


def test_reused_plain_slot_is_zeroed_before_it_holds_a_sealed_segment():
    fs, S = SimFS(), 1 << 20                          # the size stores use: zero fill starts at S
    first = [(b"p%04d" % i, MARK * 1200) for i in range(150)]
    h = open_fresh(fs, segment_size=S)
    for k, v in first:
        h.put(k, v)
    h.wal.close()
    plain_slots = set(files(fs))
    h = Harness(fs, cipher=C, segment_size=S)
    recs = h.recover(0)
    assert kv(recs) == first
    h.start()
    h.wal.trim(recs[-1].end_lsn)                     # every plain segment becomes reusable
    for i in range(160):
        h.put(b"n%04d" % i, b"x" * 20000)
    h.wal.close()
    reused = {p for p, raw in files(fs).items() if p in plain_slots and decode_segment_header(raw)
              and decode_segment_header(raw).flags == SEALED_RECORDS}
    assert reused
    for path in reused:                              # the plain records it held are gone
        assert MARK not in read_file(fs, path), path


def test_direct_io_with_a_key_is_refused_naming_the_option():
    with pytest.raises(ValueError) as e:
        Harness(SimFS(), cipher=C, direct=True)
    assert "wal_direct" in str(e.value)


def test_archive_and_compaction_keep_the_wal_encrypted_and_read_back_with_the_key():
    fs = SimFS()
    h = open_fresh(fs, cipher=C, archive="/arch", archive_size=1 << 30)
    h.wal._archive.compact_after = 0                 # compacted below, synchronously
    written = [(b"key-%04d" % i, MARK + b"x" * 700) for i in range(300)]
    for k, v in written:
        h.put(k, v)
    end = h.writer.end_lsn
    h.wal.flush()
    h.wal.trim(end - end % SMALL)                   # every full segment goes to the archive
    h.wal.close()
    plain = [p for _f, _l, kind, p in list_archive(fs, "/arch") if kind == "wal"]
    assert len(plain) >= 3
    assert all(MARK not in read_file(fs, p) for p in plain)
    before = kv(iter_archive(fs, "/arch", 0, cipher=C))
    assert before == written[:len(before)] and len(before) > 100
    st = compact("/arch", fs=fs, cipher=C)
    assert st["rounds"] >= 1
    packed = [p for _f, _l, kind, p in list_archive(fs, "/arch") if kind == "walc"]
    assert packed and all(MARK not in read_file(fs, p) for p in packed)
    assert all(struct.unpack_from("<B", read_file(fs, p), 11)[0] == 1 for p in packed)
    assert kv(iter_archive(fs, "/arch", 0, cipher=C)) == before
    with pytest.raises(NoKeyError):
        list(iter_archive(fs, "/arch", 0))
    with pytest.raises(EncryptionError):
        list(iter_archive(fs, "/arch", 0, cipher=Cipher({1: bytes(32)}, 1)))
