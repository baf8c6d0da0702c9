"""Page memory smaller than the data: clean pages are evicted and reloaded
through the read_page callback (a dict of "disk" images filled by checkpoints
through ckpt_begin/ckpt_copy), every loaded page is CRC- and id-checked, a
reopened store finds its meta page, tree and freelist, and a write that runs
out of evictable memory is rolled back completely (PS_E_NOMEM)."""

import random

import pytest

from pagestore import _native
from pagestore.errors import CorruptionError

PS = 4096


class Disk:
    """Page images by id, as the checkpointer would write them."""

    def __init__(self):
        self.pages = {}
        self.reads = 0

    def read_page(self, page_id, buf):
        self.reads += 1
        buf[:] = self.pages[page_id]

    def checkpoint(self, core, cid=1):
        ids, _lsn = core.ckpt_begin(cid)
        out = bytearray(len(ids) * core.page_size)
        core.ckpt_copy(ids, out)
        for i, pid in enumerate(ids):
            img = bytes(out[i * core.page_size:(i + 1) * core.page_size])
            assert _native.check_page(img, pid)
            self.pages[pid] = img
        core.ckpt_release(ids)
        core.ckpt_end()
        return ids


def new_core(disk, memory, page_size=PS, **kw):
    c = _native.Core(page_size, memory, 64 * page_size, 0, read_page=disk.read_page, **kw)
    c.wal_disable()
    return c


def retrying(core, disk, fn, *args):
    """Run a write; on PS_E_NOMEM make pages clean with a checkpoint and retry."""
    for cid in range(1000, 2000):
        try:
            return fn(*args)
        except _native.Retry as r:
            assert r.code == _native.PS_E_NOMEM
            disk.checkpoint(core, cid)
    raise AssertionError("no progress")


def fill(core, disk, model, rng, n, vsize=200):
    cid = 1
    for i in range(n):
        k = rng.randbytes(12)
        v = rng.randbytes(rng.randrange(vsize))
        while True:
            try:
                core.put(k, v)
                break
            except _native.Retry as r:
                assert r.code == _native.PS_E_NOMEM
                disk.checkpoint(core, cid)
                cid += 1
        model[k] = v
    disk.checkpoint(core, cid)


def test_store_larger_than_page_memory_reloads_pages_through_the_callback():
    disk, rng, model = Disk(), random.Random(1), {}
    core = new_core(disk, 64 * PS)                  # 64 slots, data needs hundreds of pages
    core.format_new()
    fill(core, disk, model, rng, 6000)
    assert core.signals.evictions > 0
    reads = disk.reads
    for k, v in model.items():
        assert core.get(k) == v
    assert disk.reads > reads and core.signals.page_loads > 0
    items = []
    lo = None
    while True:
        batch = core.scan_batch(lo, lo is None, None, False, False, 50000)
        if not batch:
            break
        items += batch
        lo = batch[-1][0]
    assert items == sorted(model.items())
    info = core.verify()
    assert info["keys"] == len(model) and info["page_count"] > 64
    assert core.signals.slots_used <= 64


def test_reopened_store_reads_meta_tree_and_freelist_from_disk():
    disk, rng, model = Disk(), random.Random(2), {}
    core = new_core(disk, 128 * PS)
    core.format_new()
    fill(core, disk, model, rng, 3000)
    for k in sorted(model)[:2000]:                  # a key range: empties whole leaves
        retrying(core, disk, core.delete, k)
        del model[k]
    disk.checkpoint(core, 100)
    free_before = core.verify()["free_ids"]
    assert free_before > 0
    core.close()
    again = new_core(disk, 32 * PS)
    again.open_existing(len(disk.pages))
    assert again.count() == len(model)
    info = again.verify()
    assert info["free_ids"] == free_before
    assert all(again.get(k) == v for k, v in model.items())
    pages = info["page_count"]
    for i in range(300):                              # reuses freed pages first
        retrying(again, disk, again.put, b"new%05d" % i, b"z" * 100)
    assert again.verify()["page_count"] == pages


