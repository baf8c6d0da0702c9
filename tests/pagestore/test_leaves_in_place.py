"""A get that misses only its leaf while page memory has no empty slot reads
that leaf from the map of the page file into a buffer of its own, checks it
and answers from it, without loading it: no slot taken, nothing evicted, no
write lock (csrc/btree.c, "leaves read in place"; docs/page-memory.md). The
copy is checked before anything in it is used, so a leaf that a write is
changing under the map at that moment (or a damaged one) is never answered
from: the get goes on to the ordinary load, which reads the page again and
alone decides whether it is damaged. A leaf read in place twice within a
short while is loaded the second time, so leaves that gets keep coming back
to settle into page memory. Sealed pages are never read in place.

Which leaves were read in place a moment ago is remembered process-wide, so
the tests that count run in a child process of their own, where it starts
empty. Every precondition is made, not waited for: page memory is filled by
gets until no slot is empty, whatever the machine's speed."""

import json
import subprocess
import sys
import textwrap

import pagestore
from pagestore.database import engine_of

OPTS = dict(memory_size=1 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)

# The child's common part: a store of 40,000 keys (~1,300 leaves) reopened
# with 1 MiB of page memory (256 slots), filled by gets until no slot is empty.
PRELUDE = textwrap.dedent("""
    import json, os, random, sys
    import pagestore
    from pagestore import _native
    from pagestore._native import testing
    from pagestore.database import engine_of
    path = sys.argv[1]
    opts = dict(memory_size=1 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)
    rng = random.Random(5)
    keys = sorted({rng.randbytes(16) for _ in range(40000)})
    def value(k):
        return k * 6 + k[:4]
    with pagestore.open(path, **opts) as db:
        for i in range(0, len(keys), 2000):
            db.put_many((k, value(k)) for k in keys[i:i + 2000])
    db = pagestore.open(path, **opts)
    core = engine_of(db).core
    sig = core.signals
    for k in keys[::5]:
        if sig.slots_used >= sig.slots_total:
            break
        assert db.get(k) == value(k)
    assert sig.slots_used == sig.slots_total, "page memory did not fill"
    def counts():
        return {"loads": sig.page_loads, "in_place": sig.leaves_read_in_place,
                "evictions": sig.evictions}
    def delta(before):
        return {k: v - before[k] for k, v in counts().items()}
    def leaf_of(k):
        # the page of the file holding k's cell: 16 random bytes appear whole
        # only in their leaf (separators above are short prefixes)
        data = open(os.path.join(path, "pages.dat"), "rb").read()
        at = data.find(k)
        while at >= 0:
            pid = at // core.page_size
            page = data[pid * core.page_size:(pid + 1) * core.page_size]
            if int.from_bytes(page[_native.PH_TYPE:_native.PH_TYPE + 2], "little") == _native.PAGE_LEAF:
                return pid
            at = data.find(k, at + 1)
        raise AssertionError("key not found in pages.dat")
""")


def _child(tmp_path, body: str) -> dict:
    run = subprocess.run([sys.executable, "-X", "faulthandler", "-c", PRELUDE + textwrap.dedent(body),
                          str(tmp_path / "s")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_get_missing_only_its_leaf_reads_it_in_place_when_page_memory_is_full(tmp_path):
    out = _child(tmp_path, """
        sample = random.Random(8).sample(keys, 1000)
        before = counts()
        for k in sample:
            assert db.get(k) == value(k)
        print(json.dumps(delta(before)))
        os._exit(0)
    """)
    # ~700 of the ~1,300 leaves are met, ~80 % of them not in memory; a leaf
    # met again a moment later is loaded instead (~240 loads)
    assert out["in_place"] > 300
    assert out["loads"] * 2 < out["in_place"]
    assert out["evictions"] == out["loads"]      # only loads evict: a read in place takes no slot


def test_a_leaf_changed_under_the_map_is_not_answered_from_but_read_again_by_the_load(tmp_path):
    out = _child(tmp_path, """
        D = object()
        reader = _native.reader(core)
        for k in keys[1::97]:                    # a key whose leaf is not in page memory
            pid = leaf_of(k)
            if testing.page_image(core, pid) is None:
                break
        else:
            raise AssertionError("every leaf tried is in page memory")
        fd = os.open(os.path.join(path, "pages.dat"), os.O_RDWR)
        at, half = pid * core.page_size, core.page_size // 2
        whole = os.pread(fd, core.page_size, at)
        # what a reader of the map sees while a write of the page is under way:
        # the first half new, the second half still old (here: changed bytes)
        os.pwrite(fd, bytes(b ^ 0x5A for b in whole[half:]), at + half)
        before = counts()
        answer = reader.get(k, D)                # the read-locked get, which cannot load
        torn = {"slow": answer is _native.SLOW, "resident": testing.page_image(core, pid) is not None,
                **delta(before)}
        os.pwrite(fd, whole, at)                 # the write done: the page whole again
        os.close(fd)
        before = counts()
        after = {"right": db.get(k) == value(k), **delta(before)}
        print(json.dumps({"torn": torn, "after": after}))
        os._exit(0)
    """)
    torn, after = out["torn"], out["after"]
    assert torn == {"slow": True, "resident": False, "loads": 0, "in_place": 0, "evictions": 0}
    assert after["right"] and after["loads"] == 1


def test_leaves_gets_keep_coming_back_to_settle_into_page_memory(tmp_path):
    out = _child(tmp_path, """
        hot, leaves = [], set()
        for k in keys[3::61]:                    # 20 keys of 20 leaves not in memory
            pid = leaf_of(k)
            if pid not in leaves and testing.page_image(core, pid) is None:
                hot.append(k)
                leaves.add(pid)
            if len(hot) == 20:
                break
        rounds = []
        for _ in range(10):
            before = counts()
            for k in hot:
                assert db.get(k) == value(k)
            rounds.append(delta(before))
            if rounds[-1]["loads"] == rounds[-1]["in_place"] == 0:
                break
        print(json.dumps({"hot": len(hot), "rounds": rounds}))
        os._exit(0)
    """)
    assert out["hot"] == 20
    rounds = out["rounds"]
    # met once: read in place; again: loaded; from then on: in memory
    assert [r["in_place"] for r in rounds] == [20, 0, 0]
    assert [r["loads"] for r in rounds] == [0, 20, 0]


def test_sealed_pages_are_loaded_never_read_in_place(tmp_path):
    import random
    key = bytes(range(32))
    rng = random.Random(5)
    keys = sorted({rng.randbytes(16) for _ in range(20000)})
    with pagestore.open(tmp_path / "s", encryption_key=key, **OPTS) as db:
        for i in range(0, len(keys), 2000):
            db.put_many((k, k * 6) for k in keys[i:i + 2000])
    with pagestore.open(tmp_path / "s", encryption_key=key, **OPTS) as db:
        sig = engine_of(db).core.signals
        for k in keys[::5]:
            if sig.slots_used >= sig.slots_total:
                break
            assert db.get(k) == k * 6
        assert sig.slots_used == sig.slots_total
        loads = sig.page_loads
        for k in random.Random(8).sample(keys, 500):
            assert db.get(k) == k * 6
        assert sig.leaves_read_in_place == 0
        assert sig.page_loads - loads > 200
