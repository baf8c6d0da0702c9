"""What the C core seals in bulk (pageseal.c) opens with the reference cipher.

pagestore/cipher.py seals one page or record at a time and is the format's
reference; the checkpoint's writer threads seal whole chunks in C without the
GIL. Nonces are random, so the two cannot be compared byte for byte: instead
everything sealed in C must open, bound to the same associated data, with the
reference, and record headers must match the reference writer's field by field.
"""

import random

import pytest

from pagestore import diskio
from pagestore.checkpoint.compression import PageCodec
from pagestore.checkpoint.format import ENCRYPTED, FILE_HEADER_SIZE, RECORD_HEADER, RECORD_HEADER_SIZE, record_context
from pagestore.checkpoint.recovery_file import RecoveryFileWriter, read_recovery_batches, read_recovery_file
from tests.support.checkpoint_fakes import make_page
from pagestore import _native
from pagestore.cipher import PAGE_RESERVE, RECORD_OVERHEAD, Cipher
from pagestore.errors import EncryptionError

pytestmark = pytest.mark.skipif(not _native.wal_seal_available(),
                                reason="the system has no libcrypto.so: sealing stays in Python")

KEY = bytes(range(32))
PATH = "/store/pages.dat"


def _plain_pages(n, ps, seed=1):
    rng = random.Random(seed)
    return [rng.randbytes(ps - PAGE_RESERVE) + bytes(PAGE_RESERVE) for _ in range(n)]


@pytest.mark.parametrize("ps", [1024, 4096, 16384])
def test_c_sealed_pages_open_with_the_reference_cipher(ps):
    c = Cipher.from_option(KEY)
    assert c.bulk
    pages, ids = _plain_pages(9, ps), [0, 1, 2, 7, 8, 100, 101, 5000, 2**40]
    out = bytearray(len(ids) * ps)
    c.seal_pages(ids, b"".join(pages), out, ps)
    images = [bytes(out[i * ps:(i + 1) * ps]) for i in range(len(ids))]
    for pid, plain, image in zip(ids, pages, images):
        assert image[:ps - PAGE_RESERVE] != plain[:ps - PAGE_RESERVE]
        assert image[ps - PAGE_RESERVE:ps - PAGE_RESERVE + 4] == bytes((c.key_id, 0, 0, 0))
        assert c.open_page(image, pid, PATH) == plain
    assert len({im[ps - 28:ps - 16] for im in images}) == len(ids)      # nonces differ


def test_c_sealed_page_is_bound_to_its_id_and_file_context():
    ps, c = 4096, Cipher.from_option(KEY)
    out = bytearray(ps)
    c.seal_pages([5], _plain_pages(1, ps)[0], out, ps)
    with pytest.raises(EncryptionError, match="page 6"):
        c.open_page(out, 6, PATH)
    with pytest.raises(EncryptionError):
        Cipher.from_option(KEY, page_context=b"other.dat").open_page(out, 5, PATH)


def test_c_page_sealing_refuses_a_nonzero_reserve_naming_the_page():
    ps, c = 4096, Cipher.from_option(KEY)
    pages = _plain_pages(3, ps)
    pages[1] = pages[1][:-1] + b"\x01"
    with pytest.raises(ValueError, match="page 41"):
        c.seal_pages([40, 41, 42], b"".join(pages), bytearray(3 * ps), ps)


def test_reference_fallback_seals_what_the_c_path_seals():
    ps, c = 4096, Cipher.from_option(KEY)
    c.bulk = False
    pages = _plain_pages(4, ps)
    out = bytearray(4 * ps)
    c.seal_pages([3, 4, 9, 10], b"".join(pages), out, ps)
    for i, pid in enumerate([3, 4, 9, 10]):
        assert c.open_page(out[i * ps:(i + 1) * ps], pid, PATH) == pages[i]


