"""Page codecs: exact round trips, and skip_garbage never changes a byte."""

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagestore.checkpoint.compression import (CODECS, DISABLED, SKIP_GARBAGE, PageCodec, compact_page,
                                    expand_page)
from pagestore.checkpoint.format import GAP_SKIPPED
from tests.support.checkpoint_fakes import make_page, page_ok

PS = 4096


@st.composite
def pages(draw):
    page_size = draw(st.sampled_from([512, 4096, 8192]))
    rng = random.Random(draw(st.integers(0, 2**32)))
    page = bytearray(rng.randbytes(page_size) if draw(st.booleans()) else bytes(page_size))
    lo = draw(st.integers(0, page_size))
    hi = draw(st.integers(0, page_size))
    struct.pack_into("<HH", page, 24, lo, hi)
    if draw(st.booleans()) and 32 <= lo < hi <= page_size:
        page[lo:hi] = bytes(hi - lo)
    return page_size, bytes(page)


@settings(max_examples=150, deadline=None)
@given(pages(), st.sampled_from(sorted(CODECS)))
def test_every_codec_round_trips_any_page_exactly(page, name):
    page_size, image = page
    codec = PageCodec(name, page_size=page_size)
    cid, flags, payload = codec.encode(image)
    assert PageCodec.decode(cid, flags, payload, page_size) == image


@pytest.mark.parametrize("name,level", [("zstd", 1), ("zstd", 19), ("zstd", -5), ("lz4", 9)])
def test_levels_round_trip(name, level):
    page = make_page(1, PS, random.Random(level))
    codec = PageCodec(name, level, PS)
    assert PageCodec.decode(*codec.encode(page), PS) == page


def test_levels_out_of_range_or_on_levelless_codecs_are_rejected():
    with pytest.raises(ValueError):
        PageCodec("zstd", 23)
    with pytest.raises(ValueError):
        PageCodec("snappy", 1)
    with pytest.raises(ValueError):
        PageCodec("gzip")


def test_skip_garbage_drops_exactly_the_zero_gap_and_keeps_the_crc_valid():
    page = make_page(5, PS, random.Random(1))
    lo, hi = struct.unpack_from("<HH", page, 24)
    cid, flags, payload = PageCodec("skip_garbage", page_size=PS).encode(page)
    assert (cid, flags) == (SKIP_GARBAGE, GAP_SKIPPED)
    assert len(payload) == PS - (hi - lo)
    restored = PageCodec.decode(cid, flags, payload, PS)
    assert restored == page and page_ok(restored, 5)


def test_skip_garbage_stores_a_page_with_a_nonzero_gap_whole():
    page = make_page(5, PS, random.Random(2), zero_gap=False)
    cid, flags, payload = PageCodec("skip_garbage", page_size=PS).encode(page)
    assert (cid, flags, payload) == (DISABLED, 0, bytes(page))


@pytest.mark.parametrize("lo,hi", [(0, 100), (100, 100), (200, 100), (40, PS + 1), (10, 20)])
def test_skip_garbage_ignores_an_implausible_gap(lo, hi):
    page = bytearray(PS)
    struct.pack_into("<HH", page, 24, lo, min(hi, 0xFFFF))
    assert compact_page(page, PS) is None


def test_compressing_codecs_shrink_a_half_empty_page():
    page = make_page(3, PS, random.Random(3))
    page[32:1000] = bytes(968)  # compressible body
    for name in ("snappy", "zstd", "lz4"):
        cid, flags, payload = PageCodec(name, page_size=PS).encode(page)
        assert cid == CODECS[name] and len(payload) < PS // 2


def test_incompressible_page_is_stored_raw_not_expanded():
    page = bytearray(random.Random(4).randbytes(PS))
    struct.pack_into("<HH", page, 24, 0, 0)
    for name in ("snappy", "zstd", "lz4"):
        cid, flags, payload = PageCodec(name, page_size=PS).encode(page)
        assert cid == DISABLED and len(payload) == PS


@pytest.mark.parametrize("codec,flags,payload", [
    (DISABLED, 0, b"x" * 100),                 # wrong length
    (DISABLED, GAP_SKIPPED, bytes(PS)),        # flag without codec
    (SKIP_GARBAGE, 0, bytes(PS)),              # codec without flag
    (DISABLED, 0x02, bytes(PS)),               # reserved flag bit
    (9, 0, bytes(PS)),                         # unknown codec
    (CODECS["zstd"], 0, b"not zstd at all"),   # undecodable
    (CODECS["snappy"], 0, b"\xff\xff\xff\xff\x0f"),
])
def test_decode_rejects_inconsistent_records(codec, flags, payload):
    with pytest.raises(ValueError):
        PageCodec.decode(codec, flags, payload, PS)


