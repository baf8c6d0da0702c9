"""Reads that miss: the C core serves a page miss itself -- pread, open the
sealed page of an encrypted store, check -- without calling `read_page`, and
still reports a page that does not authenticate by file and page; a scan that
crosses into a leaf not in memory loads the next leaves its parent points to
at once (readahead), never failing the scan and never evicting a dirty page.

Every precondition is made, not waited for: a store reopened with page memory
smaller than its data starts with nothing of its tree in memory, so its first
reads miss whatever the machine's speed."""

import random

import pytest

import pagestore
from pagestore import _native

KEY = bytes(range(32))
PS = 4096
# 64 KiB leaves' worth of cells per MiB: 16-byte keys, 100-byte values, so a
# 4 KiB leaf holds at most ~33 items
OPTS = dict(memory_size=1 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)


def _keys(n, seed=3):
    rng = random.Random(seed)
    return sorted({rng.randbytes(16) for _ in range(n)})


def _value(k):
    return k * 6 + k[:4]


def _fill(path, keys, **opts):
    with pagestore.open(path, **OPTS, **opts) as db:
        for i in range(0, len(keys), 2000):
            db.put_many((k, _value(k)) for k in keys[i:i + 2000])


class CountingReads:
    """Stands in for the core's `read_page` callback and counts its calls."""

    def __init__(self, read_page):
        self.inner, self.calls = read_page, 0

    def __call__(self, page_id, buf):
        self.calls += 1
        return self.inner(page_id, buf)


def _count_callback_reads(db):
    cb = db._engine.core._cb
    counter = CountingReads(cb.read_page)
    cb.read_page = counter
    return counter


# -- encrypted misses ---------------------------------------------------------------
def test_an_encrypted_miss_is_opened_in_c_without_calling_read_page(tmp_path):
    keys = _keys(40_000)                     # ~5 MiB of pages against 1 MiB of page memory
    _fill(tmp_path / "s", keys, encryption_key=KEY)
    with pagestore.open(tmp_path / "s", encryption_key=KEY, **OPTS) as db:
        core = db._engine.core
        reads = _count_callback_reads(db)
        loads = core.signals.page_loads
        rng = random.Random(5)
        for k in rng.sample(keys, 3000):
            assert db.get(k) == _value(k)
        assert core.signals.page_loads - loads > 1000     # the gets did miss
        assert reads.calls == 0


def test_a_damaged_page_of_an_encrypted_store_is_named_on_a_miss_served_in_c(tmp_path):
    keys = _keys(40_000)
    _fill(tmp_path / "s", keys, encryption_key=KEY)
    pages = tmp_path / "s" / "pages.dat"
    raw = bytearray(pages.read_bytes())
    count = len(raw) // PS
    bad = count // 2
    raw[bad * PS + 700] ^= 0x10              # one bit of one sealed page's ciphertext
    pages.write_bytes(bytes(raw))
    with pagestore.open(tmp_path / "s", encryption_key=KEY, **OPTS) as db:
        with pytest.raises(pagestore.EncryptionError) as e:
            for k in keys:                   # every leaf is read: the damaged one too
                assert db.get(k) == _value(k)
        assert "pages.dat" in str(e.value) and f"page {bad}:" in str(e.value)
        assert "authentication failed" in str(e.value)
        for k in keys[:50]:                  # the store goes on serving the other pages
            db.get(k)


def test_an_encrypted_store_scans_cold_with_readahead_in_order(tmp_path):
    keys = _keys(40_000)
    _fill(tmp_path / "s", keys, encryption_key=KEY)
    with pagestore.open(tmp_path / "s", encryption_key=KEY, **OPTS) as db:
        reads = _count_callback_reads(db)
        assert [k for k, _ in db.scan()] == keys
        assert reads.calls == 0


