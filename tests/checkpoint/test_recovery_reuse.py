"""Recovery files are recycled: the previous checkpoint's files are renamed to the
next checkpoint's names (durably) and overwritten, then cut to their records."""

import os
import random

import pagestore
from pagestore import diskio
from pagestore.checkpoint import recovery_file as rf
from pagestore.checkpoint.compression import PageCodec
from pagestore.checkpoint.format import parse_name
from pagestore.checkpoint.recovery_file import RecoveryFileWriter, read_recovery_file
from pagestore.diskio.layout import recovery_file_name
from tests.support.checkpoint_fakes import Harness, RecordingFS, make_page

PS = 4096


def _recovery_files(fs, cid):
    return sorted(n for n in fs.listdir("/db/cp") if parse_name(n)[1:2] == ("RECOVERY",) and parse_name(n)[0] == cid)


def test_next_checkpoint_overwrites_the_previous_checkpoints_recovery_files_in_place(tmp_path):
    # the same inodes, under the new checkpoint's names: blocks overwritten, not allocated anew
    db = pagestore.open(str(tmp_path / "db"), memory_size=64 << 20, checkpoint_interval=3600.0,
                        recovery_compression="disabled", checkpoint_threads=2)
    try:
        db.put_many([(b"k%08d" % i, b"v" * 100) for i in range(20_000)])
        db.checkpoint()
        cp = str(tmp_path / "db" / "cp")
        first = {n: os.stat(os.path.join(cp, n)).st_ino for n in os.listdir(cp) if "RECOVERY" in n}
        assert len(first) == 2
        db.put_many([(b"k%08d" % i, b"w" * 100) for i in range(20_000)])
        db.checkpoint()
        second = {n: os.stat(os.path.join(cp, n)).st_ino for n in os.listdir(cp) if "RECOVERY" in n}
    finally:
        db.close()
    assert not set(first) & set(second), "the old names must be gone"
    assert sorted(second.values()) == sorted(first.values())


def test_a_reused_longer_file_is_cut_to_exactly_the_new_records():
    h = Harness(64, PS, 1)
    h.modify(range(64))
    assert h.checkpoint() is not None
    big = {n: h.fs.size("/db/cp/" + n) for n in _recovery_files(h.fs, 1)}
    h.modify(range(0, 64, 16))                  # 4 pages: far fewer bytes than 64
    assert h.checkpoint() is not None
    files = _recovery_files(h.fs, 2)
    assert len(files) == 1 and not _recovery_files(h.fs, 1)
    got = {}
    for name in files:
        w = parse_name(name)[2]
        assert h.fs.size("/db/cp/" + name) < max(big.values()) // 4
        got.update(read_recovery_file(h.fs, "/db/cp/" + name, checkpoint_id=2, writer=w, page_size=PS))
    assert sorted(got) == list(range(0, 64, 16))
    assert all(got[p] == h.images[2][p] for p in got)
    h.close()


def test_renames_are_durable_before_any_new_record_is_written():
    h = Harness(64, PS, 2)
    h.modify(range(64))
    assert h.checkpoint() is not None
    fs = RecordingFS(h.fs)
    h.fs = fs
    h.cp.fs = fs
    h.modify(range(0, 64, 2))
    assert h.checkpoint() is not None
    log = fs.log
    renames = [i for i, e in enumerate(log) if e[0] == "rename" and "RECOVERY" in e[1]]
    writes = [i for i, e in enumerate(log) if e[0] == "pwrite" and "RECOVERY" in e[1]]
    assert renames, "the previous checkpoint's files were not reused"
    assert {log[i][1] for i in renames} <= {"/db/cp/" + recovery_file_name(2, w) for w in range(2)}
    syncs = [i for i, e in enumerate(log) if e == ("fsync_dir", "/db/cp") and i > max(renames)]
    assert syncs and syncs[0] < min(writes)
    h.close()


def _write_pages(fs, path, pages):
    rng = random.Random(3)
    w = RecoveryFileWriter(fs, path, 5, 0, PS, PageCodec("disabled", None, PS))
    for i in range(0, pages, 64):
        ids = list(range(i, min(pages, i + 64)))
        w.append(ids, memoryview(b"".join(bytes(make_page(p, PS, rng)) for p in ids)))
    w.sync()
    w.close()
    return w


def test_each_flush_of_a_posix_recovery_file_starts_its_write_back(tmp_path, monkeypatch):
    # the device writes while the threads frame the next chunks; fsync waits only for the tail
    calls = []
    monkeypatch.setattr(rf, "_SYNC_FILE_RANGE", lambda fd, off, n, flags: calls.append((off, n, flags)))
    w = _write_pages(diskio.PosixFS(), str(tmp_path / "r.bin"), 700)     # ~2.8 MB: three flushes
    assert len(calls) >= 3 and all(flags == rf._SYNC_FILE_RANGE_WRITE for _o, _n, flags in calls)
    # the ranges cover every byte after the header, in order, with no gap
    assert calls[0][0] == w.offset - sum(n for _o, n, _f in calls)
    assert all(a[0] + a[1] == b[0] for a, b in zip(calls, calls[1:]))
    assert calls[-1][0] + calls[-1][1] == w.offset == os.path.getsize(tmp_path / "r.bin")


def test_a_simulated_recovery_file_has_no_write_back_to_start(monkeypatch):
    calls = []
    monkeypatch.setattr(rf, "_SYNC_FILE_RANGE", lambda *a: calls.append(a))
    fs = diskio.SimFS()
    fs.makedirs("/d")
    _write_pages(fs, "/d/r.bin", 300)
    assert calls == []
