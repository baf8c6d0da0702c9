"""The update workload every system runs: random single-row updates, each its own commit.

``clients`` threads each hold one connection (or, for pagestore, share the open
database) and loop: pick a key uniformly from the table's ``rows``, write a fresh
100-byte random value, commit durably, repeat. Latency is timed around the whole
update-and-commit call. The caller's ``measure`` runs in the main thread between a
warm-up and the end of the run: ops and latencies count only while it runs, and
the clients stop right after it, so every counter it reads covers the same updates.
"""

from __future__ import annotations

import random
import threading
import time

import numpy as np

VALUE_BYTES = 100


def row_value(rng: random.Random) -> bytes:
    """A fresh random value (incompressible, like the reference figures' values)."""
    return rng.randbytes(VALUE_BYTES)


class _Client(threading.Thread):
    def __init__(self, run, seed, rows, connect):
        super().__init__(daemon=True)
        self.run_state, self.rng, self.rows, self.connect = run, random.Random(seed), rows, connect
        self.lat_ns: list = []
        self.ops = 0
        self.error: BaseException | None = None

    def run(self):
        """Update until told to stop; the first error stops every client."""
        st, rng, rows = self.run_state, self.rng, self.rows
        try:
            update, close = self.connect()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.error = e
            st.ready.release()
            return
        st.ready.release()
        lat = self.lat_ns
        clock = time.perf_counter_ns
        try:
            while not st.stop:
                k = rng.randrange(rows)
                v = rng.randbytes(VALUE_BYTES)
                t0 = clock()
                update(k, v)
                if st.measuring:
                    lat.append(clock() - t0)
        except BaseException as e:  # noqa: BLE001
            self.error = e
            st.stop = True
        finally:
            try:
                close()
            except Exception:  # noqa: BLE001 - the connection may already be gone
                pass


class _State:
    def __init__(self):
        self.stop = False
        self.measuring = False
        self.ready = threading.Semaphore(0)


def run_updates(connect, rows: int, clients: int, warmup_s: float, seconds: float, before, after,
                seed: int = 1) -> dict:
    """Run the workload; ``before()``/``after()`` read the system's counters around the window.

    ``connect()`` is called once in each client thread and returns ``(update, close)``
    where ``update(key: int, value: bytes)`` performs one durable single-row update.
    Returns ops, seconds, throughput, p50/p99 latency (µs) and what ``before``/``after``
    returned."""
    st = _State()
    threads = [_Client(st, seed * 1000 + i, rows, connect) for i in range(clients)]
    for t in threads:
        t.start()
    for _ in threads:
        st.ready.acquire()
    _raise_first(threads)
    try:
        _sleep_unless_stopped(st, warmup_s)
        _raise_first(threads)
        b = before()
        st.measuring = True
        t0 = time.perf_counter()
        _sleep_unless_stopped(st, seconds)
        st.measuring = False
        elapsed = time.perf_counter() - t0
        st.stop = True
        for t in threads:
            t.join(60)
        _raise_first(threads)
        a = after()
    finally:
        st.stop = True
        for t in threads:
            t.join(60)
    lat = np.concatenate([np.asarray(t.lat_ns, dtype=np.int64) for t in threads])
    ops = int(lat.size)
    p50, p99 = (np.percentile(lat, [50, 99]) / 1000.0).tolist() if ops else (float("nan"),) * 2
    return {"ops": ops, "seconds": elapsed, "throughput": ops / elapsed if elapsed else 0.0,
            "lat_p50_us": p50, "lat_p99_us": p99, "before": b, "after": a}


def _sleep_unless_stopped(st, seconds):
    end = time.monotonic() + seconds
    while not st.stop and time.monotonic() < end:
        time.sleep(min(0.1, max(0.0, end - time.monotonic())))


def _raise_first(threads):
    for t in threads:
        if t.error is not None:
            raise RuntimeError(f"client failed: {type(t.error).__name__}: {t.error}") from t.error
