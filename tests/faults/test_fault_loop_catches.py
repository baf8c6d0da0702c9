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


class RaisedWriteShowingStore(ErrorSwallowingStore):
    """A store whose reads still see a put that raised (as the core did before
    it undid unacknowledged writes): it raises, but remembers the value."""

    def __init__(self, db):
        super().__init__(db)
        self.ghosts: dict = {}

    def put(self, key, value, **kw):
        try:
            return self.inner.put(key, value, **kw)
        except pagestore.Error:
            self.ghosts[key] = value
            raise

    def get(self, key, default=None):
        return self.ghosts.get(key, self.inner.get(key, default))


def test_the_loop_catches_a_write_that_raised_yet_is_visible():
    spec = Spec(wrap=RaisedWriteShowingStore)
    total = count_io(spec)
    caught = [v for n in range(1, total, 7)
              for v in run_workload(spec, (n, errno.EIO, False)).violations]
    assert any("a write that raised" in v and "is visible" in v for v in caught), caught[:5]
