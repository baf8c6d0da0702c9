"""Stopping a store on the crash simulator as a process kill would."""

from __future__ import annotations

import random

import pytest

from pagestore.diskio import SimulatedCrash


def kill_in_page_phase(sim, db) -> None:
    """Checkpoint `db` (open on `sim`) and stop it in the page phase, at the
    second page written in place, as a kill would: the OS keeps every write."""
    sim.arm("checkpoint.page_written", hit=2)
    with pytest.raises(SimulatedCrash):
        db.checkpoint()
    db._abandon()
    sim.disarm()
    sim.crash(random.Random(1), "keep")


def restored_after_a_kill_in_page_phase(opts: dict, values, seed: int):
    """A store on the simulator whose every leaf a checkpoint is writing again
    when a kill stops it (`kill_in_page_phase`), opened again: it restored
    those pages from the recovery files. `values(rng, n)` makes the values.
    Returns (db, rng, keys, model); the caller closes db."""
    from pagestore.diskio import SimFS
    import pagestore
    sim, rng = SimFS(), random.Random(seed)
    keys = [rng.randbytes(16) for _ in range(20_000)]
    model = dict(zip(keys, values(rng, len(keys))))
    db = pagestore.open("/s", fs=sim, **opts)
    db.put_many(model.items())
    db.checkpoint()
    model.update(zip(keys, values(rng, len(keys))))             # every page dirty again
    db.put_many(model.items())
    kill_in_page_phase(sim, db)
    db = pagestore.open("/s", fs=sim, **opts)
    try:
        rec = db.stats()["recovery"]
        assert rec["action"] == "restore" and rec["pages_restored"] > 100
        assert all(db.get(k) == v for k, v in model.items())
    except BaseException:
        db.close()
        raise
    return db, rng, keys, model
