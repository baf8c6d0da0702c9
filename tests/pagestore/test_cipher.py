"""Rules of at-rest encryption (pagestore/cipher.py, docs/encryption.md)."""

import os
import random
import threading
import time

import pytest

from pagestore.cipher import (PAGE_RESERVE, RECORD_OVERHEAD, Cipher, add_key,
                              load_key_file)
from pagestore.errors import ConfigError, EncryptionError

PATH = "/store/pages.dat"
KEY1 = bytes(range(32))
KEY2 = bytes(range(100, 132))


def plain_page(size=4096, seed=0):
    rnd = random.Random(seed)
    return bytes(rnd.getrandbits(8) for _ in range(size - PAGE_RESERVE)) + bytes(PAGE_RESERVE)


@pytest.fixture
def c1():
    return Cipher.from_option(KEY1)


def test_page_round_trip_keeps_size_and_hides_plaintext(c1):
    for size in (1024, 4096, 16384):
        plain = plain_page(size, seed=size)
        sealed = c1.seal_page(memoryview(plain), 7)
        assert len(sealed) == size
        assert plain[64:128] not in sealed
        assert sealed[size - PAGE_RESERVE] == 1          # key id in the trailer
        assert sealed[size - PAGE_RESERVE + 1:size - PAGE_RESERVE + 4] == b"\0\0\0"
        assert c1.open_page(sealed, 7, PATH) == plain


def test_record_round_trip_adds_overhead(c1):
    for data in (b"", b"x", os.urandom(5000)):
        sealed = c1.seal(data, b"cp-1 page 3")
        assert len(sealed) == len(data) + RECORD_OVERHEAD == len(data) + c1.overhead
        assert c1.open(sealed, b"cp-1 page 3", "/store/cp/r.dat") == data


def test_two_seals_of_one_page_use_different_nonces(c1):
    plain = plain_page()
    a, b = c1.seal_page(plain, 3), c1.seal_page(plain, 3)
    assert a[-28:-16] != b[-28:-16] and a != b


def test_wrong_key_raises_encryption_error_naming_the_file(c1):
    other = Cipher.from_option(KEY2)                       # also key id 1
    sealed = c1.seal_page(plain_page(), 4)
    with pytest.raises(EncryptionError) as e:
        other.open_page(sealed, 4, PATH)
    assert e.value.path == PATH and PATH in str(e.value) and "page 4" in str(e.value)
    with pytest.raises(EncryptionError, match="pages.dat.*key") as e:
        other.open_header(c1.seal_page(plain_page(), 0), PATH)
    assert e.value.path == PATH
    rec = c1.seal(b"recovery data", b"ctx")
    with pytest.raises(EncryptionError) as e:
        other.open(rec, b"ctx", "/store/cp/r.dat")
    assert e.value.path == "/store/cp/r.dat" and "/store/cp/r.dat" in str(e.value)


def test_every_single_byte_tamper_in_a_sealed_page_is_detected(c1):
    plain = plain_page()
    sealed = c1.seal_page(plain, 9)
    u = len(sealed) - PAGE_RESERVE
    rnd = random.Random(1)
    positions = sorted({0, 1, 7, 8, 31, u // 2, u - 1, *rnd.sample(range(u), 40),
                        *range(u, len(sealed))})              # every trailer byte
    for pos in positions:
        for flip in (0x01, 0x80, 0xFF):
            bad = bytearray(sealed)
            bad[pos] ^= flip
            with pytest.raises(EncryptionError, match="page 9"):
                c1.open_page(bytes(bad), 9, PATH)
    assert c1.open_page(sealed, 9, PATH) == plain


def test_every_single_byte_tamper_in_a_sealed_record_is_detected(c1):
    sealed = c1.seal(os.urandom(100), b"ctx")
    for pos in range(len(sealed)):
        bad = bytearray(sealed)
        bad[pos] ^= 0x40
        with pytest.raises(EncryptionError):
            c1.open(bytes(bad), b"ctx", PATH)
    with pytest.raises(EncryptionError):
        c1.open(sealed[:-1], b"ctx", PATH)
    with pytest.raises(EncryptionError):
        c1.open(sealed[:RECORD_OVERHEAD - 1], b"ctx", PATH)


