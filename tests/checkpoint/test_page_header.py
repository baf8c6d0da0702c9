"""checkpoint/page_header.py is the one Python statement of the common page
header: these tests read images the C core wrote (the header's only writer)
through it, so an offset that drifts from pagestore/csrc fails here."""

import struct

from pagestore import _native
from pagestore.checkpoint import page_header as ph
from pagestore.checkpoint.compression import compact_page, expand_page

PS = 4096


def checkpoint_images(cid=7, keys=3000):
    core = _native.Core(PS, 1024 * PS, 64 * PS, 0)
    core.wal_disable()
    core.format_new()
    for i in range(keys):
        core.put(b"%06d" % i, b"v" * 80)
    ids, _lsn = core.ckpt_begin(cid)
    out = bytearray(len(ids) * PS)
    core.ckpt_copy(ids, out)
    core.ckpt_release(ids)
    core.ckpt_end()
    return {pid: bytearray(out[i * PS:(i + 1) * PS]) for i, pid in enumerate(ids)}


def test_the_core_writes_the_fields_where_the_header_module_reads_them():
    images = checkpoint_images(cid=7)
    assert len(images) > 10
    types = set()
    for pid, img in images.items():
        assert ph.page_id_of(img) == pid
        assert ph.checkpoint_id_of(img) == 7
        crc, typ, fmt, page_id, cid, lo, hi, reserved = ph.HEADER.unpack_from(img)
        assert (page_id, cid, reserved, fmt) == (pid, 7, 0, 1)
        assert ph.type_of(img) == typ and typ in ph.TYPE_NAMES
        assert ph.free_gap(img) == (lo, hi) and ph.HEADER_SIZE <= lo <= hi <= PS
        assert not any(img[lo:hi])                       # the gap is all zeros
        types.add(typ)
    assert images[0][ph.TYPE_AT] == ph.META
    assert {ph.META, ph.LEAF, ph.INNER} <= types


def test_a_page_is_valid_only_with_its_crc_and_its_own_page_id():
    images = checkpoint_images()
    pid, img = max(images.items())
    assert _native.check_page(img, pid)
    assert not _native.check_page(img, pid + 1)          # misdirected: page_id field differs
    bad = bytearray(img)
    struct.pack_into("<I", bad, ph.CRC_AT, struct.unpack_from("<I", img, ph.CRC_AT)[0] ^ 1)
    assert not _native.check_page(bad, pid)


def test_stamping_the_checkpoint_id_changes_only_that_field():
    images = checkpoint_images(cid=3)
    pid, img = max(images.items())
    stamped = bytearray(img)
    ph.stamp_checkpoint_id(stamped, 99)
    assert ph.checkpoint_id_of(stamped) == 99
    changed = [i for i in range(PS) if stamped[i] != img[i]]
    assert changed and all(ph.CHECKPOINT_ID_AT <= i < ph.CHECKPOINT_ID_AT + 8 for i in changed)
    _native.seal_page(stamped, pid)                       # the core restamps the crc
    assert _native.check_page(stamped, pid)


def test_skip_garbage_drops_exactly_the_gap_the_header_names():
    images = checkpoint_images()
    pid, img = max(images.items())
    lo, hi = ph.free_gap(img)
    small = compact_page(img, PS)
    assert small is not None and len(small) == PS - (hi - lo)
    assert expand_page(small, PS) == bytes(img)
