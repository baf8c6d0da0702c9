"""Legacy physical mode (recovery_data="wal"): the page records between the
previous checkpoint's CHECKPOINT record and this one's rebuild every page of
the checkpoint exactly as ckpt_copy hands it to the page file, including
pages changed without page records (format_new before the WAL, replay,
page 0's meta fields, a rollback after page records were logged), across a
crashed incarnation of page memory, with both C snapshot codecs."""

import os
import random
import struct
import sys
from types import SimpleNamespace

import pytest

from pagestore.checkpoint.pagerecords import RESET_PAGE_ID, SNAPSHOT_GAP_BIT
from pagestore import _native, errors
from pagestore._native.testing import page_image
from pagestore.recovery.physical import rebuild_from_wal

sys.path.insert(0, os.path.dirname(__file__))
from test_native_wal import BLOCK, SEG, SNAP, DELTA, Segments, decode  # noqa: E402

PS = 4096


def records(segs):
    return [SimpleNamespace(type=t, payload=p, lsn=lsn) for lsn, _end, t, p, _raw in decode(segs)]


def make_core(segs, codec, read_page=None):
    return _native.Core(PS, 4096 * PS, 1024 * PS, 0, read_page=read_page, wal_segment=segs,
                        physical_wal=True, snapshot_codec=codec)


def raw_put(key, value):
    """A PUT record as apply_log takes it (crc and lsn are not looked at)."""
    n = 17 + 16 + len(key) + len(value)
    return struct.pack("<IIQB", 0, n, 0, 1) + struct.pack("<QII", 0, len(key), len(value)) + key + value


def checkpoint(core, cid):
    ids, lsn = core.ckpt_begin(cid)
    out = bytearray(len(ids) * PS)
    core.ckpt_copy(ids, out)
    want = {pid: bytes(out[i * PS:(i + 1) * PS]) for i, pid in enumerate(ids)}
    return ids, lsn, want


def finish(core, ids):
    core.ckpt_release(ids)
    core.ckpt_end()


def rebuilt(segs, prev, lsn, cid):
    images = rebuild_from_wal(records(segs), prev, lsn, cid, PS)
    for pid, img in images.items():
        _native.seal_page(img, pid, PS)
    return images


def assert_exact(images, want, core, disk=None):
    missing = sorted(set(want) - set(images))
    assert not missing, f"pages of the checkpoint without an image: {missing[:10]}"
    for pid, img in want.items():
        assert bytes(images[pid]) == img, f"page {pid} differs from its checkpoint image"
    # any other page rebuilt must be what the page file already holds (a
    # clean resident page equals it), or a page no longer in use
    for pid in set(images) - set(want):
        live = page_image(core, pid)
        ref = disk.get(pid) if disk is not None else None
        if ref is not None:
            assert bytes(images[pid])[4:16] + bytes(images[pid])[24:] == ref[4:16] + ref[24:], pid
        elif live is not None:
            assert bytes(images[pid])[4:16] + bytes(images[pid])[24:] == live[4:16] + live[24:], pid


def workload(core, rng, n, keys):
    for _ in range(n):
        r = rng.random()
        k = rng.choice(keys)
        if r < 0.55:
            core.put(k, rng.randbytes(rng.choice([8, 100, 700, 5000])))
        elif r < 0.75:
            core.delete(k)
        else:
            ops = [(_native.OP_PUT, rng.choice(keys), rng.randbytes(rng.choice([10, 300])))
                   for _ in range(rng.randint(2, 5))]
            ops.append((_native.OP_DELETE, rng.choice(keys), b""))
            core.apply_batch(_native.pack_ops(ops))