def test_expand_rejects_a_length_that_disagrees_with_the_gap():
    page = make_page(1, PS, random.Random(5))
    compact = compact_page(page, PS)
    with pytest.raises(ValueError):
        expand_page(compact + b"\0", PS)


def _encode_into_pages(page_size=4096):
    """Pages with a zero gap, a dirty gap, no plausible gap, and repetitive data."""
    import os
    import struct
    pages = []
    for lo, hi, fill in ((200, 3000, b"k"), (64, 4000, None), (0, 0, None), (1000, 1001, b"a"), (32, 4096, b"")):
        page = bytearray(os.urandom(page_size) if fill is None else (fill or b"x") * page_size)
        struct.pack_into("<HH", page, 24, lo, hi)
        if hi > lo and fill is not None:
            page[lo:hi] = bytes(hi - lo)
        pages.append(bytes(page))
    dirty = bytearray(pages[0])
    dirty[1500] = 7                 # gap not zero: stored whole
    pages.append(bytes(dirty))
    return pages


@pytest.mark.parametrize("name", ["disabled", "skip_garbage", "snappy", "zstd", "lz4"])
def test_encode_into_matches_encode(name):
    codec = PageCodec(name, None, 4096)
    scratch = (bytearray(4096), bytearray(codec.bound(4096)))
    out = bytearray(8192)
    for page in _encode_into_pages():
        cid, flags, payload = codec.encode(page)
        got = codec.encode_into(memoryview(page), memoryview(out), 100, scratch)
        assert got[:2] == (cid, flags)
        assert bytes(out[100:100 + got[2]]) == payload
        assert PageCodec.decode(cid, flags, payload, 4096) == page


@pytest.mark.parametrize("name", ["disabled", "skip_garbage", "snappy", "zstd", "lz4"])
def test_recovery_writer_round_trips_every_page_kind(tmp_path, name):
    from pagestore import diskio
    from pagestore.checkpoint.recovery_file import RecoveryFileWriter, read_recovery_file
    fs, path = diskio.PosixFS(), str(tmp_path / "r.bin")
    pages = _encode_into_pages()
    w = RecoveryFileWriter(fs, path, 7, 0, 4096, PageCodec(name, None, 4096))
    ids = list(range(10, 10 + len(pages)))
    w.append(ids[:2], memoryview(b"".join(pages[:2])))
    w.append(ids[2:], memoryview(b"".join(pages[2:])))
    w.sync()
    w.close()
    got = list(read_recovery_file(fs, path, checkpoint_id=7, writer=0, page_size=4096))
    assert got == list(zip(ids, pages))
    # the dirty-gap page and the pages without a plausible gap are counted
    assert w.gap_fallbacks == (0 if name == "disabled" else 3)


def test_lz4_levels_below_zero_are_its_fast_mode_at_acceleration_one_minus_level():
    for level, accel, code in ((-1, 2, 4 | 2 << 8), (-7, 8, 4 | 8 << 8), (0, 1, 4)):
        codec = PageCodec("lz4", level, PS)
        assert (codec.acceleration, codec.frame_code) == (accel, code)
    assert PageCodec("lz4", 9, PS).acceleration is None             # level 1-17: high compression
    assert PageCodec("skip_garbage", page_size=PS).frame_code == SKIP_GARBAGE
    with pytest.raises(ValueError):
        PageCodec("lz4", -65535, PS)        # the acceleration must fit the C framing's 16 bits


@pytest.mark.parametrize("level", [-1, -4])
def test_an_lz4_level_below_zero_in_python_writes_the_fast_mode_block(level):
    # cramjam's block compressor has no acceleration: without the C framing a
    # level below zero writes what level 0 writes (never high compression)
    rng = random.Random(level)
    page = make_page(3, PS, rng)
    lo, hi = struct.unpack_from("<HH", page, 24)
    run = rng.randbytes(40)
    page[hi:hi + 400] = run * 10
    codec = PageCodec("lz4", level, PS)
    encoded = codec.encode(page)
    assert encoded == PageCodec("lz4", 0, PS).encode(page) and encoded[0] == CODECS["lz4"]
    assert PageCodec.decode(*encoded, PS) == page
    out, scratch = bytearray(PS), (bytearray(PS), bytearray(codec.bound(PS)))
    cid, flags, n = codec.encode_into(page, out, 0, scratch)
    assert (cid, flags, bytes(out[:n])) == encoded
