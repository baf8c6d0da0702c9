"""A page miss copies its page out of a read-only map of the page file instead
of calling pread: a page the OS page cache holds costs no read system call;
every write to the file is seen (a page a checkpoint rewrote in place, a file
that grew past what was mapped); and a page the map cannot deliver (the file
cut short behind it) fails the get with an error that names the file, never
the process with SIGBUS.

Every precondition is made, not waited for: a store reopened with page memory
smaller than its data starts with nothing of its tree in memory, so its first
reads miss whatever the machine's speed."""

import os
import random
import subprocess
import sys
import textwrap

import pytest

import pagestore

# 1 MiB of page memory (256 pages) under stores of several MiB
OPTS = dict(memory_size=1 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)


def _keys(n, seed=5):
    rng = random.Random(seed)
    return sorted({rng.randbytes(16) for _ in range(n)})


def _value(k, tag=b""):
    return tag + k * 6 + k[:4]


def _fill(db, pairs, batch=2000):
    pairs = list(pairs)
    for i in range(0, len(pairs), batch):
        db.put_many(pairs[i:i + batch])


def _read_calls():
    """Read system calls this process has made (Linux's /proc/self/io `syscr`)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("syscr:"):
                return int(line.split()[1])
    raise AssertionError("/proc/self/io has no syscr line")


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux's /proc/self/io")
def test_a_miss_of_a_page_the_os_holds_makes_no_read_system_call(tmp_path):
    keys = _keys(40_000)
    with pagestore.open(tmp_path / "s", **OPTS) as db:
        _fill(db, ((k, _value(k)) for k in keys))
    (tmp_path / "s" / "pages.dat").read_bytes()        # the whole file in the OS page cache
    with pagestore.open(tmp_path / "s", **OPTS) as db:
        sig = db._engine.core.signals
        sample = random.Random(8).sample(keys, 2000)
        # a miss either loads its page or, page memory full, reads its leaf in place
        misses, reads = sig.page_loads + sig.leaves_read_in_place, _read_calls()
        for k in sample:
            assert db.get(k) == _value(k)
        misses = sig.page_loads + sig.leaves_read_in_place - misses
        reads = _read_calls() - reads
    assert misses > 1000                                # the gets did miss
    assert reads < misses // 20                         # a pread per miss would be >= misses


def test_a_miss_reads_a_page_a_checkpoint_rewrote_after_the_file_was_mapped(tmp_path):
    keys = _keys(40_000)
    with pagestore.open(tmp_path / "s", **OPTS) as db:
        _fill(db, ((k, _value(k)) for k in keys))
    with pagestore.open(tmp_path / "s", **OPTS) as db:
        for k in keys[::50]:                            # misses: the file is mapped now
            assert db.get(k) == _value(k)
        changed = set(keys[::7])
        _fill(db, ((k, _value(k, b"new")) for k in sorted(changed)), batch=100)
        db.checkpoint()                                 # written in place, then evictable
        for k in keys[1::3]:                            # cycles page memory many times over
            db.get(k)
        rng = random.Random(4)
        for k in rng.sample(keys, 4000):
            assert db.get(k) == _value(k, b"new" if k in changed else b"")


def test_a_miss_reads_pages_the_file_grew_by_after_it_was_mapped(tmp_path):
    old = _keys(20_000, seed=6)
    new = _keys(120_000, seed=7)                        # a file several times as long
    size = []
    with pagestore.open(tmp_path / "s", **OPTS) as db:
        _fill(db, ((k, _value(k)) for k in old))
    with pagestore.open(tmp_path / "s", **OPTS) as db:
        for k in old[::20]:                             # mapped at its first length
            assert db.get(k) == _value(k)
        size.append(os.path.getsize(tmp_path / "s" / "pages.dat"))
        _fill(db, ((k, _value(k)) for k in new))
        db.checkpoint()
        size.append(os.path.getsize(tmp_path / "s" / "pages.dat"))
        for k in random.Random(2).sample(old + new, 6000):
            assert db.get(k) == _value(k)
    assert size[1] > 2 * size[0]                        # past the map's spare quarter


# The child fills a store, reopens it, misses once (the file is mapped), cuts the
# file to a tenth behind the core's back, then reads every key: those whose pages
# were cut must fail with the library's error naming pages.dat.
CUT_SHORT = textwrap.dedent("""
    import os, random, sys
    import pagestore
    path = sys.argv[1]
    opts = dict(memory_size=1 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)
    rng = random.Random(9)
    keys = sorted({rng.randbytes(16) for _ in range(40000)})
    with pagestore.open(path, **opts) as db:
        for i in range(0, len(keys), 2000):
            db.put_many((k, k * 7) for k in keys[i:i + 2000])
    db = pagestore.open(path, **opts)
    assert db.get(keys[0]) == keys[0] * 7
    pages = os.path.join(path, "pages.dat")
    os.truncate(pages, os.path.getsize(pages) // 10 // 4096 * 4096)
    failed = named = 0
    for k in keys:
        try:
            db.get(k)
        except pagestore.Error as e:
            failed += 1
            named += "pages.dat" in str(e)
    print(failed, named)
    os._exit(0)     # the store is damaged on purpose: no close, no checkpoint
""")


def test_a_page_cut_from_the_file_behind_the_map_fails_the_get_by_name_not_the_process(tmp_path):
    run = subprocess.run([sys.executable, "-X", "faulthandler", "-c", CUT_SHORT, str(tmp_path / "s")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]      # -7 would be SIGBUS
    failed, named = map(int, run.stdout.split())
    assert failed > 1000 and named == failed
