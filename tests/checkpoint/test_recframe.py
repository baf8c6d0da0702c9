"""The C recovery-record framing and parsing (recframe.c) against the Python reference.

The Python framing of checkpoint/recovery_file.py defines the format; the C
path must produce the same bytes for every kind of page, and the bulk reader
must return the same pages and raise the same errors as the reference reader.
"""

import ctypes
import random
import struct

import cramjam
import pytest

from pagestore import diskio
from pagestore.checkpoint.compression import PageCodec
from pagestore.checkpoint.format import RECORD_HEADER_SIZE, RecoveryFileCorrupt
from pagestore.checkpoint.recovery_file import RecoveryFileWriter, read_recovery_batches, read_recovery_file
from tests.support.checkpoint_fakes import make_page, seal
from pagestore._native import compact_pages, frame_record_heads, frame_recovery_records, parse_recovery_records

PS = 4096


def _pages(n: int, seed: int = 1) -> list[bytes]:
    """Pages of every kind the gap test distinguishes: zero gap, dirty gap, no plausible gap."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = i % 6
        if kind <= 1:
            page = bytearray(make_page(i, PS, rng))             # a real page, zero gap
        else:
            page = bytearray(rng.randbytes(PS))
            lo, hi = {2: (100, 3000), 3: (10, 3000), 4: (3000, 100), 5: (40, PS + 1)}[kind]
            struct.pack_into("<HH", page, 24, lo & 0xFFFF, hi & 0xFFFF)
            if kind == 2 and i % 12 == 2:
                page[lo:hi] = bytes(hi - lo)                    # plausible and zero: dropped
        out.append(bytes(page))
    return out


class _Compactor:
    compact_pages = staticmethod(compact_pages)
    frame_heads = staticmethod(frame_record_heads)


def _write(tmp_path, name, codec, pages, ids, chunk, framer, compactor=None, level=None):
    fs, path = diskio.PosixFS(), str(tmp_path / name)
    w = RecoveryFileWriter(fs, path, 3, 1, PS, PageCodec(codec, level, PS), framer=framer, compactor=compactor)
    for i in range(0, len(ids), chunk):
        w.append(ids[i:i + chunk], memoryview(b"".join(pages[i:i + chunk])))
    w.sync()
    w.close()
    with open(path, "rb") as f:
        return f.read(), w


@pytest.mark.parametrize("codec", ["disabled", "skip_garbage", "lz4"])
@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_c_framing_is_byte_identical_to_python_framing(tmp_path, codec, chunk):
    if codec == "lz4" and 4 not in frame_recovery_records.codecs:
        pytest.skip("no liblz4.so.1 on this machine: lz4 is framed by the Python codec only")
    pages = _pages(600)                     # > 1 MiB of records: crosses the flush size
    ids = [5 + 3 * i for i in range(len(pages))]
    ref, wp = _write(tmp_path, "py.bin", codec, pages, ids, chunk, None)
    got, wc = _write(tmp_path, "c.bin", codec, pages, ids, chunk, frame_recovery_records)
    assert len(ref) > RecoveryFileWriter.FLUSH_BYTES
    assert got == ref
    assert (wc.offset, wc.pages, wc.gap_fallbacks) == (wp.offset, wp.pages, wp.gap_fallbacks) == \
        (len(ref), len(pages), wp.gap_fallbacks)
    assert codec == "disabled" or 0 < wp.gap_fallbacks < len(pages)


@pytest.mark.parametrize("codec", ["snappy", "zstd", "lz4"])
@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_compacted_framing_of_a_codec_is_byte_identical_to_python_framing(tmp_path, codec, chunk):
    pages = _pages(600)
    ids = [5 + 3 * i for i in range(len(pages))]
    ref, wp = _write(tmp_path, "py.bin", codec, pages, ids, chunk, None)
    got, wc = _write(tmp_path, "c.bin", codec, pages, ids, chunk, None, _Compactor())
    assert got == ref
    assert (wc.offset, wc.pages, wc.gap_fallbacks) == (wp.offset, wp.pages, wp.gap_fallbacks)
    assert 0 < wp.gap_fallbacks < len(pages)
    # the codec compressed some pages and stored the incompressible ones raw
    kinds = {codec_byte for codec_byte in _record_codecs(ref)}
    assert len(kinds) >= 2


def _compressible_pages(n: int, seed: int) -> list[bytes]:
    """Real pages (zero gap) whose bytes repeat at short distances, as values
    half made of a repeated run do: what LZ4's acceleration trades on."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        page = make_page(i, PS, rng)
        lo, hi = struct.unpack_from("<HH", page, 24)
        for at in list(range(64, lo - 100, 100)) + list(range(hi, PS - 100, 100)):
            run = rng.randbytes(50)
            page[at:at + 100] = run + run
        seal(page, i)
        out.append(bytes(page))
    return out


