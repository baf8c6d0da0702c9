"""The "data outgrows memory" scenario: every store loads the same keys and
finds every one of them, in rounds; the table gives per-round ratios to LMDB
and RocksDB with their spread; the figures land in the bench's summary dataset
under the quick session, and ``quick`` runs the scenario."""

import json

import pytest

from bench import outgrowth
from bench import outgrowth_table as ot
from bench.results import read_dataset, write_dataset
from bench.schema import SCHEMAS

MiB = 1 << 20
STORES = ("pagestore", "lmdb", "rocksdict")


@pytest.fixture(scope="module")
def rows():
    # data ~3x a 1 MiB page memory: batches larger than it holds are split
    return outgrowth.run([("small", 20_000, 1 * MiB)], stores=STORES, gets=3_000, say=lambda *_: None,
                         rounds=2)


def test_each_store_loads_and_reads_the_same_keys_in_every_round(rows):
    assert [(r["round"], r["store"]) for r in rows] == [
        (0, "pagestore"), (0, "lmdb"), (0, "rocksdict"), (1, "lmdb"), (1, "rocksdict"), (1, "pagestore")]
    for r in rows:
        assert r["keys"] == 20_000 and r["load_per_s"] > 0 and r["get_per_s"] > 0
        assert r["page_memory"] == 1 * MiB and r["data_ratio"] == round(20_000 * outgrowth.ENTRY / MiB, 1)
    ps = rows[0]
    assert ps["page_memory_size"] == 1 * MiB
    # the data did outgrow page memory: pages were evicted and read back
    assert ps["evictions"] > 0 and ps["page_loads"] > 0


def test_checkpoint_cleaning_is_reported_beside_the_devices_sequential_write_rate(rows):
    ps = rows[0]
    assert ps["checkpoints"] > 0 and ps["ckpt_pages"] > 0 and ps["ckpt_seconds"] > 0
    assert ps["ckpt_pages_per_s"] == pytest.approx(ps["ckpt_pages"] / ps["ckpt_seconds"])
    # each cleaned page costs two writes: the device's page limit is half its rate in pages
    assert ps["device_write_per_s"] > 0
    assert ps["device_pages_per_s"] == pytest.approx(ps["device_write_per_s"] / outgrowth.PAGE / 2)
    # the peers have no checkpoints to report
    assert all("ckpt_pages_per_s" not in r for r in rows if r["store"] != "pagestore")


def test_the_keys_the_devices_scattered_writes_carry_follow_from_the_pages_written_per_key(rows):
    ps = rows[0]
    assert ps["page_file_bytes"] > 0 and ps["ckpt_count"] > 0 and ps["device_scattered_pages_per_s"] > 0
    assert ps["pages_written_per_key"] == pytest.approx(ps["pages_written"] / ps["keys"])
    assert ps["inplace_keys_per_s"] == pytest.approx(ps["device_scattered_pages_per_s"] / ps["pages_written_per_key"])


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


def test_a_data_dir_that_does_not_exist_yet_is_made(tmp_path):
    work = outgrowth.Workload(2_000, 200)
    r = outgrowth.measure("lmdb", work, None, str(tmp_path / "not" / "yet"))
    assert r["load_per_s"] > 0 and (tmp_path / "not" / "yet").is_dir()


def test_ratios_are_taken_within_a_round_and_shown_with_their_spread(rows):
    tbl = ot.table(ot.per_round(outgrowth.summary_rows(rows, "rtest", "q1")))
    ps = tbl[tbl["store"] == "pagestore"].iloc[0]
    by = {(r["round"], r["store"]): r for r in rows}
    per_round = sorted(by[(n, "pagestore")]["load_per_s"] / by[(n, "lmdb")]["load_per_s"] for n in (0, 1))
    got = ps["load_x_lmdb"]
    assert got["n"] == 2 and got["lo"] == pytest.approx(per_round[0]) and got["hi"] == pytest.approx(per_round[1])
    assert got["median"] == pytest.approx(sum(per_round) / 2)
    flat = ot.flat(tbl)
    line = flat[flat["store"] == "pagestore"].iloc[0]
    assert line["load ÷ LMDB"] == f"{got['median']:.2f}× ({per_round[0]:.2f}–{per_round[1]:.2f})"
    # a reference store against itself is a dash, not a ratio
    assert flat[flat["store"] == "LMDB"].iloc[0]["load ÷ LMDB"] == "–"
    assert ps["load_per_s"] == pytest.approx((by[(0, "pagestore")]["load_per_s"]
                                              + by[(1, "pagestore")]["load_per_s"]) / 2)


def test_the_figures_are_summary_rows_of_the_bench_schema(rows, tmp_path):
    out = outgrowth.summary_rows(rows, "rtest-outgrow", "q20261127T050000-abcdef")
    assert {c for r in out for c in r} <= set(SCHEMAS["summary"].names)
    write_dataset(str(tmp_path), "summary", out)
    back = read_dataset(str(tmp_path), "summary").to_pylist()
    assert {(r["store"], r["op_style"], r["round"]) for r in back} == {
        (s, o, n) for s in STORES for o in ("load", "get") for n in (0, 1)}
    assert all(r["scenario"] == r["experiment"] == "outgrows-memory" for r in back)
    assert {r["session"] for r in back} == {"q20261127T050000-abcdef"}
    # one run id per (round, case, store): no reader sums two runs' rates as one
    assert len({r["run_id"] for r in back}) == 2 * len(STORES)
    ps_load = next(r for r in back if r["store"] == "pagestore" and r["op_style"] == "load")
    conf = json.loads(ps_load["config_json"])
    assert ps_load["ops"] == 20_000 and conf["memory_size"] == conf["page_memory"] == 1 * MiB
    assert conf["data_ratio"] == round(20_000 * outgrowth.ENTRY / MiB, 1)


