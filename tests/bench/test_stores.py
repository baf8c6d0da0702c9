"""Each adapter round-trips data: put, get, scan counts, delete, transactions, bulk load."""

import pytest

from bench.stores import batches, count_rows, open_store, pagestore_available
from bench.workload import ValuePool, make_keys

import numpy as np

PEERS = ["sqlite", "lmdb", "lmdb_writemap", "rocksdict", "plyvel"]


def _stores():
    return [(p, m) for p in PEERS + ["pagestore"] for m in ("log_only", "fsync")]


def test_pagestore_is_available_to_the_harness():
    ok, why = pagestore_available()
    assert ok, why


@pytest.mark.parametrize("name,wal_mode", _stores())
def test_adapter_round_trip(tmp_path, name, wal_mode):
    n = 300
    keys = make_keys(np.arange(n, dtype=np.uint64), 16)
    vals = ValuePool(100, count=n).take(n)
    st = open_store(name, str(tmp_path / name), dict(wal_mode=wal_mode))
    try:
        st.bulk_load(list(zip(keys[:200], vals[:200])))
        w = st.worker()
        for k, v in zip(keys[200:250], vals[200:250]):
            w.put(k, v)
        for k, v in zip(keys[250:], vals[250:]):
            w.put_tx(k, v)
        for k, v in zip(keys, vals):
            assert bytes(st.get(k)) == v
        assert st.get(b"\xff" * 16) is None
        assert st.scan_all() == n
        first = sorted(keys)[10]
        assert st.scan(first, 25) == 25
        assert st.scan(first, None) == n - 10
        st.delete(keys[0])
        st.write_tx([(keys[1], None), (b"new-key-00000000", b"x" * 10)])
        assert st.get(keys[0]) is None and st.get(keys[1]) is None
        assert bytes(st.get(b"new-key-00000000")) == b"x" * 10
        assert st.scan_all() == n - 1
    finally:
        st.close()


def test_unknown_store_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown store"):
        open_store("berkeleydb", str(tmp_path), {})


def test_a_bulk_load_is_cut_into_batches_that_keep_every_pair_in_order():
    assert [list(b) for b in batches(iter(range(7)), 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(batches([], 3)) == []


@pytest.mark.parametrize("n,visited", [(None, 5), (3, 3), (9, 5)])
def test_a_scan_counts_the_rows_it_visits_up_to_n(n, visited):
    assert count_rows(iter("abcde"), n) == visited
