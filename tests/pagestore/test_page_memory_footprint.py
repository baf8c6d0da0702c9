"""Page memory defaults to a fifth of physical RAM, like Ignite's default data
region, and costs resident memory only as pages are used: a small store with
default options stays small in RAM, whatever the machine's size."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import pagestore
from pagestore.config import GiB, MiB, Config, default_memory_size, make_config

RSS_LIMIT = 64 * MiB

# Opens a store, puts 3 keys, prints the growth of VmRSS and RssAnon since
# just before the open (the interpreter and the imports are not the store's).
_PROBE = textwrap.dedent("""
    import json, sys, tempfile
    import pagestore

    def rss():
        out = {}
        for line in open("/proc/self/status"):
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon"):
                out[name] = int(value.split()[0]) * 1024
        return out

    options = json.loads(sys.argv[1])
    with tempfile.TemporaryDirectory() as d:
        before = rss()
        db = pagestore.open(d, **options)
        for i in range(3):
            db.put(b"key%d" % i, b"v" * 100)
        after = rss()
        stats = db.stats()
        db.close()
    print(json.dumps({"growth": {k: after[k] - before[k] for k in before},
                      "page_memory_size": stats["page_memory_size"]}))
""")


def _physical_ram() -> int:
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        limit = open("/sys/fs/cgroup/memory.max").read().strip()
        if limit.isdigit():
            ram = min(ram, int(limit))
    except OSError:
        pass
    return ram


def _probe(options: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(options)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_default_page_memory_is_a_fifth_of_physical_ram():
    fifth = _physical_ram() // 5
    assert fifth - 2 * MiB < default_memory_size() <= fifth or default_memory_size() == 64 * MiB
    assert Config().memory_size == default_memory_size()
    assert make_config().memory_size == default_memory_size()


def test_memory_size_still_overrides_the_default():
    assert make_config(memory_size=64 * MiB).memory_size == 64 * MiB


def test_checkpoint_buffer_is_a_quarter_of_page_memory_and_at_most_2_gib():
    assert Config(memory_size=1 * GiB).cow_buffer_size == 256 * MiB
    assert Config(memory_size=16 * GiB).cow_buffer_size == 2 * GiB
    assert Config(memory_size=16 * GiB, checkpoint_buffer_size=4 * GiB).cow_buffer_size == 4 * GiB


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="under AddressSanitizer (PAGESTORE_SANITIZE=1) its shadow memory is resident too")
@pytest.mark.parametrize("scale", [1, 2], ids=["default options", "twice the default memory_size"])
def test_a_three_key_store_costs_little_resident_memory_whatever_memory_size(scale):
    options = {} if scale == 1 else {"memory_size": scale * default_memory_size()}
    got = _probe(options)
    assert got["page_memory_size"] >= scale * default_memory_size() - 4 * MiB
    assert got["growth"]["VmRSS"] <= RSS_LIMIT, got
    assert got["growth"]["RssAnon"] <= RSS_LIMIT, got


def test_stats_report_page_memory_in_use_resident_and_dirty(tmp_path):
    with pagestore.open(tmp_path, memory_size=64 * MiB) as db:
        fresh = db.stats()
        assert fresh["page_memory_size"] == 64 * MiB
        db.put_many((b"%08d" % i, b"x" * 200) for i in range(20_000))
        loaded = db.stats()
        page = 4096
        assert loaded["page_memory_used"] == loaded["slots_used"] * page > fresh["page_memory_used"]
        assert loaded["page_memory_dirty"] == loaded["dirty_pages"] * page > 0
        assert loaded["page_memory_used"] <= loaded["page_memory_resident"] <= 64 * MiB + 16 * MiB
        db.checkpoint()
        clean = db.stats()
        assert clean["page_memory_dirty"] == 0
        assert clean["page_memory_used"] == loaded["page_memory_used"]
