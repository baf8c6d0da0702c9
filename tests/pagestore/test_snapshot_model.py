"""Snapshots and transactions against a model (hypothesis stateful testing).

Random sequences of puts, deletes, batches, transactions (some interleaved
with a conflicting write), checkpoints and snapshots opened and released;
after every step each open snapshot must read exactly the model's contents
as of its creation (get, in, len, scan forwards and backwards, a sub-range),
and the store the model's current contents.
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pagestore

KEYS = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"])
VALUES = st.one_of(st.binary(max_size=20), st.builds(lambda n: b"L" * n, st.integers(300, 6000)))


# One store for every example (opening one per example cost most of the run);
# each example starts by emptying it.
_STORE = {}


def shared_store():
    if "db" not in _STORE:
        _STORE["dir"] = tempfile.mkdtemp()
        _STORE["db"] = pagestore.open(_STORE["dir"], memory_size=8 << 20, wal_segment_size=1 << 20,
                                      checkpoint_interval=3600)
    return _STORE["db"]


def teardown_module():
    if "db" in _STORE:
        _STORE.pop("db").close()
        shutil.rmtree(_STORE.pop("dir"), ignore_errors=True)


class SnapshotModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.db = shared_store()
        with self.db.transaction() as txn:
            for k in list(self.db):
                del txn[k]
        self.model: dict[bytes, bytes] = {}
        self.snaps: list[tuple[pagestore.Snapshot, dict]] = []

    def teardown(self):
        for snap, _ in self.snaps:
            snap.release()

    @rule(k=KEYS, v=VALUES)
    def put(self, k, v):
        self.db[k] = v
        self.model[k] = v

    @rule(k=KEYS)
    def delete(self, k):
        assert self.db.delete(k) == (k in self.model)
        self.model.pop(k, None)

    @rule(items=st.lists(st.tuples(KEYS, VALUES), max_size=5))
    def put_many(self, items):
        self.db.put_many(items)
        self.model.update(items)

    @rule(reads=st.lists(KEYS, max_size=3), writes=st.lists(st.tuples(KEYS, VALUES), max_size=3),
          dels=st.lists(KEYS, max_size=2), meddle=st.one_of(st.none(), KEYS))
    def transaction(self, reads, writes, dels, meddle):
        """A transaction, with maybe a plain put committed between its reads and its commit."""
        txn = self.db.transaction()
        for k in reads:
            assert txn.get(k) == self.model.get(k)
        for k, v in writes:
            txn[k] = v
        for k in dels:
            txn.delete(k)
        if meddle is not None:
            self.db[meddle] = b"meddled"
            self.model[meddle] = b"meddled"
        # delete() reads the key (it returns whether it was there), unless written before
        read_set = set(reads) | {k for k in dels if k not in dict(writes)}
        # a transaction that writes nothing is serialized at its snapshot: no check
        if meddle is not None and meddle in read_set and (writes or dels):
            try:
                txn.commit()
            except pagestore.ConflictError:
                return
            raise AssertionError("a commit after a write to a key the transaction read went through")
        txn.commit()
        for k, v in writes:
            self.model[k] = v
        for k in dels:
            self.model.pop(k, None)

    @rule()
    def checkpoint(self):
        self.db.checkpoint()

    @precondition(lambda self: len(self.snaps) < 4)
    @rule()
    def open_snapshot(self):
        self.snaps.append((self.db.snapshot(), dict(self.model)))

    @precondition(lambda self: self.snaps)
    @rule(i=st.integers(0, 3))
    def release_snapshot(self, i):
        snap, _ = self.snaps.pop(i % len(self.snaps))
        snap.release()

    @invariant()
    def snapshots_read_as_of_their_creation(self):
        for snap, seen in self.snaps:
            assert dict(snap.scan()) == seen
            assert list(snap.scan(reverse=True)) == sorted(seen.items(), reverse=True)
            assert list(snap.scan(b"b", b"f")) == sorted((k, v) for k, v in seen.items() if b"b" <= k < b"f")
            assert len(snap) == len(seen)
            for k in (b"a", b"d", b"h"):
                assert snap.get(k) == seen.get(k)
                assert (k in snap) == (k in seen)

    @invariant()
    def the_store_reads_as_the_model(self):
        assert dict(self.db.scan()) == self.model
        assert self.db.stats()["snapshots_open"] == len(self.snaps)


SnapshotModel.TestCase.settings = settings(max_examples=20, stateful_step_count=25, deadline=None)
test_snapshots_and_transactions_match_the_model = SnapshotModel.TestCase
