"""Spread checkpoints (checkpoint/pacing.py): a timed checkpoint's page writes
follow a schedule; anything that wants the checkpoint done stops the pacing."""

import threading
import time

import pytest

from pagestore.checkpoint import Checkpointer
from pagestore.checkpoint.pacing import MAX_NAP, SAFE_FILL, Pacer

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


def test_a_writer_naps_until_the_first_page_of_its_chunk_is_due():
    p, ft, _ = pacer()
    p.claim(50)                          # pages 0-49: due at once
    assert ft.naps == []
    p.claim(50)                          # pages 50-99: due half way to the deadline
    assert ft.now == pytest.approx(105.0)
    assert max(ft.naps) <= MAX_NAP
    assert p.napped == pytest.approx(5.0)
    assert p.hurried is None


def test_a_writer_behind_the_schedule_does_not_nap():
    p, ft, _ = pacer()
    ft.now += 8.0
    p.claim(50)
    p.claim(50)
    assert ft.naps == []


def test_pages_past_the_total_are_due_at_the_deadline_not_later():
    p, ft, _ = pacer(total=10)
    p.claim(25)
    p.claim(5)
    assert ft.now == pytest.approx(110.0)


def test_no_chunk_starts_before_its_share_of_the_span():
    p, ft, _ = pacer(total=100)
    starts = []
    for _ in range(10):
        p.claim(10)
        starts.append(ft.now)
    assert starts == pytest.approx([100.0 + i for i in range(10)])


def test_a_request_stops_the_pacing_for_the_rest_of_the_checkpoint():
    p, ft, hurry = pacer()
    hurry.set()
    p.claim(50)
    p.claim(50)
    assert ft.naps == [] and p.hurried == "request"
    hurry.clear()
    p.claim(50)
    assert ft.naps == []


def test_the_hurry_says_who_hurried():
    hurry = threading.Event()
    ft = FakeTime(hurry)
    p = Pacer(ft, ft.now + 10, 100, hurry, wait=ft.wait, why=lambda: "memory")
    hurry.set()
    p.claim(50)
    assert p.hurried == "memory"


def test_a_request_during_a_nap_ends_it():
    p, ft, hurry = pacer(on_nap=lambda t: hurry.set())
    p.claim(10)
    p.claim(80)
    assert len(ft.naps) == 1 and p.hurried == "request"


def test_pages_whose_copies_could_fill_the_buffer_are_written_at_full_speed():
    p, ft, _ = pacer(total=100, buffer_pages=100)    # 60 unwritten pages may be paced
    p.claim(30)
    p.claim(20)
    assert ft.naps == []                              # 100 unwritten: copies could pass 60 %
    p.written(30)
    p.claim(20)
    assert ft.naps == []                              # 70 unwritten
    p.written(20)
    p.claim(10)                                       # 50 unwritten: pages 70- due at 107
    assert ft.now == pytest.approx(107.0)
    assert p.hurried is None


def test_a_buffer_filled_past_the_safe_share_anyway_stops_the_pacing():
    fill = [0.0]
    p, ft, _ = pacer(fill=lambda: fill[0])
    p.claim(10)
    p.claim(10)
    assert ft.now == pytest.approx(101.0)
    fill[0] = SAFE_FILL
    p.claim(50)
    assert ft.now == pytest.approx(101.0) and p.hurried == "buffer"


def test_a_failed_writer_stops_the_others_napping():
    p, ft, _ = pacer()
    p.abort = threading.Event()
    p.abort.set()
    p.claim(10)
    p.claim(50)
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
        kw.setdefault("threads", 2)
        kw.setdefault("chunk_pages", 4)
        cp = Checkpointer(fs, "/db", src, sink, wal, clock=lambda: time.monotonic() + offset[0], **kw)
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
    cp = start(interval=60.0, spread=0.05)          # pages done 3 s after begin
    dirty(src, rng, range(200), 1)
    offset[0] += 61
    wait_for(lambda: cp.stats()["checkpoints"] >= 1)
    last = cp.stats()["last_checkpoint"]
    assert last["reason"] == "interval"
    assert last["paced_until"] == pytest.approx(3.0)
    assert last["hurried"] is None
    # the schedule counts from the checkpoint's begin: the last chunk (pages
    # 196-199) is due 3 * 196/200 s after it, however fast the machine is
    assert last["total_seconds"] >= 3.0 * 196 / 200
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


def test_pages_are_written_on_the_schedule_not_threads_chunks_ahead_of_it(shifted):
    src, rng, offset, start = shifted
    # 4 chunks of 64 pages, one per thread, due over ~2 s: none may start early
    cp = start(interval=100.0, spread=0.02, threads=4, chunk_pages=64)
    times = []
    cp.sink.on_write = lambda ids: times.append(time.monotonic())
    dirty(src, rng, range(200), 1)
    offset[0] += 101
    wait_for(lambda: cp.stats()["checkpoints"] >= 1)
    assert times[-1] - times[0] > 1.0


def test_a_failed_writer_is_reported_without_waiting_for_the_others_schedule(shifted):
    src, rng, offset, start = shifted
    cp = start(interval=100.0, spread=0.6)           # pages due ~60 s after begin
    # Tag each pool thread with its worker number: the coordinator waits on
    # worker 0 first, so the failure must come from another one.
    submit = cp._pool.submit
    cp._pool.submit = lambda fn, w: submit(
        lambda w: (setattr(threading.current_thread(), "worker", w), fn(w))[1], w)
    writes = []

    def on_write(ids):
        w = threading.current_thread().worker
        writes.append(w)
        if w == 1 and writes.count(1) == 2:
            raise OSError(28, "injected ENOSPC")
    cp.sink.on_write = on_write
    dirty(src, rng, range(200), 1)
    offset[0] += 101
    wait_for(lambda: writes)
    t = time.monotonic()
    wait_for(lambda: cp.failed is not None)
    # worker 1's second chunk is due a few seconds in; the schedule's end is a minute away
    assert time.monotonic() - t < 20, f"failure reported after {len(writes)} writes"
