"""A store rebuilt from an older copy of its files plus the archived (and compacted) WAL.

The live store runs with `wal_archive` and 1 MiB segments; after a first
batch of writes and a checkpoint it is closed and its directory copied (the
backup), then reopened for much more work with several checkpoints, so that
segments are trimmed, archived and compacted. `wal.rebuild` opens a copy of
the backup and applies the archived logical records after the backup's log
end: with the live WAL directory as well it equals the live store; with the
archive alone it equals the live store as it was at the archive's end.
"""

from __future__ import annotations

import random
import shutil

import pagestore
from pagestore.wal import PUT, committed_records, iter_archive, rebuild, wal_end
from pagestore.wal.compact import compact, list_archive
from pagestore.diskio import PosixFS

OPTS = dict(wal_segment_size=1 << 20, checkpoint_interval=3600.0, memory_size=64 << 20)


class Workload:
    """Groups of operations (one put, one delete, or one transaction), each logging one unit."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.model: dict = {}
        self.keys: list = []
        self.groups: list = []     # [(type, key, value)] per group, in order

    def _put_op(self, g):
        key = b"key-%06d" % self.rng.randrange(40_000)
        return (PUT, key, b"g%08d-" % g + bytes([97 + g % 26]) * self.rng.randrange(20, 200))

    def run(self, db, n: int) -> None:
        for _ in range(n):
            g, x = len(self.groups), self.rng.random()
            if x < 0.7 or len(self.keys) < 100:
                ops = [self._put_op(g)]
                db.put(ops[0][1], ops[0][2])
            elif x < 0.85:
                ops = [(2, self._existing(), None)]
                assert db.delete(ops[0][1])
            else:
                ops = [self._put_op(g) for _ in range(self.rng.randrange(1, 4))]
                ops.append((2, self._existing(), None))
                ops = list({op[1]: op for op in ops}.values())       # one write per key, as a tx keeps
                with db.transaction() as tx:
                    for t, k, v in ops:
                        if t == PUT:
                            tx.put(k, v)
                        else:
                            tx.delete(k)
            for t, k, v in ops:
                self._apply(t, k, v)
            self.groups.append(ops)

    def _existing(self) -> bytes:
        while True:
            i = self.rng.randrange(len(self.keys))
            key = self.keys[i]
            if key in self.model:
                return key
            self.keys[i] = self.keys[-1]
            self.keys.pop()

    def _apply(self, t, k, v) -> None:
        if t == PUT:
            if k not in self.model:
                self.keys.append(k)
            self.model[k] = v
        else:
            self.model.pop(k, None)

    def state_after(self, k: int) -> dict:
        state: dict = {}
        for ops in self.groups[:k]:
            for t, key, v in ops:
                if t == PUT:
                    state[key] = v
                else:
                    state.pop(key, None)
        return state


def contents(path, **opts) -> dict:
    db = pagestore.open(str(path), **opts)
    try:
        return dict(db.scan())
    finally:
        db.close()


def test_rebuild_from_a_backup_and_the_archived_wal(tmp_path):
    live, arch, backup = tmp_path / "live", str(tmp_path / "archive"), tmp_path / "backup"
    work = Workload(11)
    db = pagestore.open(str(live), wal_archive=arch, **OPTS)
    work.run(db, 4000)
    db.checkpoint()
    work.run(db, 500)                            # the backup's log reaches past its checkpoint
    db.close()
    shutil.copytree(live, backup)
    at_backup = len(work.groups)

    db = pagestore.open(str(live), wal_archive=arch, **OPTS)
    for _ in range(5):
        work.run(db, 7000)
        db.checkpoint()
    work.run(db, 2000)                            # left in the live WAL, not archived
    archived = db.stats()["wal_segments_archived"]
    db.close()
    compact(arch, 2 << 20)                       # waits for a background round, compacts the rest
    pieces = list_archive(PosixFS(), arch)
    assert archived >= 5 and pieces and {p[2] for p in pieces} == {"walc"}
    shutil.copytree(live / "wal", tmp_path / "live-wal")   # the live log as it was at close
    live_state = contents(live, **OPTS)
    assert live_state == work.model

    # The archive holds, after the backup's log end, exactly the groups done after the backup.
    start = wal_end(PosixFS(), str(backup / "wal"))
    units = list(committed_records(iter_archive(PosixFS(), arch, start)))
    assert units and len(units) < len(work.groups) - at_backup
    for i, unit in enumerate(units):
        ops = work.groups[at_backup + i]
        assert sorted((r.type, bytes(r.key), r.value and bytes(r.value)) for r in unit) == \
            sorted((t, k, v) for t, k, v in ops)

    # Archive alone: the store as it was when the archive ends.
    only_archive = tmp_path / "rebuilt-archive"
    shutil.copytree(backup, only_archive)
    figures = rebuild(str(only_archive), arch, open_store=pagestore.open, **OPTS)
    assert figures["units"] == len(units) and figures["stop"] == "end"
    assert contents(only_archive, **OPTS) == work.state_after(at_backup + len(units))

    # Archive plus the live WAL: the live store.
    full = tmp_path / "rebuilt-full"
    shutil.copytree(backup, full)
    figures = rebuild(str(full), arch, open_store=pagestore.open, wal_dir=str(tmp_path / "live-wal"),
                      **OPTS)
    assert figures["units"] == len(work.groups) - at_backup, figures
    rebuilt = contents(full, **OPTS)
    assert rebuilt == live_state
    db = pagestore.open(str(full), **OPTS)      # and it is a sound store
    try:
        db.verify()
    finally:
        db.close()
