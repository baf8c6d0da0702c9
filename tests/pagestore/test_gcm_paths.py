"""Both AES-256-GCM sealing paths of the C core give `cryptography`'s bytes.

Records, pages and recovery-file records are sealed through aesni.c (AES-NI
block cipher under libcrypto's CRYPTO_gcm128 mode) where it loads, else
through EVP; everything is opened through EVP and by the Python reference.
Same key, nonce and associated data must give the same ciphertext and tag.
"""

import random

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pagestore._native import ffi, lib

pytestmark = pytest.mark.skipif(not lib.ps_wal_seal_available(), reason="no libcrypto.so")

SIZES = [0, 1, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 79, 80, 127, 130, 150, 4064, 4096, 10_000]


def _seal(key, iv, aad, data, fast):
    out, tag = ffi.new("uint8_t[]", max(1, len(data))), ffi.new("uint8_t[16]")
    rc = lib.ps_gcm_seal(key, iv, aad, len(aad), data, len(data), out, tag, fast)
    assert rc == 0
    return bytes(ffi.buffer(out, len(data))) + bytes(ffi.buffer(tag, 16))


@pytest.mark.parametrize("fast", [0, 1])
def test_every_length_and_aad_seals_to_cryptographys_bytes(fast):
    if fast and not lib.ps_gcm_fast_available():
        pytest.skip("no AES-NI or no CRYPTO_gcm128 in libcrypto: EVP only")
    rng = random.Random(fast)
    for n in SIZES + [rng.randrange(0, 5000) for _ in range(200)]:
        key, iv = rng.randbytes(32), rng.randbytes(12)
        aad, data = rng.randbytes(rng.choice([0, 1, 12, 16, 57, 99])), rng.randbytes(n)
        assert _seal(key, iv, aad, data, fast) == AESGCM(key).encrypt(iv, data, aad), (n, len(aad))


def test_the_counter_carries_across_its_low_bytes():
    """A nonce whose 32-bit block counter wraps its low byte inside one record."""
    if not lib.ps_gcm_fast_available():
        pytest.skip("EVP only")
    key, aad, data = bytes(range(32)), b"ad", bytes(range(256)) * 40
    for tail in (b"\x00\x00\x00", b"\xff\xff\xf0"):
        iv = bytes(9) + tail
        assert _seal(key, iv, aad, data, 1) == AESGCM(key).encrypt(iv, data, aad)


def test_new_contexts_can_be_held_to_evp():
    """ps_gcm_set_fast(0) (what tests use to compare paths) still seals correctly."""
    lib.ps_gcm_set_fast(0)
    try:
        key, iv = bytes(32), bytes(12)
        assert _seal(key, iv, b"", b"x" * 100, 0) == AESGCM(key).encrypt(iv, b"x" * 100, b"")
    finally:
        lib.ps_gcm_set_fast(1)
