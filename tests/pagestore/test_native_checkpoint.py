"""Checkpoint hooks: ckpt_begin snapshots exactly the dirty pages; a write to
a page of the running checkpoint first copies it into the checkpoint buffer
(so ckpt_copy still returns the image as of ckpt_begin); a full buffer fails
the write with PS_E_CKPT_FULL naming the page and rolls everything back;
in-checkpoint pages are never evicted; signals and throttle_hint follow."""

import os
import sys
import random

import pytest

from pagestore import _native
from pagestore._native.testing import page_image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from native_kit import PS, Disk, copy_all, load_tree, scan  # noqa: E402


def test_ckpt_begin_returns_sorted_dirty_pages_and_clears_dirty():
    core = _native.Core(PS, 1024 * PS, 64 * PS, 0)
    core.wal_disable()
    core.format_new()
    for i in range(3000):
        core.put(b"%06d" % i, b"v" * 80)
    dirty = core.signals.dirty_pages
    assert dirty > 10 and core.signals.pages_dirtied >= dirty
    ids, lsn = core.ckpt_begin(1)
    assert lsn == 0 and list(ids) == sorted(ids) and len(ids) == dirty and 0 in ids
    assert core.signals.dirty_pages == 0 and core.signals.ckpt_pages == len(ids)
    with pytest.raises(ValueError):
        core.ckpt_begin(2)                       # one checkpoint at a time
    imgs = copy_all(core, ids)
    assert core.signals.ckpt_written == len(ids)
    assert all(_native.check_page(img, pid) for pid, img in imgs.items())
    assert all(int.from_bytes(img[16:24], "little") == 1 for img in imgs.values())
    core.ckpt_release(ids)
    core.ckpt_end()
    assert core.signals.ckpt_pages == 0
    ids2, _ = core.ckpt_begin(2)
    assert len(ids2) == 0 or list(ids2) == [0]        # nothing changed since
    core.ckpt_end()


def test_writes_during_checkpoint_copy_on_write_and_images_stay_as_of_begin():
    rng = random.Random(1)
    core = _native.Core(PS, 1024 * PS, 512 * PS, 0)
    core.wal_disable()
    core.format_new()
    model = {}
    for _ in range(3000):
        k, v = rng.randbytes(8), rng.randbytes(rng.randrange(150))
        core.put(k, v)
        model[k] = v
    ids, _ = core.ckpt_begin(7)
    before = dict(model)
    for _ in range(2000):                             # writes while the checkpoint runs
        k = rng.choice(list(model)) if rng.random() < 0.5 else rng.randbytes(8)
        if rng.random() < 0.2:
            core.delete(k)
            model.pop(k, None)
        else:
            v = rng.randbytes(rng.randrange(150))
            core.put(k, v)
            model[k] = v
    sig = core.signals
    assert sig.cow_used > 0 and sig.cow_peak >= sig.cow_used and sig.cow_capacity == 512
    images = copy_all(core, ids)
    snap = load_tree(images)
    assert scan(snap) == sorted(before.items())
    snap.verify()
    core.ckpt_release(ids)
    assert sig.cow_used == 0
    core.ckpt_end()
    assert scan(core) == sorted(model.items())
    core.verify()


def test_full_checkpoint_buffer_fails_with_blocked_page_and_rolls_back():
    rng = random.Random(2)
    core = _native.Core(PS, 2048 * PS, 4 * PS, 0)    # a 4-page checkpoint buffer
    core.wal_disable()
    core.format_new()
    model = {}
    for _ in range(4000):
        k, v = rng.randbytes(8), rng.randbytes(100)
        core.put(k, v)
        model[k] = v
    ids, _ = core.ckpt_begin(1)
    failures = 0
    for _ in range(300):
        k, v = rng.choice(list(model)), rng.randbytes(rng.randrange(50, 200))
        try:
            core.put(k, v)
            model[k] = v
        except _native.Retry as r:
            assert r.code == _native.PS_E_CKPT_FULL
            assert r.page in set(ids) and core.blocked_page == r.page
            failures += 1
    assert failures > 0 and core.signals.cow_used == 4
    # a batch that needs more copies than the buffer has is rolled back whole
    batch = [(1, k, b"new") for k in list(model)[:500]]
    with pytest.raises(_native.Retry):
        core.apply_batch(_native.pack_ops(batch), 3)
    assert core.signals.cow_used == 4
    assert scan(core) == sorted(model.items())
    core.verify()
    images = copy_all(core, ids)
    core.ckpt_release(ids)
    core.ckpt_end()
    assert core.signals.cow_used == 0
    core.apply_batch(_native.pack_ops(batch), 4)      # succeeds once the checkpoint is over
    model.update((k, v) for _, k, v in batch)
    assert scan(core) == sorted(model.items())
    load_tree(images).verify()


def test_in_checkpoint_pages_are_not_evicted_and_memory_full_is_reported():
    disk = Disk()
    core = _native.Core(PS, 40 * PS, 8 * PS, 0, read_page=disk.read_page)
    core.wal_disable()
    core.format_new()
    model = {}
    i = 0
    while core.signals.dirty_pages < 30:
        k = b"%06d" % i
        core.put(k, b"x" * 200)
        model[k] = b"x" * 200
        i += 1
    ids, _ = core.ckpt_begin(1)
    with pytest.raises(_native.Retry) as ei:          # nothing evictable: all in the checkpoint
        for j in range(i, i + 5000):
            k = b"%06d" % j
            core.put(k, b"y" * 200)
            model[k] = b"y" * 200
    assert ei.value.code in (_native.PS_E_NOMEM, _native.PS_E_CKPT_FULL)
    assert core.signals.evictions == 0
    images = copy_all(core, ids)                      # every page of the checkpoint still resident
    disk.pages.update(images)
    core.ckpt_release(ids)
    core.ckpt_end()
    assert scan(core) == sorted(model.items())