# -- readahead --------------------------------------------------------------------
def test_a_scan_that_misses_a_leaf_loads_the_next_leaves_of_its_parent_with_it(tmp_path):
    keys = _keys(40_000)
    _fill(tmp_path / "s", keys)
    with pagestore.open(tmp_path / "s", **OPTS) as db:
        core = db._engine.core
        height = core.height()
        start = keys[len(keys) // 3]
        loads = core.signals.page_loads
        first = core.scan_batch(start, True, None, False, False, 1)
        assert first[0][0] == start
        assert core.signals.page_loads - loads >= height + 4   # the path and leaves after it
        # the next 100 items (at least three leaves of ~33) are in memory already
        loads = core.signals.page_loads
        got = core.scan_batch(start, False, None, False, False, 100 * 116)
        assert [k for k, _ in got] == keys[len(keys) // 3 + 1:][:len(got)] and len(got) >= 100
        assert core.signals.page_loads == loads


@pytest.mark.parametrize("reverse", [False, True])
def test_a_cold_scan_with_readahead_returns_every_key_in_order(tmp_path, reverse):
    keys = _keys(40_000)                     # ~4x page memory
    _fill(tmp_path / "s", keys)
    with pagestore.open(tmp_path / "s", **OPTS) as db:
        core = db._engine.core
        loads = core.signals.page_loads
        got = list(db.scan(reverse=reverse))
        assert [k for k, _ in got] == (keys[::-1] if reverse else keys)
        assert all(v == _value(k) for k, v in got)
        assert core.signals.page_loads - loads > core.signals.slots_total  # it did outgrow memory


def test_point_gets_do_not_read_ahead(tmp_path):
    keys = _keys(40_000)
    _fill(tmp_path / "s", keys)
    with pagestore.open(tmp_path / "s", **OPTS) as db:
        core = db._engine.core
        height = core.height()
        loads = core.signals.page_loads
        assert db.get(keys[12345]) == _value(keys[12345])
        assert core.signals.page_loads - loads <= height


# -- readahead when page memory is full of dirty pages ------------------------------
class FileDisk:
    """A page file the core preads itself (set_page_fd); checkpoints write it."""

    def __init__(self, path):
        self.f = open(path, "w+b")

    def read_page(self, page_id, buf):
        self.f.seek(page_id * PS)
        buf[:] = self.f.read(PS)

    def checkpoint(self, core, cid):
        ids, _lsn = core.ckpt_begin(cid)
        out = bytearray(len(ids) * PS)
        core.ckpt_copy(ids, out)
        for i, pid in enumerate(ids):
            self.f.seek(pid * PS)
            self.f.write(out[i * PS:(i + 1) * PS])
        self.f.flush()
        core.ckpt_release(ids)
        core.ckpt_end()


def test_readahead_with_no_free_slot_never_fails_a_scan_nor_evicts_a_dirty_page(tmp_path):
    disk = FileDisk(tmp_path / "pages.dat")
    core = _native.Core(PS, 128 * PS, 64 * PS, 0, read_page=disk.read_page)
    core.wal_disable()
    core.format_new()
    core.set_page_fd(disk.f.fileno())
    rng = random.Random(11)
    model, cid = {}, 1
    while len(model) < 20_000:               # ~4x page memory, checkpointed as it fills
        k = rng.randbytes(16)
        try:
            core.put(k, _value(k))
        except _native.Retry:
            disk.checkpoint(core, cid)
            cid += 1
            continue
        model[k] = _value(k)
    disk.checkpoint(core, cid)
    # dirty page memory until all but a few slots hold changes no checkpoint wrote
    keys = sorted(model)
    total = core.signals.slots_total
    for k in rng.sample(keys, len(keys)):
        if core.signals.dirty_pages >= total - 4:
            break
        try:
            core.put(k, b"changed" + k)
        except _native.Retry:
            break
        model[k] = b"changed" + k
    dirty = core.signals.dirty_pages
    assert dirty >= total - 12
    got, lo, incl = [], None, True
    while True:
        batch = core.scan_batch(lo, incl, None, False, False, 4096)
        if not batch:
            break
        got += batch
        lo, incl = batch[-1][0], False
    assert got == sorted(model.items())      # every change read back: no dirty page was dropped
    assert core.signals.dirty_pages == dirty
    core.close()


# -- a get that misses, served by the fast reader -------------------------------------
@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_a_get_that_misses_is_loaded_in_c_not_through_pythons_ordinary_path(tmp_path, encrypted):
    opts = dict(encryption_key=KEY) if encrypted else {}
    keys = _keys(40_000)
    _fill(tmp_path / "s", keys, **opts)
    with pagestore.open(tmp_path / "s", **OPTS, **opts) as db:
        core = db._engine.core
        ordinary = CountingReads(db._core_get)     # the cffi get, which Python calls on SLOW
        db._core_get = ordinary
        reads = _count_callback_reads(db)
        loads = core.signals.page_loads
        for k in random.Random(8).sample(keys, 2000):
            assert db.get(k) == _value(k)
            assert db.get(k + b"?") is None         # absent keys that miss, too
        assert core.signals.page_loads - loads > 500
        assert ordinary.calls == 0 and reads.calls == 0


def test_a_damaged_page_met_by_a_get_is_named_each_time_and_the_rest_still_reads(tmp_path):
    keys = _keys(40_000)
    _fill(tmp_path / "s", keys)
    pages = tmp_path / "s" / "pages.dat"
    raw = bytearray(pages.read_bytes())
    bad = len(raw) // PS // 2
    raw[bad * PS + 900] ^= 0x04
    pages.write_bytes(bytes(raw))
    with pagestore.open(tmp_path / "s", **OPTS) as db:
        victims = []
        for k in keys:
            try:
                assert db.get(k) == _value(k)
            except pagestore.CorruptionError as e:
                assert "pages.dat" in str(e) and f"page {bad} " in str(e)
                victims.append(k)
        assert victims                           # the damaged leaf's keys, each reported
        for k in victims[:3]:                    # again, by its own error each time
            with pytest.raises(pagestore.CorruptionError, match=f"page {bad} "):
                db.get(k)
        assert db.get(keys[0]) == _value(keys[0])
