"""Damaged files are reported by name, as the damage they are: never taken for
a blank WAL slot, for a page-size option, for encryption, or left unnamed.
(Found by a damage review; each case below failed before its fix.)"""

import glob
import os
import struct

import pytest

import pagestore

OPTS = dict(memory_size=8 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)


def _seg_seq(path):
    with open(path, "rb") as f:
        h = f.read(32)
    return int.from_bytes(h[24:32], "little") if h[:8] == b"PSWALSEG" else -1


def test_a_wal_segment_with_a_zeroed_header_is_damage_set_aside_not_a_blank_slot(tmp_path):
    p = str(tmp_path / "s")
    db = pagestore.open(p, **OPTS)
    for i in range(6000):                         # ~2 MiB of WAL: three segments
        db.put(b"b%06d" % i, b"y" * 300)
    db._abandon()
    last = max(glob.glob(p + "/wal/seg-*.wal"), key=_seg_seq)
    with open(last, "r+b") as f:
        f.write(bytes(4096))                      # the header block only
    with pytest.warns(UserWarning):
        db = pagestore.open(p, **OPTS)
    try:
        assert [d["file"] for d in db.recovery["wal_damage"]] == [last]
        assert glob.glob(last + ".tail-*"), "the damaged slot must be set aside, not reused"
    finally:
        db.close()
    db = pagestore.open(p, **OPTS)                # blank spare slots are no damage
    assert db.recovery["wal_damage"] == [] and db.recovery["wal_gaps"] == []
    db.close()


def _store(p, n=3000, **extra):
    db = pagestore.open(p, **OPTS, **extra)
    for i in range(n):
        db.put(b"key%08d" % i, (b"v%08d-" % i) * (1 + i % 7))
    db.close()


def test_a_damaged_page_size_field_is_corruption_of_the_page_file(tmp_path):
    p = str(tmp_path / "s")
    _store(p)
    with pytest.raises(pagestore.ConfigError):    # a real mismatch stays the caller's option
        pagestore.open(p, **OPTS, page_size=8192)
    with open(p + "/pages.dat", "r+b") as f:      # meta page: page_size u32 at offset 44
        f.seek(45)
        b = f.read(1)
        f.seek(45)
        f.write(bytes([b[0] ^ 1]))                # 4096 -> 4352
    with pytest.raises(pagestore.CorruptionError) as e:
        pagestore.open(p, **OPTS)
    assert e.value.path == p + "/pages.dat" and not isinstance(e.value, pagestore.ConfigError)


def _trailer_like(page):
    """A seal trailer's pattern (key id 1..255, three zero bytes, 32 bytes from
    a page end) inside an ordinary plaintext page: a leaf cell's lengths."""
    return any(s <= len(page) and page[s - 32] >= 1 and page[s - 31:s - 28] == b"\0\0\0"
               for s in (1024, 2048, 4096))


def test_a_plaintext_page_over_page_0_is_corruption_not_encryption(tmp_path):
    p = str(tmp_path / "s")
    _store(p, n=20000)
    data = open(p + "/pages.dat", "rb").read()
    ps = 4096
    victim = next(i for i in range(1, len(data) // ps)
                  if struct.unpack_from("<H", data, i * ps + 4)[0] == 2 and _trailer_like(data[i * ps:(i + 1) * ps]))
    with open(p + "/pages.dat", "r+b") as f:
        f.write(data[victim * ps:(victim + 1) * ps])
    with pytest.raises(pagestore.CorruptionError) as e:
        pagestore.open(p, **OPTS)
    assert not isinstance(e.value, pagestore.EncryptionError)
    assert e.value.path == p + "/pages.dat"


def test_a_wal_mode_restore_that_meets_wal_damage_names_the_segment(tmp_path):
    p = str(tmp_path / "s")
    o = dict(OPTS, recovery_data="wal")
    db = pagestore.open(p, **o)
    for c in range(3):
        for i in range(c * 6000, (c + 1) * 6000):
            db.put(b"key%08d" % i, (b"v%08d-" % i) * (1 + i % 7))
        db.checkpoint()
    db._abandon()
    last_end = sorted(glob.glob(p + "/cp/*-END.bin"))[-1]
    os.remove(last_end)                           # as if killed just before END
    raw = open(last_end.replace("END", "START"), "rb").read()
    wal_lsn, prev = int.from_bytes(raw[24:32], "little"), int.from_bytes(raw[40:48], "little")
    seq, off = divmod((prev + wal_lsn) // 2, 1 << 20)   # inside the checkpoint's page records
    victim = next(f for f in glob.glob(p + "/wal/seg-*.wal") if _seg_seq(f) == seq)
    with open(victim, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 1]))
    with pytest.warns(UserWarning), pytest.raises(pagestore.CorruptionError) as e:
        pagestore.open(p, **o)
    assert e.value.path == victim and victim in str(e.value)
