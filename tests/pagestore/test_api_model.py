"""The public API behaves like a sorted dict, across transactions and reopen.

A hypothesis state machine drives put / get / delete / scan (bounds, prefix,
reverse) / transactions (committed and rolled back) / close-and-reopen
against a dict model, with values large enough for overflow chains and keys
at the size limit.
"""

import shutil
import tempfile

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pagestore

SMALL = dict(memory_size=4 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600,
             page_size=4096)

keys = st.one_of(
    st.binary(min_size=0, max_size=12),
    st.sampled_from([b"", b"a", b"ab", b"b", b"\xff", b"\xff\xff"]),
    st.binary(min_size=1024, max_size=1024),
)
values = st.one_of(
    st.binary(max_size=40),
    st.binary(min_size=3000, max_size=9000),
    st.integers(min_value=20_000, max_value=70_000).map(lambda n: bytes([n % 251]) * n),
)


def model_scan(model, start, stop, prefix, reverse):
    out = []
    for k in sorted(model):
        if start is not None and k < start:
            continue
        if stop is not None and k >= stop:
            continue
        if prefix is not None and not k.startswith(prefix):
            continue
        out.append((k, model[k]))
    return out[::-1] if reverse else out


class StoreMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="ps-model-")
        self.db = pagestore.open(self.dir, **SMALL)
        self.model = {}

    def teardown(self):
        self.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(k=keys, v=values)
    def put(self, k, v):
        self.db.put(k, v)
        self.model[k] = v

    @rule(k=keys)
    def get(self, k):
        assert self.db.get(k) == self.model.get(k)

    @rule(k=keys)
    def delete(self, k):
        assert self.db.delete(k) == (k in self.model)
        self.model.pop(k, None)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def delete_existing(self, data):
        k = data.draw(st.sampled_from(sorted(self.model)))
        assert self.db.delete(k)
        del self.model[k]

    @rule(start=st.none() | keys, stop=st.none() | keys, prefix=st.none() | st.binary(max_size=2),
          reverse=st.booleans())
    def scan(self, start, stop, prefix, reverse):
        got = list(self.db.scan(start, stop, prefix=prefix, reverse=reverse))
        assert got == model_scan(self.model, start, stop, prefix, reverse)

    @rule(ops=st.lists(st.tuples(st.booleans(), keys, values), max_size=8), commit=st.booleans())
    def transaction(self, ops, commit):
        staged = dict(self.model)
        try:
            with self.db.transaction() as tx:
                for is_put, k, v in ops:
                    if is_put:
                        tx.put(k, v)
                        staged[k] = v
                    else:
                        assert tx.delete(k) == (k in staged)
                        staged.pop(k, None)
                    # reads inside the transaction see its own writes
                    assert tx.get(k) == staged.get(k)
                assert list(tx.scan()) == model_scan(staged, None, None, None, False)
                if not commit:
                    raise RuntimeError("roll back")
        except RuntimeError:
            assert not commit
        if commit:
            self.model = staged

    @rule()
    def reopen(self):
        self.db.close()
        self.db = pagestore.open(self.dir, **SMALL)

    @rule()
    def checkpoint(self):
        self.db.checkpoint()

    @invariant()
    def length_matches(self):
        assert len(self.db) == len(self.model)


StoreMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
test_store_behaves_like_a_sorted_dict = StoreMachine.TestCase