def _records(data: bytes):
    """(codec, flags, payload) of every record of a recovery file's bytes."""
    from pagestore.checkpoint.format import FILE_HEADER_SIZE
    pos = FILE_HEADER_SIZE
    while pos < len(data):
        n = struct.unpack_from("<I", data, pos + 10)[0]
        yield data[pos + 8], data[pos + 9], data[pos + RECORD_HEADER_SIZE:pos + RECORD_HEADER_SIZE + n]
        pos += RECORD_HEADER_SIZE + n


@pytest.mark.parametrize("level", [-1, -3])
def test_lz4_levels_below_zero_are_framed_in_c_at_acceleration_one_minus_level(tmp_path, level):
    if 4 not in frame_recovery_records.codecs:
        pytest.skip("no liblz4.so.1 on this machine: lz4 is framed by the Python codec only")
    lz4 = ctypes.CDLL("liblz4.so.1")
    pages = _compressible_pages(200, seed=5)
    ids = list(range(1, 201))
    data, w = _write(tmp_path, "c.bin", "lz4", pages, ids, 64, frame_recovery_records, level=level)
    assert w.codec.frame_code == 4 | (1 - level) << 8
    blocks = differ = 0
    for codec, _flags, payload in _records(data):
        if codec != 4:
            continue
        compact = cramjam.lz4.decompress_block(bytes(payload))    # the size prefix, then the block
        for accel, want_equal in ((1 - level, True), (1, False)):
            out = ctypes.create_string_buffer(2 * PS)
            k = lz4.LZ4_compress_fast(bytes(compact), out, len(compact), 2 * PS, accel)
            same = out.raw[:k] == bytes(payload[4:])
            if want_equal:
                assert same, "the block is not liblz4's at the level's acceleration"
            else:
                differ += not same
        blocks += 1
    assert blocks > 150 and differ > 0     # the default mode would have written other blocks
    # the existing reader (cramjam, and the C parser) restores every page exactly
    fs, path = diskio.PosixFS(), str(tmp_path / "c.bin")
    assert list(read_recovery_file(fs, path, checkpoint_id=3, writer=1, page_size=PS)) == list(zip(ids, pages))
    got = []
    for bids, images in read_recovery_batches(fs, path, checkpoint_id=3, writer=1, page_size=PS,
                                              parser=parse_recovery_records, batch_pages=50):
        got += [(pid, bytes(images[k * PS:(k + 1) * PS])) for k, pid in enumerate(bids)]
    assert got == list(zip(ids, pages))


def test_lz4_level_zero_in_c_stays_byte_identical_to_the_python_codec(tmp_path):
    if 4 not in frame_recovery_records.codecs:
        pytest.skip("no liblz4.so.1 on this machine: lz4 is framed by the Python codec only")
    pages = _compressible_pages(200, seed=6)
    ids = list(range(1, 201))
    ref, _ = _write(tmp_path, "py.bin", "lz4", pages, ids, 64, None, level=0)
    got, w = _write(tmp_path, "c.bin", "lz4", pages, ids, 64, frame_recovery_records, level=0)
    assert w.codec.frame_code == 4 and got == ref
    assert sum(1 for codec, _f, _p in _records(ref) if codec == 4) > 150


def test_c_framing_refuses_an_acceleration_on_a_codec_that_is_not_lz4():
    pages = _compressible_pages(2, seed=7)
    for code in (1 | 2 << 8, 0 | 2 << 8, 4 | 1 << 24, -4):
        with pytest.raises(ValueError):
            frame_recovery_records([1, 2], b"".join(pages), PS, code, bytearray(2 * (PS + RECORD_HEADER_SIZE)))