def test_throttle_hint_follows_the_thresholds():
    core = _native.Core(PS, 400 * PS, 10 * PS, 0)
    core.wal_disable()
    core.format_new()
    core.set_throttle_thresholds(0.5, 0.1)
    i = 0
    while not core.signals.throttle_hint:
        core.put(b"%06d" % i, b"z" * 300)
        i += 1
    assert core.signals.dirty_pages >= 40
    ids, _ = core.ckpt_begin(1)
    assert core.signals.throttle_hint == 0
    j = 0
    while core.signals.cow_used < 5:
        core.put(b"%06d" % (j * 37 % i), b"w" * 300)
        j += 1
    assert core.signals.throttle_hint == 1
    core.ckpt_release(ids)
    core.ckpt_end()
    assert core.signals.throttle_hint == 0
    stats = core.stats()
    assert stats["cow_peak"] >= 5 and stats["slots_total"] == 400


def test_signals_stay_readable_after_close():
    core = _native.Core(PS, 64 * PS, 0, 0)
    core.wal_disable()
    core.format_new()
    core.put(b"a", b"b")
    sig = core.signals
    core.close()
    assert sig.pages_dirtied >= 1
    with pytest.raises(Exception):
        core.get(b"a")


def test_pages_with_copy_lists_exactly_the_in_checkpoint_pages_holding_a_copy():
    rng = random.Random(3)
    core = _native.Core(PS, 2048 * PS, 256 * PS, 0)
    core.wal_disable()
    core.format_new()
    assert list(core.ckpt_pages_with_copy()) == []
    keys = [rng.randbytes(8) for _ in range(4000)]
    for k in keys:
        core.put(k, rng.randbytes(100))
    ids, _ = core.ckpt_begin(1)
    assert list(core.ckpt_pages_with_copy()) == []     # nothing written yet
    for k in rng.sample(keys, 60):
        core.put(k, rng.randbytes(100))
    got = core.ckpt_pages_with_copy()
    assert got.typecode == "Q" and list(got) == sorted(got)
    assert len(got) == core.signals.cow_used > 0
    assert set(got) <= set(ids)
    # a page holds a copy iff its checkpoint image now differs from the live page
    imgs = copy_all(core, ids)
    changed = {pid for pid in ids if imgs[pid][32:] != page_image(core, pid)[32:]}
    assert changed <= set(got)
    # pages written and released drop out of the list, the others stay
    half = list(got[: len(got) // 2])
    core.ckpt_release(half)
    assert list(core.ckpt_pages_with_copy()) == list(got[len(got) // 2:])
    assert core.signals.cow_used == len(got) - len(half)
    core.ckpt_end()
    assert list(core.ckpt_pages_with_copy()) == [] and core.signals.cow_used == 0
    empty = _native.Core(PS, 64 * PS, 0, 0)
    empty.wal_disable()
    empty.format_new()
    assert list(empty.ckpt_pages_with_copy()) == []


def test_pages_with_copy_forgets_copies_of_a_rolled_back_write():
    core = _native.Core(PS, 1024 * PS, 4 * PS, 0)
    core.wal_disable()
    core.format_new()
    for i in range(3000):
        core.put(b"%06d" % i, b"v" * 80)
    ids, _ = core.ckpt_begin(1)
    # a batch touching many leaves needs more copies than the 4-page buffer holds
    ops = _native.pack_ops((1, b"%06d" % i, b"w" * 80) for i in range(0, 3000, 50))
    with pytest.raises(_native.Retry):
        core.apply_batch(ops)
    assert list(core.ckpt_pages_with_copy()) == [] and core.signals.cow_used == 0
    core.put(b"000100", b"x")
    got = core.ckpt_pages_with_copy()
    assert len(got) == core.signals.cow_used >= 1
    core.ckpt_release(ids)
    core.ckpt_end()


@pytest.mark.parametrize("skip_garbage", [False, True])
def test_copy_frame_gives_the_bytes_of_copy_then_frame(skip_garbage):
    """ckpt_copy_frame (one pass, the recovery-file writers' path) must equal
    ckpt_copy + frame_recovery_records byte for byte, copy-on-write pages included."""
    rng = random.Random(3)
    core = _native.Core(PS, 1024 * PS, 512 * PS, 0)
    core.wal_disable()
    core.format_new()
    keys = []
    for _ in range(3000):
        k = rng.randbytes(8)
        core.put(k, rng.randbytes(rng.randrange(150)))
        keys.append(k)
    ids, _ = core.ckpt_begin(9)
    for k in rng.sample(keys, 300):                   # some pages get a checkpoint-buffer copy
        core.put(k, b"new")
    assert core.signals.cow_used > 0
    images = bytearray(len(ids) * PS)
    core.ckpt_copy(ids, images)
    want = bytearray(len(ids) * (PS + 18))
    n_want, fb_want = _native.frame_recovery_records(ids, images, PS, skip_garbage, want)
    got = bytearray(len(ids) * (PS + 18))
    n_got, fb_got = core.ckpt_copy_frame(ids, skip_garbage, got)
    assert (n_got, fb_got) == (n_want, fb_want)
    assert got[:n_got] == want[:n_want]
    if skip_garbage:
        assert n_got < len(ids) * PS                  # gaps really were dropped
    with pytest.raises(ValueError):                   # too small an output is refused, not overrun
        core.ckpt_copy_frame(ids, skip_garbage, bytearray(PS))
    core.ckpt_release(ids)
    core.ckpt_end()