def test_page_swap_is_detected(c1):
    p5, p6 = plain_page(seed=5), plain_page(seed=6)
    s5, s6 = c1.seal_page(p5, 5), c1.seal_page(p6, 6)
    with pytest.raises(EncryptionError, match="page 6"):
        c1.open_page(s5, 6, PATH)
    with pytest.raises(EncryptionError, match="page 5"):
        c1.open_page(s6, 5, PATH)
    # a page of another file context, or a record posing as a page, does not open either
    other_file = Cipher.from_option(KEY1, page_context=b"index.dat")
    with pytest.raises(EncryptionError):
        other_file.open_page(s5, 5, PATH)
    with pytest.raises(EncryptionError):
        c1.open(c1.seal(b"abc", b"ctx"), b"ctx2", PATH)


def test_all_zero_page_slot_is_an_encryption_error(c1):
    with pytest.raises(EncryptionError, match="never sealed") as e:
        c1.open_page(bytes(4096), 12, PATH)
    assert e.value.path == PATH and "page 12" in str(e.value)
    with pytest.raises(EncryptionError, match="never sealed"):
        c1.open(bytes(64), b"ctx", PATH)


def test_plain_page_with_nonzero_reserve_is_refused(c1):
    page = bytearray(plain_page())
    page[-1] = 1
    with pytest.raises(ValueError):
        c1.seal_page(page, 1)


def test_rotation_old_pages_open_and_new_seals_use_the_new_key(tmp_path):
    kf = str(tmp_path / "keys")
    assert add_key(kf, KEY1) == 1
    assert os.stat(kf).st_mode & 0o777 == 0o600
    old = Cipher.from_option(kf)
    assert old.key_id == 1
    plain = plain_page()
    s_old = old.seal_page(plain, 2)
    r_old = old.seal(b"rec", b"ctx")
    # the raw 32-byte option is key id 1 of a key file holding the same key
    assert Cipher.from_option(KEY1).open_page(s_old, 2, PATH) == plain

    assert add_key(kf) == 2
    new = Cipher.from_option(kf)
    assert new.key_id == 2 and new.key_ids == [1, 2]
    assert new.open_page(s_old, 2, PATH) == plain
    assert new.open(r_old, b"ctx", PATH) == b"rec"
    s_new = new.seal_page(plain, 2)
    assert s_new[-PAGE_RESERVE] == 2 and new.seal(b"x", b"c")[0] == 2
    assert new.open_page(s_new, 2, PATH) == plain
    with pytest.raises(EncryptionError, match="key id 2"):   # the old key set cannot open it
        old.open_page(s_new, 2, PATH)
    # once key 1 is dropped from the file, its pages name the missing id
    with open(kf) as f:
        lines = f.readlines()
    with open(kf, "w") as f:
        f.write(lines[1])
    with pytest.raises(EncryptionError, match="key id 1"):
        Cipher.from_option(kf).open_page(s_old, 2, PATH)


HEX = KEY1.hex()


@pytest.mark.parametrize("content", [
    "", "# only a comment\n\n", f"1 {HEX[:-2]}\n", f"1 {HEX}00\n", f"1 {HEX[:-1]}g\n",
    f"0 {HEX}\n", f"256 {HEX}\n", f"-1 {HEX}\n", f"x {HEX}\n", f"1 {HEX}\n1 {HEX}\n",
    f"1 {HEX} extra\n", "1\n", f"1 {HEX}\n2 é{HEX[1:]}\n",
], ids=["empty", "comment-only", "short-hex", "long-hex", "non-hex", "id-0", "id-256",
        "id-negative", "id-text", "duplicate-id", "three-fields", "one-field", "non-ascii"])
