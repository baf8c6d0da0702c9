"""recover() follows DESIGN.md §3's table and never guesses."""

import posixpath
import random
from types import SimpleNamespace

import pytest

from pagestore import diskio
from pagestore.checkpoint import Checkpointer
from pagestore.checkpoint.compression import PageCodec
from pagestore.checkpoint.format import START, MarkerCorrupt, RecoveryFileCorrupt, marker_name
from pagestore.checkpoint.markers import scan
from tests.support.checkpoint_fakes import FakePageSource, FakeWal, FileSink, make_page, page_ok, seal
from pagestore.recovery import PageRecordsInvalid, RecoveryError, recover
from pagestore.checkpoint.pagerecords import CHECKPOINT, PAGE_DELTA, PAGE_SNAPSHOT, pack_page_delta, pack_page_snapshot
from pagestore.diskio.layout import recovery_file_name

PS = 4096
N = 64


class Store:
    """A SimFS store with a fake source; `images[k]` = page images as of checkpoint k."""

    def __init__(self, seed=0, compression="skip_garbage", recovery_data="checkpoint"):
        self.fs = diskio.SimFS()
        self.fs.makedirs("/db")
        self.rng = random.Random(seed)
        pages = {i: make_page(i, PS, self.rng) for i in range(N)}
        self.sink = FileSink(self.fs, "/db/pages.dat", PS)
        for i, p in pages.items():
            self.sink.file.pwrite(p, i * PS)
        self.sink.sync()
        self.fs.fsync_dir("/db")
        self.src = FakePageSource(PS, pages)
        self.images = {0: {i: bytes(p) for i, p in pages.items()}}
        self.cp = Checkpointer(self.fs, "/db", self.src, self.sink, FakeWal(), threads=2, chunk_pages=4,
                               interval=None, compression=compression, recovery_data=recovery_data)
        self.version = 0

    def modify(self, ids):
        self.version += 1
        for i in ids:
            self.src.put(i, make_page(i, PS, self.rng, self.version))

    def checkpoint(self, crash_at=None, hit=1):
        cid = self.cp._next_id
        self.images[cid] = self.src.images_after(cid)
        if crash_at is None:
            return self.cp.checkpoint()
        self.fs.arm(crash_at, hit)
        with pytest.raises(diskio.SimulatedCrash):
            self.cp.checkpoint()
        self.cp.close(final_checkpoint=False)

    def power_loss(self, seed=0, mode="random"):
        self.fs.crash(random.Random(seed), mode)
        self.sink = FileSink(self.fs, "/db/pages.dat", PS)

    def recover(self, **kw):
        return recover(self.fs, "/db", self.sink, page_size=PS, **kw)

    def disk(self):
        return self.sink.read_all(N)

    def path(self, name):
        return posixpath.join("/db/cp", name)


def test_no_markers_replays_from_zero():
    s = Store()
    r = s.recover()
    assert (r.action, r.replay_from_lsn, r.checkpoint_id, r.pages_restored) == ("replay", 0, 0, 0)


def test_complete_checkpoint_replays_from_its_pointer():
    s = Store()
    s.modify(range(10))
    st = s.checkpoint()
    s.cp.close(final_checkpoint=False)
    s.power_loss()
    r = s.recover()
    assert (r.action, r.replay_from_lsn, r.checkpoint_id) == ("replay", st["wal_lsn"], 1)
    assert s.disk() == s.images[1]


def test_start_without_end_restores_every_page_then_writes_end():
    s = Store()
    s.modify(range(0, N, 2))
    s.checkpoint(crash_at="checkpoint.page_written", hit=3)
    s.power_loss(seed=3)
    r = s.recover()
    assert (r.action, r.checkpoint_id, r.pages_restored) == ("restore", 1, N // 2)
    assert s.disk() == s.images[1]
    assert scan(s.fs, "/db/cp").last_complete == 1
    assert r.replay_from_lsn == s.src.events[0][2]


def test_recovery_files_without_start_are_ignored_and_kept_as_evidence():
    s = Store()
    s.modify(range(5))
    s.checkpoint()
    s.modify(range(20))
    s.checkpoint(crash_at="checkpoint.after_recovery_fsync")
    s.power_loss(mode="keep")
    before = s.fs.listdir("/db/cp")
    r = s.recover()
    assert (r.action, r.checkpoint_id) == ("ignore_recovery_files", 1)
    assert r.ignored_files and all("0000000000000002-RECOVERY" in f for f in r.ignored_files)
    assert s.fs.listdir("/db/cp") == before
    assert s.disk() == s.images[1]


def _interrupted(**kw):
    s = Store(**kw)
    s.modify(range(N))
    s.checkpoint(crash_at="checkpoint.after_start_marker")
    s.power_loss(mode="keep")
    return s


def _damage(s, name, fn):
    f = s.fs.open(s.path(name))
    data = bytearray(f.pread(f.size(), 0))
    f.close()
    data = fn(data)
    f = s.fs.open(s.path(name), truncate=True)
    f.pwrite(bytes(data), 0)
    f.fsync()
    f.close()


@pytest.mark.parametrize("damage,reason", [
    (lambda d: d[:-7], "short record payload"),
    (lambda d: d[:32 + 10], "short record header"),
    (lambda d: d[:20], "short header"),
    (lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:], "crc mismatch"),
    (lambda d: bytes([d[0] ^ 1]) + d[1:], "bad magic"),
    (lambda d: d + b"\0" * 5, "short record header"),
])
def test_damaged_recovery_file_raises_a_typed_error_naming_the_file(damage, reason):
    s = _interrupted()
    name = max(scan(s.fs, "/db/cp").recovery[1].values(), key=lambda n: s.fs.size(s.path(n)))
    _damage(s, name, damage)
    with pytest.raises(RecoveryFileCorrupt, match=reason) as e:
        s.recover()
    assert e.value.path == s.path(name) and name in str(e.value)


