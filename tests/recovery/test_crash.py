"""Crash anywhere in a checkpoint, lose power, recover: pages are one checkpoint's, never torn.

The workload: checkpoint 1 completes over a page file, pages change (some
twice-touched, some new), checkpoint 2 is crashed at a named crash point or
at the n-th mutating I/O operation; the SimFS then simulates a power loss
("random": each unsynced write kept, dropped, cut, torn or garbled, unsynced
directory operations dropped). After `recover`, the page file must equal
exactly the images of the checkpoint recovery reports (1 or 2), and the
action must be the one DESIGN.md §3's table gives for that gap. Then a
second checkpoint runs and is crashed too: recovery must work again.
"""

import pytest

from tests.support.checkpoint_fakes import Harness, page_ok, seal
from pagestore.diskio import CRASH_POINTS
from pagestore.recovery import recover

PS = 4096
N = 48

# crash point -> (checkpoint the page files must match, action) for checkpoint 2
EXPECTED = {
    "checkpoint.after_lock": (1, "replay"),
    "checkpoint.after_wal_fsync": (1, "replay"),
    # the previous checkpoint's files, renamed to checkpoint 2's names durably
    "checkpoint.after_recovery_reuse": (1, "ignore_recovery_files"),
    # the files' names are not durable yet: power loss may take them away
    "checkpoint.recovery_file_written": (1, ("ignore_recovery_files", "replay")),
    "checkpoint.after_recovery_fsync": (1, "ignore_recovery_files"),
    "checkpoint.start_tmp_written": (1, "ignore_recovery_files"),
    "checkpoint.after_start_marker": (2, "restore"),
    "checkpoint.page_written": (2, "restore"),
    "checkpoint.before_page_fsync": (2, "restore"),
    "checkpoint.after_page_fsync": (2, "restore"),
    "checkpoint.after_end_marker": (2, "replay"),
    "checkpoint.after_wal_trim": (2, "replay"),
}


def test_every_checkpoint_crash_point_has_an_expected_outcome():
    assert set(EXPECTED) == {n for n in CRASH_POINTS if n.startswith("checkpoint.")}


def _setup(mode, seed, compression="skip_garbage"):
    h = Harness(N, PS, seed, recovery_data=mode, compression=compression)
    h.modify(range(0, N, 3))
    assert h.checkpoint() is not None
    h.modify(range(0, N, 2))
    h.modify(range(0, N, 4))        # touched twice: a delta in "wal" mode
    return h


def _recover_and_check(h, seed, expected=None):
    r = recover(h.fs, "/db", h.sink, page_size=PS, wal_records=h.wal_records, seal_page=seal)
    disk = h.disk()
    assert r.checkpoint_id in h.images, r
    want = h.images[r.checkpoint_id]
    torn = [p for p in range(N) if not page_ok(disk[p], p)]
    assert not torn, f"torn pages {torn} after {r}"
    wrong = [p for p in range(N) if disk[p] != want[p]]
    assert not wrong, f"pages {wrong} differ from checkpoint {r.checkpoint_id}'s images ({r})"
    if expected is not None:
        cid, actions = expected
        actions = {actions} if isinstance(actions, str) else set(actions)
        if h.src.page_records:
            # "wal" mode writes no recovery files and restores from page records
            actions = {{"restore": "restore_wal", "ignore_recovery_files": "replay"}.get(a, a) for a in actions}
        assert r.checkpoint_id == cid and r.action in actions, r
    return r


def _hits(point):
    return {"checkpoint.recovery_file_written": [1, 2], "checkpoint.page_written": [1, 3, 6]}.get(point, [1])


# "wal" mode writes no recovery files, so it never passes recovery_file_written.
NAMED = [(m, p) for m in ("checkpoint", "wal") for p in sorted(EXPECTED)
         if not (m == "wal" and p == "checkpoint.recovery_file_written")]


@pytest.mark.parametrize("mode,point", NAMED)
def test_crash_at_named_point_then_power_loss_recovers_to_one_checkpoint(mode, point):
    for hit in _hits(point):
        for seed in range(4):
            h = _setup(mode, seed)
            assert h.checkpoint(crash_at=point, hit=hit) is None, f"{point}@{hit} never fired"
            h.power_loss(seed, "random" if seed else "keep")
            _recover_and_check(h, seed, EXPECTED[point])


def _io_ops_of_checkpoint(mode):
    h = _setup(mode, 0)
    before = h.fs.io_count
    h.checkpoint()
    h.close()
    return h.fs.io_count - before


@pytest.mark.parametrize("mode", ["checkpoint", "wal"])
def test_crash_at_every_kth_io_op_then_power_loss_recovers_to_one_checkpoint(mode):
    total = _io_ops_of_checkpoint(mode)
    assert total > 20
    states = 0
    for n in range(1, total + 2):
        for seed in range(4):
            h = _setup(mode, seed + n)
            h.checkpoint(io=n)
            h.power_loss(seed)
            _recover_and_check(h, seed)
            states += 1
    assert states >= 100


@pytest.mark.parametrize("mode", ["checkpoint", "wal"])
def test_crash_during_recovery_and_during_the_next_checkpoint_recovers_again(mode):
    for seed in range(12):
        h = _setup(mode, seed)
        h.checkpoint(crash_at="checkpoint.page_written", hit=1 + seed % 4)
        h.power_loss(seed)
        # crash recovery itself at some I/O op, lose power, recover again
        h.fs.arm_io(1 + seed % 7)
        try:
            recover(h.fs, "/db", h.sink, page_size=PS, wal_records=h.wal_records, seal_page=seal)
        except BaseException as exc:  # noqa: BLE001 - SimulatedCrash is the expected outcome
            assert type(exc).__name__ == "SimulatedCrash"
        h.fs.disarm()
        h.power_loss(seed + 100)
        r = _recover_and_check(h, seed)
        assert r.checkpoint_id == 2
        # the process carries on: a new checkpoint over the recovered pages, crashed too
        h.restart(h.disk())
        h.modify(range(1, N, 5))
        h.checkpoint(io=3 + seed * 3)
        h.power_loss(seed + 200)
        r = _recover_and_check(h, seed)
        assert r.checkpoint_id in (2, 3)


@pytest.mark.parametrize("compression", ["disabled", "snappy", "zstd", "lz4"])
def test_crash_in_page_phase_restores_exactly_under_each_compression(compression):
    for seed in range(3):
        h = _setup("checkpoint", seed, compression)
        h.checkpoint(crash_at="checkpoint.before_page_fsync")
        h.power_loss(seed)
        _recover_and_check(h, seed, (2, "restore"))
