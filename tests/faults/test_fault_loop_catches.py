"""The fault loop must be able to fail: run against a store that ignores its
errors -- a wrapper that swallows every `pagestore.Error` of a write and
returns as if it had succeeded -- it reports acknowledged writes that are not
there after reopen. (Against the code before the error model, the same loop
also failed on every run that hit the WAL: DiskIOError, an OSError, escaped.)"""

import errno

import pagestore
from tests.support.faultloop import Spec, count_io, run_workload


class ErrorSwallowingStore:
    """A store that tells its caller every write worked."""

    def __init__(self, db):
        self.inner = db

    def _quietly(self, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except pagestore.Error:
            return None

    def put(self, *args, **kw):
        return self._quietly(self.inner.put, *args, **kw)

    def delete(self, *args, **kw):
        return self._quietly(self.inner.delete, *args, **kw)

    def put_many(self, *args, **kw):
        return self._quietly(self.inner.put_many, *args, **kw)

    def transaction(self):
        return self.inner.transaction()

    def get(self, key, default=None):
        return self.inner.get(key, default)

    def checkpoint(self):
        return self._quietly(self.inner.checkpoint)

    def close(self):
        return self._quietly(self.inner.close)


def test_the_loop_catches_a_store_that_swallows_its_write_errors():
    spec = Spec(wrap=ErrorSwallowingStore)
    total = count_io(spec)
    caught = [v for n in range(1, total, 7)
              for v in run_workload(spec, (n, errno.ENOSPC, True)).violations]
    assert any("acknowledged" in v for v in caught), caught[:5]


def test_the_same_loop_passes_the_store_itself():
    spec = Spec()
    total = count_io(spec)
    found = [v for n in range(1, total, 7) for v in run_workload(spec, (n, errno.ENOSPC, True)).violations]
    assert found == []