def test_missing_recovery_file_raises_naming_it():
    s = _interrupted()
    s.fs.remove(s.path(recovery_file_name(1, 0)))
    with pytest.raises(RecoveryFileCorrupt, match="missing") as e:
        s.recover()
    assert e.value.path.endswith(recovery_file_name(1, 0))


def test_recovery_file_with_another_checkpoints_header_is_refused():
    s = _interrupted()
    other = s.fs.open(s.path(recovery_file_name(1, 0))).pread(32, 0)
    _damage(s, recovery_file_name(1, 1), lambda d: bytearray(other) + d[32:])
    with pytest.raises(RecoveryFileCorrupt, match="writer"):
        s.recover()


def test_corrupt_start_marker_is_refused():
    s = _interrupted()
    _damage(s, marker_name(1, START), lambda d: d[:10] + bytes([d[10] ^ 4]) + d[11:])
    with pytest.raises(MarkerCorrupt):
        s.recover()


@pytest.mark.parametrize("compression", ["disabled", "skip_garbage", "snappy", "zstd", "lz4"])
def test_restore_is_exact_under_every_compression(compression):
    s = _interrupted(compression=compression)
    r = s.recover()
    assert r.pages_restored == N and s.disk() == s.images[1]
    assert all(page_ok(img, pid) for pid, img in s.disk().items())


def test_crash_during_recovery_recovers_again():
    s = Store()
    s.modify(range(N))
    s.checkpoint(crash_at="checkpoint.page_written", hit=2)
    s.power_loss(seed=1)
    for seed, arm in enumerate([("point", "recovery.after_restore"), ("io", 5), ("io", 17)]):
        if arm[0] == "point":
            s.fs.arm(arm[1])
        else:
            s.fs.arm_io(arm[1])
        with pytest.raises(diskio.SimulatedCrash):
            s.recover()
        s.power_loss(seed=seed)
    r = s.recover()
    assert r.action == "restore" and s.disk() == s.images[1]
    again = s.recover()            # END was written: the second run only replays
    assert again.action == "replay" and again.replay_from_lsn == r.replay_from_lsn


def test_next_checkpoint_after_recovery_completes_and_deletes_old_recovery_files():
    s = Store()
    s.modify(range(N))
    s.checkpoint(crash_at="checkpoint.before_page_fsync")
    s.power_loss(seed=2)
    s.recover()
    src = FakePageSource(PS, s.disk(), lsn=1000)
    src.put(3, make_page(3, PS, s.rng, 99))
    cp = Checkpointer(s.fs, "/db", src, s.sink, FakeWal(), interval=None)
    assert cp.checkpoint()["checkpoint_id"] == 2
    cp.close(final_checkpoint=False)
    assert sorted(scan(s.fs, "/db/cp").recovery) == [2]


# -- legacy mode: page records in the WAL -------------------------------------------

def _rec(type_, payload, lsn):
    return SimpleNamespace(type=type_, payload=payload, lsn=lsn)


def test_wal_mode_rebuilds_pages_from_snapshots_and_deltas():
    s = Store(recovery_data="wal")
    s.modify(range(4))
    st1 = s.checkpoint()
    s.modify(range(8))
    s.checkpoint(crash_at="checkpoint.page_written")
    s.power_loss(seed=5)
    want, codec = s.images[2], PageCodec("snappy", page_size=PS)
    prev, cur = st1["wal_lsn"], s.src.events[-1][2]
    records = [_rec(PAGE_SNAPSHOT, pack_page_snapshot(9, b"\0" * PS, codec), prev - 5)]  # before range
    lsn = prev + 1
    for pid in range(8):
        stale = bytearray(want[pid])
        stale[100:110] = b"x" * 10
        records.append(_rec(PAGE_SNAPSHOT, pack_page_snapshot(pid, stale, codec), lsn))
        records.append(_rec(PAGE_DELTA, pack_page_delta(pid, [(100, want[pid][100:110])]), lsn + 1))
        lsn += 2
    records.append(_rec(CHECKPOINT, (2).to_bytes(8, "little"), cur))
    records.append(_rec(PAGE_SNAPSHOT, pack_page_snapshot(0, b"\0" * PS, codec), cur + 3))  # after
    r = s.recover(wal_records=lambda start: iter(records), seal_page=seal)
    assert (r.action, r.pages_restored, r.checkpoint_id) == ("restore_wal", 8, 2)
    assert s.disk() == want


def test_wal_mode_without_page_records_refuses():
    s = Store(recovery_data="wal")
    s.modify(range(4))
    s.checkpoint(crash_at="checkpoint.after_start_marker")
    s.power_loss(mode="keep")
    with pytest.raises(RecoveryError, match="wal_records"):
        s.recover()
    with pytest.raises(RecoveryError, match="rebuild 0 pages"):
        s.recover(wal_records=lambda start: iter([]))


def test_delta_without_a_snapshot_is_refused():
    s = Store(recovery_data="wal")
    s.modify(range(4))
    s.checkpoint(crash_at="checkpoint.after_start_marker")
    s.power_loss(mode="keep")
    records = [_rec(PAGE_DELTA, pack_page_delta(1, [(0, b"ab")]), 5)]
    with pytest.raises(PageRecordsInvalid, match="without an earlier PAGE_SNAPSHOT"):
        s.recover(wal_records=lambda start: iter(records))
