"""Format facts are written once, in csrc/ps_api.h, and every Python module
that must restate one (the layers under pagestore cannot import the binding)
states the same value.

Each pair below is (the value the binding reads from C, the value a Python
format module uses). If either side changes alone, stores written by one
side stop reading on the other; this test names the fact that drifted.
"""

import struct

import pytest

from pagestore import _native as N
from pagestore import cipher
from pagestore.checkpoint import compression, format as recfmt, page_header, pagerecords
from pagestore.wal import format as walfmt

FACTS = {
    # common page header (checkpoint/page_header.py)
    "page header size": (N.PAGE_HEADER_SIZE, page_header.HEADER_SIZE),
    "page crc offset": (N.PH_CRC, page_header.CRC_AT),
    "page type offset": (N.PH_TYPE, page_header.TYPE_AT),
    "page format offset": (N.PH_FORMAT, page_header.FORMAT_AT),
    "page id offset": (N.PH_PAGE_ID, page_header.PAGE_ID_AT),
    "page checkpoint id offset": (N.PH_CHECKPOINT_ID, page_header.CHECKPOINT_ID_AT),
    "page free_lo offset": (N.PH_FREE_LO, page_header.FREE_LO_AT),
    "page free_hi offset": (N.PH_FREE_HI, page_header.FREE_HI_AT),
    "page types": ((N.PAGE_META, N.PAGE_LEAF, N.PAGE_INNER, N.PAGE_OVERFLOW, N.PAGE_FREELIST),
                   (page_header.META, page_header.LEAF, page_header.INNER, page_header.OVERFLOW,
                    page_header.FREELIST)),
    "sealed page trailer": (N.SEALED_PAGE_TRAILER, cipher.PAGE_RESERVE),
    # recovery files (checkpoint/format.py)
    "recovery file header size": (N.RECFILE_HEADER_SIZE, recfmt.FILE_HEADER_SIZE),
    "recovery record header size": (N.RECORD_HEADER_SIZE, recfmt.RECORD_HEADER_SIZE),
    "recovery record header struct": (N.RECORD_HEADER_SIZE, recfmt.RECORD_HEADER.size),
    "recovery record crc span": (N.RECORD_CRC_SPAN, recfmt._RECORD_CRC_SPAN),
    "GAP_SKIPPED flag": (N.RECORD_GAP_SKIPPED, recfmt.GAP_SKIPPED),
    "ENCRYPTED flag": (N.RECORD_ENCRYPTED, recfmt.ENCRYPTED),
    "payload slack over a page": (N.RECORD_MAX_OVER_PAGE, recfmt.MAX_PAYLOAD_OVER_PAGE),
    # codecs (checkpoint/compression.py, checkpoint/pagerecords.py)
    "codec ids": ((N.CODEC_DISABLED, N.CODEC_SKIP_GARBAGE, N.CODEC_SNAPPY, N.CODEC_ZSTD, N.CODEC_LZ4),
                  (compression.DISABLED, compression.SKIP_GARBAGE, compression.SNAPPY,
                   compression.ZSTD, compression.LZ4)),
    "PAGE_SNAPSHOT gap bit": (N.SNAP_GAP_BIT, pagerecords.SNAPSHOT_GAP_BIT),
    # WAL (wal/format.py)
    "WAL block": (N.WAL_BLOCK, walfmt.BLOCK),
    "WAL block header": (N.WAL_BLOCK_HDR, walfmt.BLOCK_HDR_LEN),
    "WAL record header": (N.WAL_REC_HDR, walfmt.REC_HDR_LEN),
    "WAL record types": ((N.REC_PUT, N.REC_DELETE, N.REC_COMMIT, N.REC_CHECKPOINT,
                          N.REC_PAGE_SNAPSHOT, N.REC_PAGE_DELTA, N.REC_ROLLBACK),
                         (walfmt.PUT, walfmt.DELETE, walfmt.COMMIT, walfmt.CHECKPOINT,
                          walfmt.PAGE_SNAPSHOT, walfmt.PAGE_DELTA, walfmt.ROLLBACK)),
}


@pytest.mark.parametrize("fact", sorted(FACTS))
def test_python_format_modules_state_the_c_value(fact):
    from_c, in_python = FACTS[fact]
    assert from_c == in_python, f"{fact}: C says {from_c}, Python says {in_python}"


def test_the_exported_page_offsets_are_where_the_c_code_writes():
    # the constants are the ones the C code uses, not a copy beside it
    page = bytearray(4096)
    N.seal_page(page, 0x0102030405060708, 4096)
    assert struct.unpack_from("<Q", page, N.PH_PAGE_ID)[0] == 0x0102030405060708
    assert N.check_page(page, 0x0102030405060708)
    page[N.PH_CRC] ^= 1
    assert not N.check_page(page, 0x0102030405060708)


def test_the_exported_record_header_size_is_what_the_c_framer_writes():
    ps = 1024
    out = bytearray(2 * (ps + N.RECORD_HEADER_SIZE))
    n, _ = N.frame_recovery_records([5], bytes(ps), ps, N.CODEC_DISABLED, out)
    assert n == ps + N.RECORD_HEADER_SIZE
    assert struct.unpack_from("<Q", out, 0)[0] == 5


def test_the_meta_page_offsets_frame_file_header_info():
    core = N.Core(4096, 4096 * 64, 0, 0)
    core.format_new()
    ids, _ = core.ckpt_begin(3)
    images = bytearray(len(ids) * 4096)
    core.ckpt_copy(ids, images)
    core.ckpt_end()
    meta = images[list(ids).index(0) * 4096:][:4096]
    assert meta[N.MH_MAGIC:N.MH_MAGIC + 8] == b"PAGESTOR"
    info = N.file_header_info(meta[:N.MH_END])
    assert info["page_size"] == struct.unpack_from("<I", meta, N.MH_PAGE_SIZE)[0] == 4096
    assert info["height"] == struct.unpack_from("<I", meta, N.MH_HEIGHT)[0] == 1
    assert info["checkpoint_id"] == 3
    assert N.file_header_info(meta[:N.MH_END - 1]) is None
