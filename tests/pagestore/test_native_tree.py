"""The B+tree of the C core behaves like a sorted dict: random puts, deletes,
large (overflow) values, keys at the size limit, pages emptied by deletes,
scans in both directions with inclusive/exclusive/absent bounds. verify()
must pass after every phase, and must catch a structural fault."""

import bisect
import random

import pytest

from pagestore import _native, errors
from pagestore._native.testing import page_image


def new_core(page_size=4096, memory=64 << 20):
    c = _native.Core(page_size, memory, 1 << 20, 0)
    c.wal_disable()
    c.format_new()
    return c


def scan_all(core, lo, lo_incl, hi, hi_incl, reverse, step):
    """Page through scan_batch the way the facade does (continue past the last key)."""
    out = []
    while True:
        items = core.scan_batch(lo, lo_incl, hi, hi_incl, reverse, step)
        if not items:
            return out
        out.extend(items)
        if reverse:
            hi, hi_incl = items[-1][0], False
        else:
            lo, lo_incl = items[-1][0], False


def model_scan(model, lo, lo_incl, hi, hi_incl, reverse):
    keys = sorted(model)
    i = 0 if lo is None else (bisect.bisect_left(keys, lo) if lo_incl else bisect.bisect_right(keys, lo))
    j = len(keys) if hi is None else (bisect.bisect_right(keys, hi) if hi_incl else bisect.bisect_left(keys, hi))
    sel = [(k, model[k]) for k in keys[i:j]]
    return sel[::-1] if reverse else sel


def rand_key(rng, max_key):
    r = rng.random()
    if r < 0.05:
        return bytes(rng.getrandbits(8) for _ in range(max_key))      # at the limit
    if r < 0.10:
        return bytes([rng.randrange(3)]) * rng.randrange(0, 4)         # tiny / empty / shared prefix
    return rng.randbytes(rng.randrange(1, 40))


def rand_value(rng, max_inline):
    r = rng.random()
    if r < 0.05:
        return rng.randbytes(rng.randrange(max_inline, 40000))          # overflow chain
    if r < 0.10:
        return b""
    return rng.randbytes(rng.randrange(0, 300))


@pytest.mark.parametrize("page_size,seed", [(4096, 1), (1024, 2), (16384, 3)])
def test_tree_equals_dict_model_under_random_ops(page_size, seed):
    rng = random.Random(seed)
    core = new_core(page_size)
    model = {}
    for step in range(6000):
        r = rng.random()
        if r < 0.6 or not model:
            k = rand_key(rng, core.max_key)
            v = rand_value(rng, core.max_inline)
            assert core.put(k, v) == 0
            model[k] = v
        elif r < 0.9:
            k = rng.choice(list(model)) if rng.random() < 0.8 else rand_key(rng, core.max_key)
            assert (core.delete(k) == 0) == (k in model)
            model.pop(k, None)
        else:
            k = rng.choice(list(model))
            assert core.get(k) == model[k]
        if step % 1500 == 0:
            core.verify()
    info = core.verify()
    assert info["keys"] == len(model) == core.count()
    assert info["overflow_pages"] > 0
    for k, v in model.items():
        assert core.get(k) == v
    assert scan_all(core, None, True, None, False, False, 1 << 20) == sorted(model.items())


def test_scans_respect_bounds_in_both_directions():
    rng = random.Random(11)
    core = new_core()
    model = {}
    for _ in range(3000):
        k = rng.randbytes(rng.randrange(1, 6))
        v = rng.randbytes(rng.randrange(0, 50))
        core.put(k, v)
        model[k] = v
    keys = sorted(model)
    for _ in range(300):
        lo = rng.choice([None, rng.choice(keys), rng.randbytes(rng.randrange(0, 4))])
        hi = rng.choice([None, rng.choice(keys), rng.randbytes(rng.randrange(0, 4))])
        lo_incl, hi_incl, rev = rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.5
        step = rng.choice([1, 100, 4000, 1 << 20])
        want = model_scan(model, lo, lo_incl, hi, hi_incl, rev)
        assert scan_all(core, lo, lo_incl, hi, hi_incl, rev, step) == want, (lo, lo_incl, hi, hi_incl, rev)


def test_scan_batch_returns_at_least_one_item_and_stops_near_max_bytes():
    core = new_core()
    for i in range(1000):
        core.put(b"k%04d" % i, b"v" * 100)
    items = core.scan_batch(None, True, None, False, False, 1)
    assert items == [(b"k0000", b"v" * 100)]
    items = core.scan_batch(None, True, None, False, False, 10000)
    assert 10000 <= sum(len(k) + len(v) for k, v in items) < 10000 + 105
    assert core.scan_batch(b"k9", True, None, False, False, 1 << 20) == []


def test_big_values_round_trip_through_overflow_chains_and_are_freed():
    core = new_core()
    big = bytes(range(256)) * 65536                  # 16 MiB: MAX_VALUE
    assert len(big) == _native.MAX_VALUE
    core.put(b"big", big)
    assert core.get(b"big") == big
    n_ovf = core.verify()["overflow_pages"]
    assert n_ovf >= len(big) // 4096
    items = core.scan_batch(None, True, None, False, False, 1)
    assert items == [(b"big", big)]
    core.put(b"big", b"small now")
    info = core.verify()
    assert info["overflow_pages"] == 0 and info["free_ids"] + info["freelist_pages"] >= n_ovf
    with pytest.raises(errors.ValueTooLargeError):
        core.put(b"x", bytes(_native.MAX_VALUE + 1))
    # freed pages are reused: the page count does not grow for a second big value
    before = core.verify()["page_count"]
    core.put(b"big2", big)
    assert core.verify()["page_count"] == before