def test_flipped_bit_on_disk_raises_corruption_naming_the_page():
    disk, rng, model = Disk(), random.Random(3), {}
    core = new_core(disk, 256 * PS)
    core.format_new()
    fill(core, disk, model, rng, 2000)
    core.close()
    victim = max(disk.pages)
    img = bytearray(disk.pages[victim])
    img[PS // 2] ^= 0x10
    disk.pages[victim] = bytes(img)
    again = new_core(disk, 256 * PS)
    again.open_existing(len(disk.pages))
    with pytest.raises(CorruptionError) as ei:
        again.verify()
    assert ei.value.page == victim and str(victim) in str(ei.value)
    assert again.bad_page == victim


def test_page_with_wrong_id_is_refused():
    disk, rng, model = Disk(), random.Random(4), {}
    core = new_core(disk, 256 * PS)
    core.format_new()
    fill(core, disk, model, rng, 2000)
    core.close()
    a, b = sorted(disk.pages)[-2:]
    disk.pages[a] = disk.pages[b]                       # a misdirected write
    again = new_core(disk, 256 * PS)
    again.open_existing(len(disk.pages))
    with pytest.raises(CorruptionError, match=f"page {a}"):
        again.verify()


def _one_leaf_store():
    """A checkpointed 50-key tree that is a single leaf: (disk, root id, leaf bytes)."""
    disk = Disk()
    core = new_core(disk, 256 * PS)
    core.format_new()
    for i in range(50):
        core.put(b"k%03d" % i, b"v")
    disk.checkpoint(core)
    core.close()
    root = _native.file_header_info(disk.pages[0])["root"]
    return disk, root, bytearray(disk.pages[root])


def _verify_after_resealing(disk, root, leaf, match):
    """Write `leaf` back with a valid CRC: only verify's structural checks can tell."""
    _native.seal_page(leaf, root, PS)
    disk.pages[root] = bytes(leaf)
    again = new_core(disk, 256 * PS)
    again.open_existing(len(disk.pages))
    with pytest.raises(CorruptionError, match=match):
        again.verify()


def test_verify_catches_keys_out_of_order_in_a_sealed_page():
    disk, root, leaf = _one_leaf_store()
    s0, s1 = leaf[40:46], leaf[46:52]                   # swap the first two 6-byte slots
    leaf[40:46], leaf[46:52] = s1, s0
    _verify_after_resealing(disk, root, leaf, "out of order")


def test_verify_catches_a_nonzero_byte_in_a_sealed_page_gap():
    disk, root, leaf = _one_leaf_store()
    lo, hi = int.from_bytes(leaf[24:26], "little"), int.from_bytes(leaf[26:28], "little")
    assert lo < hi and leaf[lo:hi] == bytes(hi - lo)
    leaf[(lo + hi) // 2] = 0x5A
    _verify_after_resealing(disk, root, leaf, "gap not zeroed")


def test_read_page_exception_is_reraised_and_nothing_changes():
    disk, rng, model = Disk(), random.Random(6), {}
    core = new_core(disk, 32 * PS)
    core.format_new()
    fill(core, disk, model, rng, 2000)

    class Boom(Exception):
        pass

    def failing(page_id, buf):
        raise Boom(page_id)

    core._cb.read_page = failing
    misses = 0
    for k in list(model)[:200]:
        try:
            assert core.get(k) == model[k]
        except Boom:
            misses += 1
    assert misses > 0
    core._cb.read_page = disk.read_page
    assert all(core.get(k) == v for k, v in model.items())


def test_nomem_rolls_the_whole_batch_back():
    disk, model = Disk(), {}
    core = new_core(disk, 48 * PS)
    core.format_new()
    for i in range(300):
        k = b"%06d" % i
        core.put(k, b"a" * 100)
        model[k] = b"a" * 100
    disk.checkpoint(core)
    loads = core.signals.page_loads
    ops = [(1, b"%06d" % i, b"b" * 300) for i in range(0, 20000, 3)]   # needs far more than 48 pages
    with pytest.raises(_native.Retry) as ei:
        core.apply_batch(_native.pack_ops(ops), 9)
    assert ei.value.code == _native.PS_E_NOMEM
    assert core.signals.dirty_pages == 0 and core.signals.rollbacks >= 1
    assert core.count() == len(model)
    assert all(core.get(k) == v for k, v in model.items())
    core.verify()
    assert core.signals.page_loads >= loads
    # a single put that needs a split when memory is all dirty: also rolled back
    fill_to_dirty = 0
    try:
        for i in range(10**6):
            k = b"x%07d" % i
            core.put(k, b"c" * 200)
            model[k] = b"c" * 200
            fill_to_dirty += 1
    except _native.Retry as r:
        assert r.code == _native.PS_E_NOMEM
    assert fill_to_dirty > 0
    assert core.count() == len(model)
    disk.checkpoint(core, 2)                          # verify itself needs evictable pages
    core.verify()
    assert all(core.get(k) == v for k, v in model.items())
