"""One encrypted WAL format: without libcrypto, the encoder lays records out
sealed (Core.wal_reserve_tags) and wal/recseal.RecordSealer seals them in
Python. For the same salt (the segment's nonce source) the two sealers must
write byte-identical segments, and each side's reader must read the other's."""

import struct

import pytest

from pagestore import _native
from pagestore.cipher import Cipher
from pagestore.wal.format import BLOCK, decode_segment_header
from pagestore.wal.recseal import SALT_AT, CHECK_AT, RecordSealer, record_opener
from tests.pagestore.native_kit import SEGMENT, Segments, wal_core, wal_records

pytestmark = pytest.mark.skipif(not _native.wal_seal_available(),
                                reason="the C sealer needs libcrypto to compare against")

KEY = bytes(range(32))
CHECKPOINT, ROLLBACK = 4, 7


def workload(core):
    """Deterministic operations: short and block-spanning records, a batch, two segments."""
    for i in range(40):
        core.put(b"k%03d" % i, b"v" * (i * 7))
    core.put(b"big", bytes(range(256)) * 24)                 # 6144 bytes: spans blocks
    core.delete(b"k005")
    core.apply_batch(_native.pack_ops([(1, b"b1", b"x" * 100), (2, b"k006", b"")]), txid=77)
    core.log_record(CHECKPOINT, struct.pack("<Q", 5) + b"opaque")
    core.log_record(ROLLBACK, b"")                           # empty payload: tag only
    for i in range(230):                                     # rolls over to segment 1
        core.put(b"r%04d" % i, bytes([i % 251]) * 5000)
    core.put(b"tail", b"t")


def data_end(segs, seq, core):
    """Offset just past segment seq's last record."""
    nxt = segs.bufs.get(seq + 1)
    end_lsn = decode_segment_header(nxt).prev_end_lsn if nxt is not None else core.signals.wal_end_lsn
    return end_lsn - seq * SEGMENT


def c_and_python_segments():
    cipher = Cipher({1: KEY}, 1)
    by_c, by_py = Segments(), Segments()
    c_core = wal_core(by_c, key=KEY, key_id=1)
    workload(c_core)
    py_core = _native.Core(4096, 4096 * 4096, 1024 * 4096, 0, wal_segment=by_py)
    py_core.format_new()
    py_core.wal_reserve_tags(1)
    py_core.wal_attach(by_py(0), SEGMENT, 0, BLOCK, 0, True)
    workload(py_core)
    assert sorted(by_c.bufs) == sorted(by_py.bufs) and len(by_c.bufs) >= 2
    ends = {}
    for seq, buf in by_py.bufs.items():
        ends[seq] = data_end(by_py, seq, py_core)
        sealer = RecordSealer(cipher, salt=bytes(by_c.bufs[seq][SALT_AT:CHECK_AT]))
        mid = ends[seq] // 2                       # in two rounds, as publishes come
        mid = next(o for o, _w in reversed(wal_records(by_c.bufs[seq], seq)) if o <= mid)  # same layout
        sealer.seal_to(buf, mid)
        sealer.seal_to(buf, ends[seq])
    return cipher, by_c, by_py, ends


def test_python_and_c_sealers_write_byte_identical_segments():
    _cipher, by_c, by_py, ends = c_and_python_segments()
    for seq in by_c.bufs:
        a, b = bytes(by_c.bufs[seq][:ends[seq]]), bytes(by_py.bufs[seq][:ends[seq]])
        assert decode_segment_header(a).flags == 2
        diff = next((i for i in range(len(a)) if a[i] != b[i]), None)
        assert diff is None, f"segment {seq} differs first at offset {diff}"


def test_each_side_reads_the_others_segments():
    cipher, by_c, by_py, ends = c_and_python_segments()
    for seq in by_c.bufs:
        c_buf, py_buf = by_c.bufs[seq], by_py.bufs[seq]
        # the Python reader opens every record the C sealer wrote ...
        opener = record_opener(decode_segment_header(c_buf), c_buf, cipher, f"c/{seq}")
        records = wal_records(c_buf, seq)
        assert records and all(opener(o, w) is not None for o, w in records)
        # ... and the C scanner the records the Python sealer wrote (it takes
        # runs of simple records; the Python opener steps over the others)
        salt = bytes(py_buf[SALT_AT:CHECK_AT])
        py_opener = record_opener(decode_segment_header(py_buf), py_buf, cipher, f"py/{seq}")
        starts = [o for o, _w in records]
        at, by_scanner, i = BLOCK, 0, 0
        while i < len(records):
            n, _raw, end = _native.wal_scan(py_buf, seq * SEGMENT, at, SEGMENT, key=KEY, salt=salt)
            if n:
                by_scanner += n
                i = starts.index(end) if end in starts else len(records)
                at = end
            else:
                assert py_opener(*wal_records(py_buf, seq)[i]) is not None
                i += 1
                at = starts[i] if i < len(records) else ends[seq]
        assert at == ends[seq] and by_scanner > len(records) // 2


def test_a_record_sealed_twice_or_changed_does_not_authenticate():
    cipher, by_c, by_py, ends = c_and_python_segments()
    buf = by_py.bufs[0]
    off, wire = wal_records(buf, 0)[3]
    opener = record_opener(decode_segment_header(buf), buf, cipher, "py/0")
    assert opener(off, wire) is not None
    assert opener(off + 1, wire) is None                     # nonce bound to the offset
    bad = bytearray(wire)
    bad[-1] ^= 1
    assert opener(off, bytes(bad)) is None
