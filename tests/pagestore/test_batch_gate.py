"""The batch gate (csrc/batchgate.c): between two writes of an open batch the
checkpoint's copy and release calls get the core lock, nobody else does; a
page released meanwhile stays released when the batch rolls back, and the
next checkpoint copies it afresh."""

import os
import sys
import threading

from pagestore import _native
from pagestore._native.batches import pack_puts
from pagestore._native.testing import batch_failpoints, batch_go, batch_held

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from native_kit import PS, copy_all, load_tree  # noqa: E402

KEYS = [b"%06d" % i for i in range(3000)]


def in_thread(fn, *args):
    box = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def held_batch(core, hold_at, fail_at=0):
    """A batch rewriting every key, started in a thread and waiting at `hold_at`."""
    batch_failpoints(core, hold_at=hold_at, fail_at=fail_at)
    t, box = in_thread(core.apply_batch, pack_puts([(k, b"c" * 80) for k in KEYS]))
    for _ in range(6000):                      # up to a minute for the thread to get there
        if batch_held(core) or not t.is_alive():
            break
        t.join(0.01)
    assert batch_held(core), box
    return t, box


def store_in_checkpoint():
    """A core whose every page is in a running checkpoint; the page of KEYS[0]
    changed since, so it holds a copy in the checkpoint buffer."""
    core = _native.Core(PS, 1024 * PS, 256 * PS, 0)   # room to copy every page
    core.wal_disable()
    core.format_new()
    for k in KEYS:
        core.put(k, b"a" * 80)
    ids, _ = core.ckpt_begin(1)
    images = copy_all(core, ids)
    core.put(KEYS[0], b"b" * 80)
    assert core.signals.cow_used == 1
    return core, ids, images


def test_the_checkpoint_copies_and_releases_pages_while_a_batch_is_open():
    core, ids, images = store_in_checkpoint()
    t, box = held_batch(core, hold_at=len(KEYS) // 2)
    # a convoy before the gate: these waited for the whole batch
    copier, copied = in_thread(copy_all, core, ids)
    copier.join(60)
    assert not copier.is_alive() and copied["value"] == images
    releaser, _ = in_thread(core.ckpt_release, ids)
    releaser.join(60)
    assert not releaser.is_alive()
    assert core.signals.ckpt_pages == 0 and core.signals.cow_used == 0
    batch_go(core)
    t.join(60)
    assert "error" not in box
    assert all(core.get(k) == b"c" * 80 for k in KEYS)
    core.ckpt_end()


def test_nobody_but_the_checkpoint_passes_the_gate_of_an_open_batch():
    core, ids, _ = store_in_checkpoint()
    t, box = held_batch(core, hold_at=len(KEYS) // 2)
    reader, read = in_thread(core.get, KEYS[0])        # rewritten already by the open batch
    writer, _ = in_thread(core.put, b"other", b"x")
    reader.join(0.5)
    writer.join(0.5)
    # they wait for the batch: the read would see an uncommitted value, the
    # write would mix into the batch's undo log
    assert reader.is_alive() and writer.is_alive()
    batch_go(core)
    for th in (t, reader, writer):
        th.join(60)
        assert not th.is_alive()
    assert "error" not in box
    assert read["value"] == b"c" * 80 and core.get(b"other") == b"x"
    core.ckpt_end()


def test_a_page_released_under_an_open_batch_stays_released_when_the_batch_rolls_back():
    core, ids, images = store_in_checkpoint()
    t, box = held_batch(core, hold_at=10, fail_at=len(KEYS) - 1)
    core.ckpt_release(ids)           # KEYS[0]'s copy goes back to the buffer
    core.ckpt_end()
    batch_go(core)
    t.join(60)
    assert isinstance(box.get("error"), _native.Retry)
    assert core.get(KEYS[0]) == b"b" * 80 and core.get(KEYS[1]) == b"a" * 80
    assert core.signals.cow_used == 0
    # The next checkpoint must copy the page as it is now: a copy left named
    # by the rolled-back page would hand it the first checkpoint's image.
    ids2, _ = core.ckpt_begin(2)
    core.put(KEYS[0], b"d" * 80)     # a write to a page of the checkpoint copies it first
    pages = dict(images)
    pages.update(copy_all(core, ids2))
    core.ckpt_release(ids2)
    core.ckpt_end()
    disk = load_tree(pages)
    assert disk.get(KEYS[0]) == b"b" * 80
    assert all(disk.get(k) == b"a" * 80 for k in KEYS[1:])


def test_a_rolled_back_batch_drops_the_pages_it_found_as_the_page_file_has_them():
    # Such a page is not copied before the batch changes it: the rollback
    # drops it, and the next read loads the page file's image again.
    core, ids, images = store_in_checkpoint()
    core.ckpt_release(ids)
    core.ckpt_end()
    pages = dict(images)
    pages.update(copy_all_after(core))
    disk = load_tree(pages)
    for k in KEYS:
        assert disk.get(k) == (b"b" if k == KEYS[0] else b"a") * 80
    loads = disk.signals.page_loads
    batch_failpoints(disk, fail_at=len(KEYS) - 1)
    try:
        disk.apply_batch(pack_puts([(k, b"c" * 80) for k in KEYS]))
    except _native.Retry:
        pass
    else:
        raise AssertionError("the batch did not fail at its failpoint")
    assert disk.signals.dirty_pages == 0
    for k in KEYS:
        assert disk.get(k) == (b"b" if k == KEYS[0] else b"a") * 80
    assert disk.signals.page_loads > loads          # read again, not restored from a copy


def copy_all_after(core):
    """The pages a second checkpoint writes (everything dirty now)."""
    ids, _ = core.ckpt_begin(9)
    out = copy_all(core, ids)
    core.ckpt_release(ids)
    core.ckpt_end()
    return out
