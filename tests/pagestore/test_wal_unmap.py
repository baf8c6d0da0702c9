"""The encoder unmaps the WAL ranges it has finished writing (walenc.c,
wal_unmap_upto), so that a WAL fdatasync does not write-protect them one
TLB shoot-down at a time under the writer. The data must stay: the pages
live on in the page cache, and only their mapping goes."""

from __future__ import annotations

import os
import re

import pytest

import pagestore
from pagestore.database import engine_of

MiB = 1 << 20
VALUE = bytes(range(100)) * 2
_HEADER = re.compile(r"^[0-9a-f]+-[0-9a-f]+$")


def _wal_rss(wal_dir: str) -> dict:
    """Rss in bytes of each mapping of a file under wal_dir (from /proc/self/smaps)."""
    out, cur = {}, None
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if parts and _HEADER.match(parts[0]):      # a mapping's first line, path or not
                cur = parts[5] if len(parts) >= 6 and parts[5].startswith(wal_dir) else None
            elif cur and parts[0] == "Rss:":
                out[cur] = out.get(cur, 0) + int(parts[1]) * 1024
    return out


def _fill(db, n: int, tag: bytes = b"") -> None:
    for i in range(n):
        db.put(b"k%08d" % i + tag, VALUE)


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc/self/smaps (Linux)")
@pytest.mark.parametrize("unmap", [True, False])
def test_written_wal_ranges_leave_the_mapping_only_when_unmapping(tmp_path, unmap):
    db = pagestore.open(str(tmp_path / "db"), memory_size=64 * MiB, wal_segment_size=16 * MiB,
                        checkpoint_interval=3600)
    try:
        if not engine_of(db).wal.shared_mapping:
            pytest.fail("the posix store is expected to write its WAL through a shared mapping")
        engine_of(db).core.wal_set_unmap(unmap)
        _fill(db, 40_000)                        # ~9 MiB of records in the first segment
        rss = _wal_rss(str(tmp_path / "db"))
        top = max(rss.values())
        if unmap:
            assert top <= 2 * MiB + 64 * 1024, f"written WAL still mapped: {rss}"
        else:                                    # the control: the check can see mapped pages
            assert top >= 8 * MiB, rss
    finally:
        db.close()


def test_unmapped_wal_is_replayed_intact_after_segment_switches(tmp_path):
    path = str(tmp_path / "db")
    db = pagestore.open(path, memory_size=64 * MiB, wal_segment_size=4 * MiB, checkpoint_interval=3600)
    _fill(db, 60_000)                            # ~13 MiB: segment switches and unmapped steps
    # no checkpoint and no clean close: the reopen must replay every record from the WAL
    engine_of(db).wal.flush()
    db._abandon()                                # drop the handle as a crash would
    db = pagestore.open(path, memory_size=64 * MiB, wal_segment_size=4 * MiB, checkpoint_interval=3600)
    try:
        assert db.recovery["records_replayed"] >= 60_000
        for i in range(0, 60_000, 7):
            assert db.get(b"k%08d" % i) == VALUE
    finally:
        db.close()
