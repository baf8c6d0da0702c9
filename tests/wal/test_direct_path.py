"""The pwrite write path (fsync mode, O_DIRECT): anonymous buffers, pwrites, power loss, rotation."""

import mmap
import os
import random
import sys

import pytest

from pagestore.diskio import PosixFS, SimFS, SimulatedCrash
from pagestore.wal import Wal
from pagestore.diskio import layout

sys.path.insert(0, os.path.dirname(__file__))
from test_modes import run_threads  # noqa: E402
from wal_testkit import SMALL, Harness, kv, open_fresh, reopen  # noqa: E402


def file_bytes(fs, path, n, offset):
    f = fs.open(path)
    try:
        return f.pread(n, offset)
    finally:
        f.close()


@pytest.mark.parametrize("make_fs", [PosixFS, SimFS], ids=["posix", "sim"])
def test_fsync_mode_writes_an_anonymous_buffer_with_pwrite(tmp_path, make_fs):
    fs = make_fs()
    d = str(tmp_path / "wal") if make_fs is PosixFS else "/db/wal"
    h = open_fresh(fs, dirpath=d, mode="fsync", segment_size=1 << 20)
    buf = h.writer.buffer
    assert isinstance(buf, memoryview) and isinstance(buf.obj, mmap.mmap)
    assert h.wal.stats()["wal_write_path"] == "pwrite"
    seg = os.path.join(d, layout.slot_name(0))
    lsn, end = h.writer.put(b"key", b"not yet in the file")
    # Not a file mapping: the record is in the buffer, not in the file, until commit.
    assert bytes(buf[lsn:end]) != file_bytes(fs, seg, end - lsn, lsn)
    before = h.wal.stats()["wal_pwrites"]
    h.wal.commit(end)
    st = h.wal.stats()
    assert st["wal_pwrites"] > before and st["wal_fsyncs"] == 1
    assert file_bytes(fs, seg, end - lsn, lsn) == bytes(buf[lsn:end])
    h.wal.close()
    assert kv(Harness(fs, dirpath=d, segment_size=1 << 20).recover(0)) == [(b"key", b"not yet in the file")]


def test_log_only_on_posix_keeps_the_mapping(tmp_path):
    h = open_fresh(PosixFS(), dirpath=str(tmp_path / "wal"), mode="log_only", segment_size=1 << 20)
    assert isinstance(h.writer.buffer, mmap.mmap)
    st = h.wal.stats()
    h.wal.close()
    assert st["wal_write_path"] == "mmap" and st["wal_pwrites"] == 0


def test_write_path_options_are_checked():
    with pytest.raises(ValueError):
        Wal(SimFS(), "/db/wal", mode="fsync", write_path="splice")
    with pytest.raises(ValueError):
        Wal(SimFS(), "/db/wal", mode="fsync", direct=True, write_path="mmap")
    assert Wal(SimFS(), "/db/w2", mode="log_only", direct=True).write_path == "pwrite"


def test_pwrites_cover_whole_blocks_and_the_partial_last_block_alone():
    fs = SimFS()
    h = open_fresh(fs, mode="fsync", segment_size=SMALL)
    writes = []
    segs = h.wal._segs
    live = segs.live[0]
    real = live.file.pwrite

    def spy(data, offset):
        writes.append((offset, len(bytes(data))))
        return real(data, offset)

    live.file.pwrite = spy
    end = h.put(b"a", b"x" * 100)
    assert writes[-1] == (4096, 4096)                    # block 1 from its start, up to the block's end
    writes.clear()
    prev = end
    end = h.put(b"b", b"y" * 5000)                       # runs into block 2
    last = end - end % 4096
    assert last == 2 * 4096 and writes == [(prev, last - prev), (last, 4096)]
    assert all((o + n) % 4096 == 0 for o, n in writes)
    h.wal.close()


@pytest.mark.parametrize("nthreads", [1, 4])
def test_power_loss_in_fsync_mode_over_many_seeds_with_rotation_and_trim(nthreads):
    """pwrite path, small segments: switches, buffer release, trim and slot reuse under power loss."""
    for seed in range(150):
        rng = random.Random(seed * 13 + nthreads)
        fs = SimFS()
        h = open_fresh(fs, mode="fsync", segment_size=SMALL)
        for k in range(rng.randrange(0, 60)):
            h.put(b"pre%03d" % k, b"p" * rng.randrange(1, 3000))
        if rng.random() < 0.5:
            trim_at = h.wal.durable_lsn
            h.wal.trim(trim_at)
        else:
            trim_at = 0
        acked = []
        fs.arm_io(rng.randrange(1, 200))
        run_threads(h, nthreads, 60, value=b"w" * rng.randrange(1, 6000), acked=acked)
        fs.disarm()
        h.wal.abandon()
        fs.crash(seed, "random")
        got = Harness(fs, mode="fsync").recover(trim_at)
        assert set(acked) <= set(kv(got)), f"seed {seed}: acknowledged puts lost"
        assert all(v in (b"w" * len(v), b"p" * len(v)) for _k, v in kv(got))


