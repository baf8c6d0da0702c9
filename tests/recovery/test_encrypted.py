"""Encrypted recovery files: sealed records restore exactly, and nothing else opens."""

import os
import struct

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pagestore.checkpoint.format import RECORD_HEADER, RecoveryFileCorrupt, record_crc
from pagestore.checkpoint.markers import scan
from tests.support.checkpoint_fakes import Harness
from pagestore.recovery import recover

PS = 4096
N = 32


class AuthError(Exception):
    pass


class GcmCipher:
    """The record half of pagestore.cipher.Cipher's interface (seal / open, no bulk sealing in C)."""

    bulk = False

    def __init__(self, key: bytes):
        self.aes = AESGCM(key)

    def seal(self, data, context: bytes) -> bytes:
        nonce = os.urandom(12)
        return b"\x01" + nonce + self.aes.encrypt(nonce, bytes(data), context)

    def open(self, sealed, context: bytes, path) -> bytes:
        try:
            return self.aes.decrypt(bytes(sealed[1:13]), bytes(sealed[13:]), context)
        except InvalidTag:
            raise AuthError(f"{path}: authentication failed") from None


KEY = GcmCipher(bytes(range(32)))


def _interrupted(compression="skip_garbage"):
    h = Harness(N, PS, 1, compression=compression, cipher=KEY)
    h.modify(range(N))
    assert h.checkpoint(crash_at="checkpoint.page_written", hit=2) is None
    h.power_loss(3)
    return h


def _biggest_file(h):
    files = scan(h.fs, "/db/cp").recovery[1]
    name = max(files.values(), key=lambda n: h.fs.size("/db/cp/" + n))
    return "/db/cp/" + name


def _rewrite(h, path, fn):
    f = h.fs.open(path)
    data = bytearray(f.pread(f.size(), 0))
    f.close()
    fn(data)
    f = h.fs.open(path, truncate=True)
    f.pwrite(bytes(data), 0)
    f.fsync()
    f.close()


def _records(data):
    at, out = 32, []
    while at < len(data):
        pid, codec, flags, n, crc = RECORD_HEADER.unpack_from(data, at)
        out.append((at, pid, n))
        at += 18 + n
    return out


@pytest.mark.parametrize("compression", ["disabled", "skip_garbage", "zstd"])
def test_encrypted_recovery_files_restore_pages_exactly(compression):
    h = _interrupted(compression)
    r = recover(h.fs, "/db", h.sink, page_size=PS, cipher=KEY)
    assert r.action == "restore" and h.disk() == h.images[1]


def test_encrypted_recovery_files_hold_no_page_plaintext():
    h = _interrupted("disabled")
    blob = b"".join(h.fs.open("/db/cp/" + n).pread(1 << 20, 0) for n in scan(h.fs, "/db/cp").recovery[1].values())
    assert not any(h.images[1][p][40:72] in blob for p in range(N))


def test_changed_sealed_byte_fails_authentication_even_with_a_fixed_crc():
    h = _interrupted()
    path = _biggest_file(h)

    def tamper(data):
        at, pid, n = _records(data)[0]
        data[at + 18 + 20] ^= 1
        struct.pack_into("<I", data, at + 14, record_crc(bytes(data[at:at + 14]), bytes(data[at + 18:at + 18 + n])))
    _rewrite(h, path, tamper)
    with pytest.raises(AuthError, match=path):
        recover(h.fs, "/db", h.sink, page_size=PS, cipher=KEY)


def test_relabelled_page_id_fails_authentication():
    h = _interrupted()
    path = _biggest_file(h)

    def relabel(data):
        at, pid, n = _records(data)[0]
        struct.pack_into("<Q", data, at, pid ^ 1)
        struct.pack_into("<I", data, at + 14, record_crc(bytes(data[at:at + 14]), bytes(data[at + 18:at + 18 + n])))
    _rewrite(h, path, relabel)
    with pytest.raises(AuthError):
        recover(h.fs, "/db", h.sink, page_size=PS, cipher=KEY)


def test_encrypted_records_without_a_key_are_refused_naming_the_file():
    h = _interrupted()
    with pytest.raises(RecoveryFileCorrupt, match="record is encrypted") as e:
        recover(h.fs, "/db", h.sink, page_size=PS)
    assert e.value.path.startswith("/db/cp/")


def test_plain_records_in_an_encrypted_store_are_refused():
    h = Harness(N, PS, 1)
    h.modify(range(N))
    h.checkpoint(crash_at="checkpoint.after_start_marker")
    h.power_loss(0, "keep")
    with pytest.raises(RecoveryFileCorrupt, match="not encrypted"):
        recover(h.fs, "/db", h.sink, page_size=PS, cipher=KEY)


def test_wrong_key_fails_authentication():
    h = _interrupted()
    with pytest.raises(AuthError):
        recover(h.fs, "/db", h.sink, page_size=PS, cipher=GcmCipher(bytes(32)))