def test_malformed_key_file_raises_config_error_naming_encryption_key(tmp_path, content):
    kf = tmp_path / "keys"
    kf.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        Cipher.from_option(str(kf))
    assert e.value.option == "encryption_key" and "encryption_key" in str(e.value)
    assert str(kf) in str(e.value)
    assert HEX[:16] not in str(e.value)                      # no key material in messages


@pytest.mark.parametrize("value", [b"short", bytes(33), 12345, None])
def test_bad_raw_option_raises_config_error(value, tmp_path):
    with pytest.raises(ConfigError) as e:
        Cipher.from_option(value)
    assert e.value.option == "encryption_key"
    with pytest.raises(ConfigError) as e:
        Cipher.from_option(str(tmp_path / "missing"))
    assert e.value.option == "encryption_key"


def test_key_file_with_comments_and_last_line_current(tmp_path):
    kf = tmp_path / "keys"
    kf.write_text(f"# rotated 2026-01\n3 {KEY2.hex()}\n\n  1 {HEX.upper()}  \n")
    keys, current = load_key_file(str(kf))
    assert keys == {3: KEY2, 1: KEY1} and current == 1
    assert "00010203" not in repr(Cipher(keys, current))


def test_header_of_a_smaller_page_size_opens_so_the_mismatch_can_be_reported(c1):
    # a file created with 2048-byte pages, read as 4096 bytes because page_size=8192 was asked
    head = c1.seal_page(plain_page(2048, seed=1), 0) + c1.seal_page(plain_page(2048, seed=2), 1)
    assert c1.open_header(head, PATH) == plain_page(2048, seed=1)
    assert c1.open_header(head[:2048], PATH) == plain_page(2048, seed=1)


def test_page_file_through_diskio_names_the_file(tmp_path, c1):
    from pagestore.diskio import PosixFS
    from pagestore.pagefile import PageFile
    from pagestore._native import seal_page
    pf = PageFile(PosixFS(), str(tmp_path), 4096, c1)
    pages = []
    for i in range(4):                  # valid page images: the page file checks them too
        img = bytearray(plain_page(seed=i))
        seal_page(img, i)
        pages.append(bytes(img))
    pf.write_pages([0, 1, 3], b"".join((pages[0], pages[1], pages[3])))   # page 2 never written
    pf.sync()
    buf = bytearray(4096)
    pf.read_page(3, buf)
    assert bytes(buf) == pages[3]
    with pytest.raises(EncryptionError, match="never sealed") as e:
        pf.read_page(2, buf)
    assert e.value.path == pf.path and "pages.dat" in str(e.value)
    at = 1 * 4096 + 100                  # tamper page 1 on disk: flip a byte (a constant
    old = pf.file.pread(1, at)           # byte equals the sealed one there once in 256 runs)
    pf.file.pwrite(bytes([old[0] ^ 0xFF]), at)
    with pytest.raises(EncryptionError, match="pages.dat: page 1"):
        pf.read_page(1, buf)
    pf.close()


def test_concurrent_seal_and_open_from_threads(c1):
    errors = []

    def work(t):
        try:
            for i in range(300):
                plain = plain_page(1024, seed=t * 1000 + i % 5)
                assert c1.open_page(c1.seal_page(plain, i), i, PATH) == plain
        except Exception as e:                               # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_sealing_cost_per_4k_page(c1):
    """Reports the cost (no assertion on time: this machine is shared and noisy)."""
    plain = memoryview(plain_page())
    n, best_seal, best_open = 5000, float("inf"), float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for i in range(n):
            sealed = c1.seal_page(plain, i)
        t1 = time.perf_counter()
        for i in range(n):
            c1.open_page(sealed, n - 1, PATH)
        t2 = time.perf_counter()
        best_seal, best_open = min(best_seal, (t1 - t0) / n), min(best_open, (t2 - t1) / n)
    print(f"\nAES-256-GCM 4 KiB page: seal {best_seal * 1e6:.2f} µs, "
          f"open {best_open * 1e6:.2f} µs, seal+open {(best_seal + best_open) * 1e6:.2f} µs per page")
    assert c1.open_page(sealed, n - 1, PATH) == bytes(plain)