def _recovery_file(tmp_path, name, codec, cipher, framer=None, compactor=None, n=40, chunk=16):
    rng = random.Random(7)
    ps = 4096
    pages = [make_page(i, ps, rng) for i in range(n)]
    ids = list(range(100, 100 + n))
    fs, path = diskio.PosixFS(), str(tmp_path / name)
    w = RecoveryFileWriter(fs, path, 3, 2, ps, PageCodec(codec, None, ps), cipher,
                           framer=framer, compactor=compactor)
    for i in range(0, n, chunk):
        w.append(ids[i:i + chunk], memoryview(b"".join(pages[i:i + chunk])))
    w.sync()
    w.close()
    with open(path, "rb") as f:
        return path, f.read(), dict(zip(ids, pages))


def _headers(data):
    out, at = [], FILE_HEADER_SIZE
    while at < len(data):
        pid, codec, flags, n, _crc = RECORD_HEADER.unpack_from(data, at)
        out.append((at, pid, codec, flags, n))
        at += RECORD_HEADER_SIZE + n
    return out


class _Compactor:
    compact_pages = staticmethod(_native.compact_pages)
    frame_heads = staticmethod(_native.frame_record_heads)


@pytest.mark.parametrize("codec", ["disabled", "skip_garbage", "lz4", "snappy", "zstd"])
def test_c_sealed_recovery_records_match_the_reference_writer(tmp_path, codec):
    bulk = Cipher.from_option(KEY)
    ref = Cipher.from_option(KEY)
    ref.bulk = False
    path, data, want = _recovery_file(tmp_path, "bulk", codec, bulk,
                                      framer=_native.frame_recovery_records, compactor=_Compactor)
    _, ref_data, _ = _recovery_file(tmp_path, "ref", codec, ref)
    heads = _headers(data)
    assert [h[1:] for h in heads] == [h[1:] for h in _headers(ref_data)]
    assert len(data) == len(ref_data)
    assert all(flags & ENCRYPTED for _, _, _, flags, _ in heads)
    fs = diskio.PosixFS()
    got = dict(read_recovery_file(fs, path, checkpoint_id=3, writer=2, page_size=4096, cipher=ref))
    assert got == want
    batches = {}
    for ids, images in read_recovery_batches(fs, path, checkpoint_id=3, writer=2, page_size=4096,
                                             cipher=ref):
        for i, pid in enumerate(ids):
            batches[pid] = bytes(images[i * 4096:(i + 1) * 4096])
    assert batches == want


def test_c_sealed_record_is_bound_to_its_file_offset_and_header(tmp_path):
    c = Cipher.from_option(KEY)
    _, data, _ = _recovery_file(tmp_path, "f", "skip_garbage", c, framer=_native.frame_recovery_records)
    at, pid, codec, flags, n = _headers(data)[5]
    payload = data[at + RECORD_HEADER_SIZE:at + RECORD_HEADER_SIZE + n]
    assert c.open(payload, record_context(3, 2, at, pid, codec, flags), PATH)
    for ctx in (record_context(3, 2, at + 1, pid, codec, flags),
                record_context(3, 1, at, pid, codec, flags),
                record_context(3, 2, at, pid + 1, codec, flags),
                record_context(4, 2, at, pid, codec, flags)):
        with pytest.raises(EncryptionError):
            c.open(payload, ctx, PATH)


def test_seal_records_refuses_a_short_buffer_and_leaves_it_untouched():
    ps = 4096
    buf = bytearray(3 * (ps + RECORD_HEADER_SIZE))
    n, _ = _native.frame_recovery_records([1, 2, 3], b"".join(_plain_pages(3, ps)), ps, 0, buf)
    assert n == len(buf)
    before = bytes(buf)
    with pytest.raises(ValueError, match="too short"):
        _native.seal_records(KEY, 1, 3, 2, 64, buf, 0, n)
    assert buf == before
    room = buf + bytes(3 * RECORD_OVERHEAD)
    assert _native.seal_records(KEY, 1, 3, 2, 64, room, 0, n) == n + 3 * RECORD_OVERHEAD
    with pytest.raises(ValueError, match="already sealed"):
        _native.seal_records(KEY, 1, 3, 2, 64, room + bytes(3 * RECORD_OVERHEAD), 0, len(room))