def test_keys_up_to_max_key_work_and_longer_keys_are_refused():
    core = new_core()
    assert core.max_key == _native.MAX_KEY == 1024
    rng = random.Random(5)
    model = {}
    # a shared 1016-byte prefix: separators (shortest distinguishing prefixes)
    # stay ~1020 bytes long, so inner nodes hold keys at the limit; every
    # key head ties, so searches go through the full-key path
    prefix = rng.randbytes(1016)
    for i in range(400):
        k = prefix + rng.randbytes(4) + i.to_bytes(4, "big")
        model[k] = rng.randbytes(rng.randrange(0, 3000))
        core.put(k, model[k])
    assert core.height() >= 3
    for i in range(200):
        k = rng.randbytes(1020) + i.to_bytes(4, "big")
        model[k] = rng.randbytes(rng.randrange(0, 300))
        core.put(k, model[k])
    core.verify()
    assert all(core.get(k) == v for k, v in model.items())
    with pytest.raises(errors.KeyTooLargeError):
        core.put(bytes(1025), b"")
    small = new_core(1024)
    assert small.max_key < 1024
    with pytest.raises(errors.KeyTooLargeError):
        small.put(bytes(small.max_key + 1), b"")
    small.put(bytes(small.max_key), b"ok")
    assert small.get(bytes(small.max_key)) == b"ok"


def test_deleting_everything_frees_every_page_and_collapses_the_root():
    core = new_core()
    keys = [b"%08d" % i for i in range(20000)]
    random.Random(9).shuffle(keys)
    for k in keys:
        core.put(k, b"x" * 60)
    assert core.height() >= 2
    pages = core.verify()["page_count"]
    for k in keys[:-1]:
        assert core.delete(k) >= 0
    info = core.verify()
    assert core.height() == 1 and info["leaf_pages"] == 1 and info["keys"] == 1
    # every page except meta and the root leaf is on the freelist
    assert info["free_ids"] + info["freelist_pages"] == pages - 2
    # and reused by new inserts before the file grows
    for k in keys:
        core.put(k, b"y" * 60)
    assert core.verify()["page_count"] == pages


def test_batch_applies_puts_and_deletes_in_order():
    core = new_core()
    ops = [(1, b"a", b"1"), (1, b"b", b"2"), (2, b"a", b""), (1, b"c", b"3"), (2, b"zz", b"")]
    core.apply_batch(_native.pack_ops(ops), 5)
    assert scan_all(core, None, True, None, False, False, 1 << 20) == [(b"b", b"2"), (b"c", b"3")]
    assert list(_native.unpack_ops(_native.pack_ops(ops))) == ops
    with pytest.raises(ValueError):
        core.apply_batch(b"\x07\x00", 1)


def _gap_is_zero(img):
    lo, hi = int.from_bytes(img[24:26], "little"), int.from_bytes(img[26:28], "little")
    assert 32 <= lo <= hi <= len(img)
    return img[lo:hi] == bytes(hi - lo)


@pytest.mark.parametrize("page_size,reserve", [(4096, 0), (1024, 32), (16384, 0)])
def test_every_page_gap_is_zero_after_random_churn(page_size, reserve):
    """The gap [free_lo, free_hi) of every page, of every type, is all zeros
    (docs/page-format.md): recovery-data compression drops it and restores
    zeros, and the page CRC must still match."""
    rng = random.Random(page_size)
    core = _native.Core(page_size, 64 << 20, 1 << 20, reserve)
    core.wal_disable()
    core.format_new()
    model = {}
    seen_types = set()

    def check_all_pages():
        info = core.verify()                           # verify checks the gaps too
        for pid in range(info["page_count"]):
            img = page_image(core, pid)
            assert img is not None
            seen_types.add(int.from_bytes(img[4:6], "little"))
            assert _gap_is_zero(img), f"page {pid} type {img[4]}: gap not zero"
            if reserve:
                assert img[page_size - reserve:] == bytes(reserve)

    for rnd in range(4):
        for _ in range(3000):
            r = rng.random()
            if r < 0.55 or not model:
                k = rand_key(rng, core.max_key)
                v = rand_value(rng, core.max_inline)
                core.put(k, v)
                model[k] = v
            else:
                k = rng.choice(list(model))
                core.delete(k)
                del model[k]
        if rnd == 2:                                   # batch deletes empty leaves and inner nodes
            ops = [(2, k, b"") for k in rng.sample(sorted(model), len(model) * 3 // 4)]
            core.apply_batch(_native.pack_ops(ops))
            for _, k, _ in ops:
                del model[k]
        check_all_pages()
    assert {_native.PAGE_META, _native.PAGE_LEAF, _native.PAGE_INNER,
            _native.PAGE_OVERFLOW, _native.PAGE_FREELIST} <= seen_types
    assert sorted(scan_all(core, None, True, None, True, False, 1 << 16)) == sorted(model.items())


def test_pack_puts_is_pack_ops_of_puts():
    from pagestore import _native
    pairs = [(b"k%d" % i, b"v" * i) for i in range(50)] + [(bytearray(b"x"), memoryview(b"y"))]
    want = _native.pack_ops((1, bytes(k), bytes(v)) for k, v in pairs)
    assert _native.pack_puts(pairs, bytes, bytes) == want
    with pytest.raises(TypeError):
        _native.pack_puts([("str", b"v")], lambda k: (_ for _ in ()).throw(TypeError("str")), bytes)
