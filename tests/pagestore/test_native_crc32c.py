"""CRC32C of the C core: known vectors, hardware == software == the crc32c
package, chaining, and the page seal/check helpers built on it."""

import os
import random

import crc32c as crc32c_pkg
import pytest

from pagestore import _native
from pagestore._native import testing


@pytest.mark.parametrize("fn", [testing.crc32c, testing.crc32c_software])
def test_crc32c_matches_known_vectors(fn):
    assert fn(b"123456789") == 0xE3069283
    assert fn(b"") == 0
    assert fn(b"\x00" * 32) == 0x8A9136AA
    assert fn(b"\xff" * 32) == 0x62A8AB43
    assert fn(bytes(range(32))) == 0x46DD794E


def test_crc32c_hardware_software_and_package_agree_on_any_length_and_alignment():
    rng = random.Random(7)
    blob = os.urandom(20000)
    for _ in range(400):
        a = rng.randrange(0, 64)
        n = rng.choice([0, 1, 3, 7, 8, 9, 31, 32, 33, 100, 4095, 4096, rng.randrange(0, 19000)])
        data = blob[a:a + n]
        want = crc32c_pkg.crc32c(data)
        assert testing.crc32c(data) == want
        assert testing.crc32c_software(data) == want


def test_crc32c_chains_like_zlib():
    data = os.urandom(10000)
    for cut in (0, 1, 17, 4096, 9999):
        assert testing.crc32c(data[cut:], testing.crc32c(data[:cut])) == testing.crc32c(data)
        assert testing.crc32c_software(data[cut:], testing.crc32c_software(data[:cut])) == \
            testing.crc32c(data)


def test_sealed_page_passes_check_and_any_flipped_bit_fails_it():
    page = bytearray(os.urandom(4096))
    _native.seal_page(page, 77, 4096)
    assert _native.check_page(page, 77)
    assert not _native.check_page(page, 78)          # wrong page id
    rng = random.Random(3)
    for _ in range(50):
        bad = bytearray(page)
        bit = rng.randrange(4096 * 8)
        bad[bit // 8] ^= 1 << (bit % 8)
        assert not _native.check_page(bad, 77)


def test_page_crc_covers_the_page_with_the_crc_field_zeroed():
    page = bytearray(os.urandom(1024))
    _native.seal_page(page, 5, 1024)
    zeroed = bytes(4) + bytes(page[4:])
    assert int.from_bytes(page[:4], "little") == crc32c_pkg.crc32c(zeroed)
