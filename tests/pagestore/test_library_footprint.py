"""A small store is small on disk: WAL segments are sparse files allocated
ahead of the writer as it goes, not two zero-filled 64 MiB slots. Sizes are
disk blocks (st_blocks), what `du` counts, not apparent sizes."""

import os
import time

import pytest

import pagestore
from pagestore.diskio import PosixFS
from pagestore.wal.growth import GROW_FIRST
from pagestore.wal.segments import Segments

MiB = 1 << 20


def _disk_bytes(path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def test_a_store_of_three_keys_takes_at_most_4_mib_on_disk_across_reopens(tmp_path):
    path = tmp_path / "s"
    for _ in range(10):
        with pagestore.open(path) as db:
            for i in range(3):
                db[b"k%d" % i] = b"v"
    assert _disk_bytes(path) <= 4 * MiB
    with pagestore.open(path) as db:
        assert dict(db.items()) == {b"k0": b"v", b"k1": b"v", b"k2": b"v"}


@pytest.mark.parametrize("mode", ["log_only", "fsync"])
def test_the_live_segment_is_allocated_ahead_of_the_writer(tmp_path, mode):
    path = tmp_path / "s"
    value = b"x" * 4000
    with pagestore.open(path, wal_mode=mode) as db:
        for i in range(1500):                    # ~6 MiB of log in the first segment
            db.put(b"k%06d" % i, value)
        written = db.stats()["wal_bytes_written"]
        assert written > 5 * MiB
        live = sorted(os.listdir(path / "wal"))
        deadline = time.monotonic() + 120       # the reserving thread runs when the machine lets it
        while time.monotonic() < deadline:
            allocated = max(os.stat(path / "wal" / n).st_blocks * 512 for n in live)
            if allocated >= written + GROW_FIRST // 2:
                break
            time.sleep(0.05)
        assert allocated >= written + GROW_FIRST // 2, (allocated, written)
        assert allocated < 64 * MiB                    # grown with the load, not whole
    with pagestore.open(path, wal_mode=mode) as db:
        assert len(db) == 1500 and db[b"k001499"] == value


def test_a_sparse_slot_keeps_its_apparent_size_and_reads_as_zeros_past_its_start(tmp_path):
    segs = Segments(PosixFS(), str(tmp_path / "wal"), 4 * MiB, write_path="pwrite",
                    progress=lambda: 0)
    try:
        segs.acquire(0)
        slot_path = segs.live[0].slot.path
        st = os.stat(slot_path)
        assert st.st_size == 4 * MiB                  # readers and mappings see a whole segment
        assert st.st_blocks * 512 <= 2 * GROW_FIRST
        with open(slot_path, "rb") as f:
            assert not any(f.read())
    finally:
        segs.close()


def test_once_a_segment_fills_the_next_ones_are_prepared_whole(tmp_path):
    segs = Segments(PosixFS(), str(tmp_path / "wal"), 4 * MiB, write_path="pwrite",
                    progress=lambda: 0)
    try:
        segs.acquire(0)
        segs.acquire(1)          # the writer moved past a whole segment: a loaded store
        segs.acquire(2)
        assert os.stat(segs.live[0].slot.path).st_blocks * 512 < 4 * MiB
        assert os.stat(segs.live[2].slot.path).st_blocks * 512 >= 4 * MiB
    finally:
        segs.close()


def test_without_a_progress_callable_every_slot_is_whole(tmp_path):
    segs = Segments(PosixFS(), str(tmp_path / "wal"), 4 * MiB, write_path="pwrite")
    try:
        segs.acquire(0)
        assert os.stat(segs.live[0].slot.path).st_blocks * 512 >= 4 * MiB
    finally:
        segs.close()


def test_a_closed_store_reopens_after_its_grower_stopped(tmp_path):
    # close() waits for the grower: no allocate on a closed descriptor.
    for _ in range(5):
        db = pagestore.open(tmp_path / "s", wal_mode="fsync")
        db.put_many((b"k%05d" % i, b"v" * 200) for i in range(3000))
        db.close()
    with pagestore.open(tmp_path / "s") as db:
        assert len(db) == 3000