def _record_codecs(data: bytes):
    from pagestore.checkpoint.format import FILE_HEADER_SIZE
    pos = FILE_HEADER_SIZE
    while pos < len(data):
        yield data[pos + 8]
        pos += RECORD_HEADER_SIZE + struct.unpack_from("<I", data, pos + 10)[0]


def test_c_framing_refuses_an_output_buffer_too_small():
    pages = _pages(2)
    with pytest.raises(ValueError):
        frame_recovery_records([1, 2], b"".join(pages), PS, True, bytearray(2 * PS))


@pytest.mark.parametrize("codec", ["disabled", "skip_garbage", "zstd", "snappy", "lz4"])
def test_bulk_reader_returns_what_the_reference_reader_returns(tmp_path, codec):
    pages = _pages(700, seed=2)
    ids = list(range(1, 701))
    _write(tmp_path, "f.bin", codec, pages, ids, 64, frame_recovery_records)
    fs, path = diskio.PosixFS(), str(tmp_path / "f.bin")
    ref = list(read_recovery_file(fs, path, checkpoint_id=3, writer=1, page_size=PS))
    for parser in (parse_recovery_records, None):
        got = []
        for bids, images in read_recovery_batches(fs, path, checkpoint_id=3, writer=1, page_size=PS,
                                                  parser=parser, batch_pages=50):
            got += [(pid, bytes(images[k * PS:(k + 1) * PS])) for k, pid in enumerate(bids)]
        assert got == ref == list(zip(ids, pages))


def _error(fn):
    try:
        fn()
    except RecoveryFileCorrupt as e:
        return str(e)
    return None


_DAMAGE = ["flip_payload", "flip_length", "cut_payload", "cut_header", "huge_length", "bad_codec"]


@pytest.mark.parametrize("codec, damage", [("skip_garbage", d) for d in _DAMAGE] +
                         [("lz4", d) for d in _DAMAGE + ["bad_lz4_stream"]])
def test_bulk_reader_raises_the_reference_error_for_damage(tmp_path, codec, damage):
    pages = _pages(300, seed=3)
    data, _w = _write(tmp_path, "f.bin", codec, pages, list(range(300)), 64, frame_recovery_records)
    data = bytearray(data)
    # the 200th record's offset (an lz4 one for codec lz4), found by walking the headers
    at, seen = 32, 0
    while seen < 200 or (codec == "lz4" and data[at + 8] != 4):
        at += RECORD_HEADER_SIZE + struct.unpack_from("<I", data, at + 10)[0]
        seen += 1
    if damage == "flip_payload":
        data[at + RECORD_HEADER_SIZE + 50] ^= 1
    elif damage == "flip_length":
        struct.pack_into("<I", data, at + 10, struct.unpack_from("<I", data, at + 10)[0] - 1)
    elif damage == "cut_payload":
        del data[at + RECORD_HEADER_SIZE + 10:]
    elif damage == "cut_header":
        del data[at + 5:]
    elif damage == "huge_length":
        struct.pack_into("<I", data, at + 10, 1 << 20)
    elif damage == "bad_lz4_stream":
        # a valid CRC over an lz4 payload that does not decompress to its stated size
        n = struct.unpack_from("<I", data, at + 10)[0]
        struct.pack_into("<I", data, at + RECORD_HEADER_SIZE, 100)
        head = bytes(data[at:at + 14])
        payload = bytes(data[at + RECORD_HEADER_SIZE:at + RECORD_HEADER_SIZE + n])
        from crc32c import crc32c
        struct.pack_into("<I", data, at + 14, crc32c(payload, crc32c(head)))
    else:
        data[at + 8] = 9
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(data))
    fs, kw = diskio.PosixFS(), dict(checkpoint_id=3, writer=1, page_size=PS)
    ref = _error(lambda: list(read_recovery_file(fs, str(path), **kw)))
    got = _error(lambda: [bytes(i) for _ids, i in read_recovery_batches(fs, str(path), parser=parse_recovery_records,
                                                                        **kw)])
    assert ref is not None and f"offset {at}" in ref
    assert got == ref
