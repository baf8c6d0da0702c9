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
