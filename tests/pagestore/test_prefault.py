"""Page memory uses huge pages populated ahead of the fresh-slot frontier by a
thread (csrc/prefault.c), so no put pays the first-touch compaction of a
2 MiB page: the populated prefix stays ahead of the slots in use and within
page memory, and a small store does not start the thread."""

import time

import pagestore
from pagestore.database import engine_of

AHEAD = 8 << 20


def wait_for(pred, seconds=120.0):
    # generous: the thread populates at whatever pace a loaded machine gives it
    end = time.monotonic() + seconds
    while not pred():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def test_populated_memory_runs_ahead_of_the_slots_in_use_and_stops_at_memory_size(tmp_path):
    memory = 48 << 20
    with pagestore.open(tmp_path / "s", memory_size=memory, checkpoint_interval=3600) as db:
        assert wait_for(lambda: db.stats()["prefaulted_bytes"] >= AHEAD)
        for step in range(4):
            db.put_many((b"%016d" % i, b"x" * 100) for i in range(step * 60_000, (step + 1) * 60_000))
            used = db.stats()["slots_used"] * 4096
            assert wait_for(lambda: db.stats()["prefaulted_bytes"] >= min(memory, used + AHEAD // 2)), \
                (db.stats()["prefaulted_bytes"], used)
            assert db.stats()["prefaulted_bytes"] <= memory
        assert db.stats()["prefaulted_bytes"] > 4 * AHEAD


def test_a_small_page_memory_is_not_prefaulted(tmp_path):
    with pagestore.open(tmp_path / "s", memory_size=8 << 20, checkpoint_interval=3600) as db:
        db.put_many((b"%08d" % i, b"v") for i in range(10_000))
        assert db.stats()["prefaulted_bytes"] == 0
        assert db[b"00000042"] == b"v"


def test_a_forked_child_can_destroy_its_copy_of_the_core_without_waiting_for_the_thread(tmp_path):
    import os
    db = pagestore.open(tmp_path / "s", memory_size=48 << 20, checkpoint_interval=3600)
    try:
        assert wait_for(lambda: db.stats()["prefaulted_bytes"] >= AHEAD)
        pid = os.fork()
        if pid == 0:                       # the thread stayed in the parent: nothing to join
            try:
                engine_of(db).core.close()
            finally:
                os._exit(0)
        deadline = time.monotonic() + 20
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise AssertionError("the child hung destroying the core")
            time.sleep(0.02)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        db.put(b"after", b"fork")
        assert db[b"after"] == b"fork"
    finally:
        db.close()


def test_a_checkpoint_has_the_buffer_it_may_copy_into_populated(tmp_path):
    # 4,000+ dirty pages, a 16 MiB (4,096-page) buffer: a checkpoint may fill it
    buf = 16 << 20
    with pagestore.open(tmp_path / "s", memory_size=64 << 20, checkpoint_buffer_size=buf,
                        checkpoint_interval=3600) as db:
        assert db.stats()["cow_prefaulted_bytes"] < 1 << 20   # the opening checkpoint had a page or two
        db.put_many((b"%016d" % i, b"x" * 900) for i in range(16_000))
        pages = db.stats()["dirty_pages"]
        db.checkpoint()
        assert wait_for(lambda: db.stats()["cow_prefaulted_bytes"] >= min(buf, pages * 4096))
        assert db.stats()["cow_prefaulted_bytes"] <= buf