def test_old_segment_buffers_are_released_once_written_and_synced():
    fs = SimFS()
    h = open_fresh(fs, mode="fsync", segment_size=SMALL)
    for i in range(100):
        h.put(b"k%03d" % i, b"v" * 2000)
    segs = h.wal._segs
    current = h.writer.seq
    assert current >= 3
    assert all(segs.live[s].buffer is None for s in segs.live if s < current)
    assert segs.live[current].buffer is not None
    h.wal.trim(current * SMALL)
    h.put(b"after", b"trim")
    h.wal.close()
    _h2, recs = reopen(fs)
    assert kv(recs)[-1] == (b"after", b"trim")


@pytest.mark.parametrize("threads", [1, 4])
def test_direct_on_the_simulator_keeps_alignment_and_loses_nothing_acknowledged(threads):
    """SimFS(direct=True) rejects unaligned O_DIRECT writes. The partial last block is
    rewritten in place, with the same bytes for what is already durable: dropped, cut
    and torn writes cannot hurt those. A device that fills a sector it was writing with
    garbage could (docs/wal.md), so that outcome is left out here."""
    for seed in range(80):
        rng = random.Random(seed * 5 + threads)
        fs = SimFS(direct=True)
        h = open_fresh(fs, mode="fsync", segment_size=SMALL, direct=True)
        assert h.wal._segs.live[h.writer.seq].file.direct
        acked = []
        fs.arm_io(rng.randrange(1, 200))
        run_threads(h, threads, 50, value=b"d" * rng.randrange(1, 5000), acked=acked)
        fs.disarm()
        h.wal.abandon()
        fs.crash(seed, "random", outcomes=("kept", "dropped", "cut", "torn"))
        got = Harness(fs, mode="fsync").recover(0)
        assert set(acked) <= set(kv(got)), f"seed {seed}: acknowledged puts lost"


def test_direct_round_trip_on_the_real_disk(tmp_path):
    fs = PosixFS()
    d = str(tmp_path / "wal")
    # O_DIRECT works on this machine's ext4 (the issue relies on it): no skip.
    probe = PosixFS(direct=True).open(str(tmp_path / "probe"), create=True, direct=True)
    probe.close()
    h = open_fresh(fs, dirpath=d, mode="fsync", segment_size=1 << 20, direct=True)
    assert h.wal._segs.live[h.writer.seq].file.direct
    written = [(b"k%05d" % i, bytes([i % 251]) * (i * 37 % 3000)) for i in range(1500)]
    for k, v in written:
        h.put(k, v)                                      # about 2.3 MiB: three segments
    st = h.wal.stats()
    assert st["wal_direct"] and st["wal_pwrite_bytes"] % 4096 == 0 and h.writer.seq >= 2
    h.wal.close()
    h2, recs = reopen(fs, dirpath=d, mode="log_only", segment_size=1 << 20)
    assert kv(recs) == written
    h2.wal.close()


def test_direct_log_only_publishes_each_commit(tmp_path):
    fs = SimFS(direct=True)
    h = open_fresh(fs, mode="log_only", direct=True)
    written = [(b"k%03d" % i, b"v" * (i * 97 % 5000)) for i in range(200)]
    for k, v in written:
        h.put(k, v)
    h.wal.abandon()
    fs.crash(1, "keep")                                  # kill -9: the OS has every commit
    assert kv(Harness(fs).recover(0)) == written


def test_group_commit_16_threads_on_the_real_disk_pwrite_path(tmp_path):
    h = open_fresh(PosixFS(), dirpath=str(tmp_path / "wal"), mode="fsync", segment_size=1 << 20)
    commits = run_threads(h, 16, 80)
    st = h.wal.stats()
    h.wal.close()
    assert commits == 16 * 80
    assert st["wal_write_path"] == "pwrite"
    assert st["wal_fsyncs"] * 3 < commits, st


def test_crash_before_fsync_with_pwrites_pending_never_loses_durable_records():
    for seed in range(100):
        rng = random.Random(seed)
        fs = SimFS()
        h = open_fresh(fs, mode="fsync", segment_size=SMALL)
        acked = []
        fs.arm("wal.before_fsync", rng.randrange(1, 40))
        try:
            for i in range(80):
                kv_ = (b"k%03d" % i, b"z" * rng.randrange(1, 2500))
                h.put(*kv_)
                acked.append(kv_)
        except SimulatedCrash:
            pass
        fs.disarm()
        h.wal.abandon()
        fs.crash(seed, "random")
        got = Harness(fs).recover(0)
        assert acked == kv(got)[:len(acked)], f"seed {seed}"
