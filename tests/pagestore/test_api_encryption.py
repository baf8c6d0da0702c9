"""At-rest encryption through the public API: data opens only with its key;
a tampered byte or a wrong key is a typed error naming the file."""

import os

import pytest

import pagestore

KEY = bytes(range(32))
OPTS = dict(memory_size=8 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)


def fill(path, key):
    with pagestore.open(path, encryption_key=key, **OPTS) as db:
        db.put_many((b"k%05d" % i, b"secret-value-%05d" % i) for i in range(3000))


def test_encrypted_store_round_trips_and_hides_plaintext(tmp_path):
    path = tmp_path / "s"
    fill(path, KEY)
    with pagestore.open(path, encryption_key=KEY, **OPTS) as db:
        assert db[b"k00042"] == b"secret-value-00042"
        assert len(db) == 3000
    assert b"secret-value" not in (path / "pages.dat").read_bytes()
    for name in os.listdir(path / "cp"):
        assert b"secret-value" not in (path / "cp" / name).read_bytes()


def test_wrong_key_is_a_typed_error_naming_the_page_file(tmp_path):
    path = tmp_path / "s"
    fill(path, KEY)
    with pytest.raises(pagestore.EncryptionError) as e:
        with pagestore.open(path, encryption_key=bytes(32), **OPTS) as db:
            db.get(b"k00001")
    assert "pages.dat" in str(e.value)


def test_encrypted_store_opened_without_a_key_says_so_naming_the_file(tmp_path):
    path = tmp_path / "s"
    fill(path, KEY)
    with pytest.raises(pagestore.EncryptionError) as e:
        pagestore.open(path, **OPTS)
    assert "pages.dat" in str(e.value) and "encryption_key" in str(e.value)
    with pagestore.open(path, encryption_key=KEY, **OPTS) as db:   # and nothing was lost
        assert len(db) == 3000


def test_tampered_byte_is_a_typed_error_never_plaintext_garbage(tmp_path):
    path = tmp_path / "s"
    fill(path, KEY)
    raw = bytearray((path / "pages.dat").read_bytes())
    for off in range(4096 + 1000, len(raw), 4096):
        raw[off] ^= 1
    (path / "pages.dat").write_bytes(bytes(raw))
    with pytest.raises(pagestore.EncryptionError) as e:
        with pagestore.open(path, encryption_key=KEY, **OPTS) as db:
            for i in range(3000):
                assert db.get(b"k%05d" % i) == b"secret-value-%05d" % i
    assert "pages.dat" in str(e.value)
