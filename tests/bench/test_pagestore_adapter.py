"""The pagestore adapter against a stand-in module with the documented public API.

The real store is built elsewhere; this pins down how the harness calls it:
options passed only when set, put_many for bulk loads, transactions for the
implicit-tx style, stats read with defaults, checkpoint() from the helper thread.
"""

import bisect
import contextlib
import sys
import types

import pytest

from bench.runner import run
from bench.stores import PagestoreStore


class FakeDB:
    def __init__(self, path, **options):
        self.path, self.options, self.data, self.calls = path, options, {}, []
        self.checkpoints = self.puts = 0

    def put(self, k, v):
        self.puts += 1
        self.data[bytes(k)] = bytes(v)

    def get(self, k, default=None):
        return self.data.get(bytes(k), default)

    def delete(self, k):
        return self.data.pop(bytes(k), None) is not None

    def put_many(self, pairs):
        self.calls.append("put_many")
        for k, v in pairs:
            self.put(k, v)

    def scan(self, start=None, stop=None, prefix=None, reverse=False):
        keys = sorted(self.data)
        for k in keys[bisect.bisect_left(keys, start) if start is not None else 0:]:
            yield k, self.data[k]

    @contextlib.contextmanager
    def transaction(self):
        self.calls.append("transaction")
        yield self

    def checkpoint(self):
        self.checkpoints += 1

    def checkpoint_state(self):
        return False, self.checkpoints

    def stats(self):
        return {"checkpoints": self.checkpoints, "wal_bytes_written": 130 * self.puts}

    def close(self):
        self.calls.append("close")


@pytest.fixture
def fake_pagestore(monkeypatch):
    opened = []

    def open_(path, **options):
        opened.append(FakeDB(path, **options))
        return opened[-1]

    monkeypatch.setitem(sys.modules, "pagestore", types.SimpleNamespace(
        open=open_, TransactionTooLargeError=TooLarge))
    return opened


class TooLarge(Exception):
    pass


def test_options_bulk_load_transactions_and_scan(fake_pagestore, tmp_path):
    st = PagestoreStore(str(tmp_path), dict(wal_mode="fsync", memory_size=1 << 20, throttling=None,
                                            recovery_data="wal", threads=4))
    db = fake_pagestore[0]
    assert db.options == dict(wal_mode="fsync", memory_size=1 << 20, recovery_data="wal")
    st.bulk_load([(b"k%03d" % i, b"v") for i in range(100)])
    st.put_tx(b"zz", b"1")
    st.write_tx([(b"k000", None), (b"k001", b"new")])
    assert db.calls == ["put_many", "transaction", "transaction"]
    assert st.get(b"k000") is None and st.get(b"k001") == b"new"
    assert st.scan_all() == 100 and st.scan(b"k050", 10) == 10
    st.close()
    assert db.calls[-1] == "close"


def test_a_full_run_through_the_adapter(fake_pagestore):
    r = run(dict(store="pagestore", op_style="implicit-tx", duration=1.2, warmup=0.2, checkpoint_every=0.05,
                 key_range=1000, recovery_data="checkpoint", recovery_compression="snappy"))
    s = r["summary"]
    # about 20 checkpoints and 10^5 ops fit in the 1 s window: the bounds leave room
    # for a machine that gives this process a small share of its time
    assert s["checkpoints"] >= 3 and s["ops"] > 1000, s
    assert s["compression"] == "snappy" and s["throttling"] == "default"
    assert fake_pagestore[0].options["recovery_compression"] == "snappy"
    assert s["wal_bytes_per_op"] == pytest.approx(130, rel=0.05)


def test_a_bulk_load_larger_than_one_transaction_goes_in_halves(fake_pagestore, tmp_path):
    st = PagestoreStore(str(tmp_path), dict(memory_size=1 << 20))
    db = fake_pagestore[0]
    sizes = []

    def put_many(pairs):        # like the store: too large -> raises, changes nothing
        sizes.append(len(pairs))
        if len(pairs) > 30:
            raise TooLarge("the transaction needs more page memory")
        for k, v in pairs:
            db.put(k, v)

    db.put_many = put_many
    pairs = [(b"k%03d" % i, b"v%d" % i) for i in range(100)]
    st.bulk_load(iter(pairs))
    assert db.data == dict(pairs)
    assert sizes == [100, 50, 25, 25, 50, 25, 25]
    db.put_many = lambda pairs: (_ for _ in ()).throw(TooLarge("even one pair"))
    with pytest.raises(TooLarge):
        st.bulk_load([(b"x", b"y")])
