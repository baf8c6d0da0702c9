"""The "data outgrows memory" scenario: every store loads the same keys and
finds every one of them, the table gives ratios to LMDB and RocksDB, and the
figures land in the bench's summary dataset."""

import json

import pytest

from bench import outgrowth
from bench.results import read_dataset
from bench.schema import SCHEMAS

MiB = 1 << 20


@pytest.fixture(scope="module")
def rows():
    # data ~3x a 1 MiB page memory: batches larger than it holds are split
    return outgrowth.run([("small", 20_000, 1 * MiB)], stores=("pagestore", "lmdb", "rocksdict"),
                         gets=3_000, say=lambda *_: None)


def test_each_store_loads_and_reads_the_same_keys(rows):
    assert [r["store"] for r in rows] == ["pagestore", "lmdb", "rocksdict"]
    for r in rows:
        assert r["keys"] == 20_000 and r["load_per_s"] > 0 and r["get_per_s"] > 0
    ps = rows[0]
    assert ps["page_memory_size"] == 1 * MiB
    # the data did outgrow page memory: pages were evicted and read back
    assert ps["evictions"] > 0 and ps["page_loads"] > 0


def test_a_store_that_loses_keys_is_reported_not_measured(monkeypatch, tmp_path):
    real = outgrowth.Peer.__init__

    def lossy(self, name, path, memory_size):
        real(self, name, path, memory_size)
        load = self.load
        self.load = lambda batch: load(batch[:-1])      # drops one key per batch

    monkeypatch.setattr(outgrowth.Peer, "__init__", lossy)
    work = outgrowth.Workload(12_000, 12_000)
    with pytest.raises(RuntimeError, match="loaded keys not found"):
        outgrowth.measure("lmdb", work, None, str(tmp_path))


def test_the_table_gives_ratios_to_lmdb_and_rocksdb(rows):
    text = outgrowth.table(rows)
    lmdb_line = next(line for line in text.splitlines() if "| LMDB |" in line)
    assert lmdb_line.split("|")[4].strip() == "1.00"       # load ×LMDB of LMDB itself
    ps, lm = rows[0], rows[1]
    ps_line = next(line for line in text.splitlines() if "| pagestore |" in line)
    assert ps_line.split("|")[4].strip() == f"{ps['load_per_s'] / lm['load_per_s']:.2f}"


def test_the_figures_are_summary_rows_of_the_bench_schema(rows, tmp_path):
    from bench.results import write_dataset
    out = outgrowth.summary_rows(rows, "rtest-outgrow")
    assert {c for r in out for c in r} <= set(SCHEMAS["summary"].names)
    write_dataset(str(tmp_path), "summary", out)
    back = read_dataset(str(tmp_path), "summary").to_pylist()
    assert {(r["store"], r["op_style"]) for r in back} == {
        (s, o) for s in ("pagestore", "lmdb", "rocksdict") for o in ("load", "get")}
    assert all(r["scenario"] == "outgrows-memory" for r in back)
    ps_load = next(r for r in back if r["store"] == "pagestore" and r["op_style"] == "load")
    assert ps_load["ops"] == 20_000 and json.loads(ps_load["config_json"])["memory_size"] == 1 * MiB
