"""Spread checkpoints (checkpoint/pacing.py): a timed checkpoint's page writes
follow a schedule; anything that wants the checkpoint done stops the pacing."""

import threading
import time

import pytest

from checkpoint import Checkpointer
from checkpoint.pacing import MAX_NAP, SAFE_FILL, Pacer

from .test_checkpointer import dirty, make_store


class FakeTime:
    """A clock whose naps advance it: the pacer's schedule without real sleeps."""

    def __init__(self, hurry: threading.Event, on_nap=None):
        self.now, self.naps, self.hurry, self.on_nap = 100.0, [], hurry, on_nap

    def __call__(self) -> float:
        return self.now

    def wait(self, t: float) -> bool:
        self.naps.append(t)
        self.now += t
        if self.on_nap is not None:
            self.on_nap(self)
        return self.hurry.is_set()


def pacer(total=100, span=10.0, fill=None, on_nap=None, buffer_pages=None):
    hurry = threading.Event()
    ft = FakeTime(hurry, on_nap)
    return Pacer(ft, ft.now + span, total, hurry, buffer_pages=buffer_pages, buffer_fill=fill,
                 wait=ft.wait), ft, hurry


def test_a_writer_ahead_of_the_schedule_naps_until_its_pages_are_due():
    p, ft, _ = pacer()
    p.written(50)                        # half the pages: due half way to the deadline
    assert ft.now == pytest.approx(105.0)
    assert max(ft.naps) <= MAX_NAP
    assert p.napped == pytest.approx(5.0)
    p.written(50)
    assert ft.now == pytest.approx(110.0)
    assert p.hurried is None


def test_a_writer_behind_the_schedule_does_not_nap():
    p, ft, _ = pacer()
    ft.now += 8.0
    p.written(50)
    assert ft.naps == []


def test_pages_past_the_total_are_due_at_the_deadline_not_later():
    p, ft, _ = pacer(total=10)
    p.written(25)
    assert ft.now == pytest.approx(110.0)


def test_a_request_stops_the_pacing_for_the_rest_of_the_checkpoint():
    p, ft, hurry = pacer()
    hurry.set()
    p.written(50)
    assert ft.naps == [] and p.hurried == "request"
    hurry.clear()
    p.written(50)
    assert ft.naps == []


def test_a_request_during_a_nap_ends_it():
    p, ft, hurry = pacer(on_nap=lambda t: hurry.set())
    p.written(90)
    assert len(ft.naps) == 1 and p.hurried == "request"


def test_pages_whose_copies_could_fill_the_buffer_are_written_at_full_speed():
    p, ft, _ = pacer(total=100, buffer_pages=100)    # 60 pages left may be paced
    p.written(30)
    assert ft.naps == []                              # 70 left: copies could pass 60 %
    p.written(20)
    assert ft.now == pytest.approx(105.0)             # 50 left: on schedule again
    assert p.hurried is None


def test_a_buffer_filled_past_the_safe_share_anyway_stops_the_pacing():
    fill = [0.0]
    p, ft, _ = pacer(fill=lambda: fill[0])
    p.written(10)
    assert ft.now == pytest.approx(101.0)
    fill[0] = SAFE_FILL
    p.written(50)
    assert ft.now == pytest.approx(101.0) and p.hurried == "buffer"


def test_a_failed_writer_stops_the_others_napping():
    p, ft, _ = pacer()
    p.abort = threading.Event()
    p.abort.set()
    p.written(50)
    assert ft.naps == [] and p.hurried == "abort"


def test_spread_outside_zero_to_one_is_refused():
    fs, src, sink, wal, _rng = make_store()
    with pytest.raises(ValueError, match="spread"):
        Checkpointer(fs, "/db", src, sink, wal, interval=None, spread=1.5)


# -- the checkpointer (real naps: spans of tenths of a second) ----------------

@pytest.fixture
def shifted():
    """A store and a real clock that a test can move forward to fire the interval."""
    fs, src, sink, wal, rng = make_store(n=200)
    offset = [0.0]
    made = []

    def start(**kw):
        cp = Checkpointer(fs, "/db", src, sink, wal, threads=2, chunk_pages=4,
                          clock=lambda: time.monotonic() + offset[0], **kw)
        made.append(cp)
        return cp
    yield src, rng, offset, start
    for cp in made:
        cp.close(final_checkpoint=False)


def wait_for(cond, timeout=20.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_a_timed_checkpoint_spreads_its_page_writes(shifted):
    src, rng, offset, start = shifted
    cp = start(interval=60.0, spread=0.01)          # pages done 0.6 s after begin
    dirty(src, rng, range(200), 1)
    offset[0] += 61
    wait_for(lambda: cp.stats()["checkpoints"] >= 1)
    last = cp.stats()["last_checkpoint"]
    assert last["reason"] == "interval"
    assert last["paced_until"] == pytest.approx(0.6)
    assert last["hurried"] is None
    assert last["page_write_seconds"] >= 0.4        # 50 chunks on a 0.6 s schedule
    assert last["napped_seconds"] > 0


def test_checkpoints_that_were_asked_for_are_not_paced(shifted):
    src, rng, _offset, start = shifted
    cp = start(interval=60.0, spread=1.0)
    dirty(src, rng, range(200), 1)
    last = cp.checkpoint()
    assert last["reason"] == "explicit"
    assert last["paced_until"] is None and last["napped_seconds"] == 0.0
    assert last["total_seconds"] < 30


def test_a_request_makes_a_paced_checkpoint_finish_at_full_speed(shifted):
    src, rng, offset, start = shifted
    cp = start(interval=60.0, spread=1.0)           # paced over a minute
    dirty(src, rng, range(200), 1)
    offset[0] += 61
    wait_for(lambda: cp.phase_progress()["phase"] == "pages"
             and cp.progress()["pages_written"] > 0)
    t = time.monotonic()
    cp.checkpoint()                                  # served by the next checkpoint
    assert time.monotonic() - t < 20
    timed = cp.stats()["checkpoint_history"][0]
    assert timed["reason"] == "interval" and timed["hurried"] == "request"


def test_close_does_not_wait_for_a_paced_schedule(shifted):
    src, rng, offset, start = shifted
    cp = start(interval=60.0, spread=1.0)
    dirty(src, rng, range(200), 1)
    offset[0] += 61
    wait_for(lambda: cp.phase_progress()["phase"] == "pages")
    t = time.monotonic()
    cp.close(final_checkpoint=False)
    assert time.monotonic() - t < 20


def test_hurry_finishes_a_paced_checkpoint_without_asking_for_another(shifted):
    src, rng, offset, start = shifted
    cp = start(interval=60.0, spread=1.0)
    dirty(src, rng, range(200), 1)
    offset[0] += 61
    wait_for(lambda: cp.phase_progress()["phase"] == "pages"
             and cp.progress()["pages_written"] > 0)
    cp.hurry("memory")
    wait_for(lambda: cp.stats()["checkpoints"] == 1)
    assert cp.stats()["last_checkpoint"]["hurried"] == "memory"
    assert not cp.pending()