def _fake(store, ratio, rnd, load, get, memory=3 * MiB):
    keys = int(ratio * memory // outgrowth.ENTRY)
    return dict(store=store, case=f"data {ratio}x", keys=keys, load_s=keys / load, get_s=1000 / get,
                load_per_s=load, get_per_s=get, memory_size=memory, page_memory=memory,
                data_ratio=float(ratio), round=rnd)


def test_the_table_reads_the_newest_session_only():
    old = outgrowth.summary_rows([_fake("pagestore", 4, 0, 1.0, 1.0), _fake("lmdb", 4, 0, 1.0, 1.0)], "a", "q1")
    new = outgrowth.summary_rows([_fake("pagestore", 4, 0, 50.0, 10.0), _fake("lmdb", 4, 0, 100.0, 40.0)],
                                 "b", "q2")
    tbl = ot.table(ot.per_round(old + new))
    assert list(tbl["load_per_s"]) == pytest.approx([50.0, 100.0])
    assert tbl.iloc[0]["load_x_lmdb"]["median"] == pytest.approx(0.5)
    assert tbl.iloc[0]["get_x_lmdb"]["median"] == pytest.approx(0.25)


def test_the_sentence_states_pagestores_rates_at_the_smallest_and_largest_ratio():
    fakes = [_fake("pagestore", 1, 0, 60_000.0, 600_000.0), _fake("lmdb", 1, 0, 600_000.0, 1_200_000.0),
             _fake("rocksdict", 1, 0, 750_000.0, 500_000.0),
             _fake("pagestore", 10, 0, 20_000.0, 240_000.0), _fake("lmdb", 10, 0, 400_000.0, 800_000.0),
             _fake("rocksdict", 10, 0, 200_000.0, 200_000.0)]
    text = ot.sentence(ot.table(ot.per_round(outgrowth.summary_rows(fakes, "s", "q"))))
    assert text == ("With 3 MiB of page memory and data growing from 1× to 10× of it, pagestore loaded "
                    "60,000 → 20,000 keys/s (0.10 → 0.05× LMDB, 0.08 → 0.10× RocksDB) and served "
                    "600,000 → 240,000 gets/s (0.50 → 0.30× LMDB); one round, so no spread to judge it by.")


def test_the_sentence_states_one_data_size_as_it_is_not_as_an_arrow_to_itself():
    fakes = [_fake("pagestore", 4, 0, 60_000.0, 600_000.0), _fake("lmdb", 4, 0, 600_000.0, 1_200_000.0),
             _fake("rocksdict", 4, 0, 750_000.0, 500_000.0)]
    text = ot.sentence(ot.table(ot.per_round(outgrowth.summary_rows(fakes, "s", "q"))))
    assert text == ("With 3 MiB of page memory and data 4× of it, pagestore loaded 60,000 keys/s "
                    "(0.10× LMDB, 0.08× RocksDB) and served 600,000 gets/s (0.50× LMDB); "
                    "one round, so no spread to judge it by.")


def test_quick_runs_the_scenario_and_writes_its_rows_under_the_session(monkeypatch, tmp_path):
    from bench import cli
    monkeypatch.setattr(outgrowth, "QUICK", dict(memory_size=1 * MiB, ratios=(1, 2), gets=500, rounds=1),
                        raising=False)
    code = cli.main(["quick", "--results", str(tmp_path), "--quiet", "--data-dir", str(tmp_path),
                     "--skip", "iep,throttling,peers,harness"])
    assert code == 0
    back = [r for r in read_dataset(str(tmp_path), "summary").to_pylist()]
    assert {(r["store"], r["op_style"]) for r in back} == {
        (s, o) for s in outgrowth.STORES for o in ("load", "get")}
    assert {json.loads(r["config_json"])["data_ratio"] for r in back} == {1.0, 2.0}
    quick = json.loads((tmp_path / "quick.json").read_text())
    assert {r["session"] for r in back} == {quick["session"]}
    assert len(quick["outgrowth"]) == 2 * len(outgrowth.STORES) and quick["outgrowth_seconds"] > 0


def test_cleaning_skips_the_scattered_write_when_the_page_files_size_is_unknown(tmp_path):
    # stats() gives page_file_bytes None while a checkpoint holds the figure
    facts = {"ckpt_pages": 100, "ckpt_seconds": 0.1, "ckpt_count": 2, "pages_written": 90,
             "page_bytes_written": 90 * 4096, "recovery_bytes_written": 90 * 4096, "page_file_bytes": None}
    out = outgrowth.cleaning(facts, str(tmp_path), 100)
    assert out["ckpt_pages_per_s"] == pytest.approx(1000) and "inplace_keys_per_s" not in out
    assert list(tmp_path.iterdir()) == []