@pytest.mark.parametrize("codec", ["disabled", "skip_garbage"])
def test_every_checkpoint_is_rebuilt_exactly_from_its_range(codec):
    segs = Segments()
    core = make_core(segs, codec)
    core.format_new()                       # pages built before the WAL exists
    core.wal_attach(segs(0), SEG, 0, BLOCK, 0, True)
    rng = random.Random(5)
    keys = [b"key-%04d" % i for i in range(400)]
    prev = 0
    for cid in range(1, 6):
        workload(core, rng, 300, keys)
        if cid == 2:
            # a change made without page records (replay) ...
            core.apply_log(raw_put(b"key-0001", b"r" * 900) + raw_put(b"zz-replayed", b"q" * 50))
            # ... and a rolled-back put whose page records are logged already
            # (its record cannot fit in a segment)
            with pytest.raises(errors.ValueTooLargeError):
                core.put(b"key-0002", b"v" * (SEG + 4096))
            assert core.get(b"zz-replayed") == b"q" * 50
        ids, lsn, want = checkpoint(core, cid)
        assert 0 in want                       # key count changed: page 0 is in every one
        workload(core, rng, 50, keys)          # writes during the checkpoint: next range
        assert_exact(rebuilt(segs, prev, lsn, cid), want, core)
        finish(core, ids)
        prev = lsn
    core.verify()
    snaps = [r for r in records(segs) if r.type == SNAP]
    codecs = {r.payload[8] for r in snaps}
    if codec == "disabled":
        assert codecs == {0}
    else:
        assert SNAPSHOT_GAP_BIT | 1 in codecs
        gapped = [r for r in snaps if r.payload[8] & SNAPSHOT_GAP_BIT]
        assert all(len(r.payload) < 13 + PS for r in gapped)


def test_a_crashed_incarnations_records_in_the_range_are_forgotten():
    """Process A completes checkpoint 1, then changes pages through
    operations whose logical records do not survive, and begins checkpoint 2
    (no START). Process B replays only part of A's operations and completes
    its own checkpoint 2: its range [p1, p2) holds A's page records too."""
    segs = Segments()
    a = make_core(segs, "skip_garbage")
    a.format_new()
    a.wal_attach(segs(0), SEG, 0, BLOCK, 0, True)
    rng = random.Random(11)
    keys = [b"key-%04d" % i for i in range(300)]
    workload(a, rng, 400, keys)
    ids, p1, disk = checkpoint(a, 1)
    finish(a, ids)
    kept = []
    for i in range(60):
        k, v = b"key-%04d" % rng.randrange(300), rng.randbytes(rng.choice([50, 700]))
        a.put(k, v)
        if i < 20:
            kept.append(raw_put(k, v))          # the rest never reached the durable log
    for i in range(40):
        a.put(b"lost-%04d" % i, b"L" * 900)      # splits: pages B never touches
    a.ckpt_begin(2)                          # A's CHECKPOINT 2, never STARTed
    a_end = a.signals.wal_end_lsn
    a_seq = max(segs.bufs)

    def read_page(pid, buf):
        buf[:] = disk[pid]

    b = make_core(segs, "skip_garbage", read_page=read_page)
    b.open_existing(len(disk))
    assert b.apply_log(b"".join(kept)) == len(kept)
    b.wal_attach(segs(a_seq + 1), SEG, a_seq + 1, BLOCK, a_end, True)
    ids, p2, want = checkpoint(b, 2)
    assert p2 > a_end
    recs = records(segs)
    assert any(r.type == DELTA and struct.unpack_from("<Q", r.payload)[0] == RESET_PAGE_ID
               for r in recs if r.lsn > a_end)
    assert_exact(rebuilt(segs, p1, p2, 2), want, b, disk)
    finish(b, ids)
    b.verify()


def test_snapshot_codec_is_checked_and_settable():
    segs = Segments()
    with pytest.raises(ValueError):
        make_core(segs, "gzip")
    core = make_core(segs, "zstd")                  # Python-side codec: the C side drops the gap
    assert core.snapshot_codec == "zstd"
    core.set_snapshot_codec("disabled")
    assert core.snapshot_codec == "disabled"
    with pytest.raises(ValueError):
        core.set_snapshot_codec("brotli")
