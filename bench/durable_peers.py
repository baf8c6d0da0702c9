"""Durable commits and point gets beside the peers, rounds interleaved.

Each round runs, back to back on the same disk (each store after one
untimed second of the same writes): a bare 4 KiB pwrite +
fdatasync loop; pagestore (wal_mode="fsync") with 1 and 16 threads, a put
per durable commit; plyvel (LevelDB, sync=True) with 16 threads; and
pagestore.aio with N tasks in one event loop, each awaiting durable puts in
a loop. Every run records each commit's latency (p50/p99 beside the rate);
the asyncio run also the event loop thread's CPU per put
(`loop_cpu_us_per_op`): with N tasks in flight the mean latency is at least
N times it (Little's law), whatever the disk.
After the aio run the store is reopened and every acknowledged put is
looked for.

Beside it runs the asyncio floor (`asyncio_floor`): the same N tasks and the
same timing, each awaiting a bare future that a thread completes after a real
4 KiB pwrite + fdatasync round, with one wake-up of the loop per round, and
once more with no I/O in the rounds. It is there to show how much of the aio
run's rate and p99 is the event loop's own cost per await and the disk's, with
no store in between.

Gets: the same keys (16-byte random, 100-byte values) in pagestore and in
LMDB; random-order point gets, LMDB inside one read transaction (its best
case: no transaction per get), and pagestore's get_many in batches.

The machine may be shared, so every figure is given per round, and each
ratio as its median with the spread over the rounds.

    python -m bench.durable_peers [--rounds 3] [--seconds 3] [--keys 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import statistics
import tempfile
import threading
import time

import numpy as np

from bench.histogram import LogHistogram
from bench.peers import fdatasync_loop
from bench.workload import make_keys

VALUE = b"v" * 100
# Untimed writes first: a new store prepares its first WAL segments (64 MiB of
# zeros each, fsynced) in the first second, on the disk the timed run uses.
WARMUP = 1.0


def _summary(lat_ns: list, seconds: float, cpu: float = 0.0) -> dict:
    """Rate and latency; `cpu`: the process's user+system seconds over the run,
    reported per operation (less sensitive than the rate to a busy machine)."""
    h = LogHistogram()
    h.record_many(lat_ns)
    s = h.summary_us()
    return dict(ops=h.count, ops_per_s=h.count / seconds, p50_us=s["p50"], p99_us=s["p99"],
                cpu_us_per_op=cpu / max(h.count, 1) * 1e6)


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _threaded(put, threads: int, seconds: float) -> dict:
    """`threads` threads each calling put(key) in a loop for `seconds`."""
    lats: list = [[] for _ in range(threads)]
    start = threading.Barrier(threads + 1)
    stop_at = [0.0]

    def worker(t):
        now, mine, i = time.perf_counter_ns, lats[t], 0
        start.wait()
        end = stop_at[0]
        while True:
            t0 = now()
            if t0 >= end:
                return
            put(b"%02d-%09d" % (t, i))
            mine.append(now() - t0)
            i += 1

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    stop_at[0] = time.perf_counter_ns() + int(seconds * 1e9)
    t0, c0 = time.perf_counter(), _cpu()
    start.wait()
    for t in ts:
        t.join()
    return _summary([x for m in lats for x in m], time.perf_counter() - t0, _cpu() - c0)


def pagestore_threads(threads: int, seconds: float, data_dir=None) -> dict:
    """pagestore, wal_mode="fsync": a durable commit per put."""
    import pagestore
    d = tempfile.mkdtemp(prefix="bench-durable-ps-", dir=data_dir)
    try:
        with pagestore.open(d, wal_mode="fsync") as db:
            put = db.put
            _threaded(lambda k: put(b"w" + k, VALUE), threads, WARMUP)
            r = _threaded(lambda k: put(k, VALUE), threads, seconds)
            st = db.stats()
            r["group_mean"] = st["wal_group_size_mean"]
        return r
    finally:
        shutil.rmtree(d, ignore_errors=True)


def plyvel_threads(threads: int, seconds: float, data_dir=None) -> dict:
    """plyvel (LevelDB) with sync=True: a durable write per put."""
    import plyvel
    d = tempfile.mkdtemp(prefix="bench-durable-plyvel-", dir=data_dir)
    try:
        db = plyvel.DB(d, create_if_missing=True)
        put = db.put
        _threaded(lambda k: put(b"w" + k, VALUE, sync=True), threads, WARMUP)
        r = _threaded(lambda k: put(k, VALUE, sync=True), threads, seconds)
        db.close()
        return r
    finally:
        shutil.rmtree(d, ignore_errors=True)


def pagestore_aio(tasks: int, seconds: float, data_dir=None) -> dict:
    """pagestore.aio: `tasks` tasks in one loop, each awaiting durable puts;
    then every acknowledged put is looked for after reopening."""
    import pagestore
    d = tempfile.mkdtemp(prefix="bench-durable-aio-", dir=data_dir)
    acked: list = [0] * tasks
    lat: list = []

    async def main():
        async with pagestore.aio.open(d, wal_mode="fsync") as db:
            now = time.perf_counter_ns
            warm_end = now() + int(WARMUP * 1e9)

            async def warm(t):
                i = 0
                while now() < warm_end:
                    await db.put(b"w%03d-%09d" % (t, i), VALUE)
                    i += 1

            await asyncio.gather(*(warm(t) for t in range(tasks)))
            end = now() + int(seconds * 1e9)

            async def task(t):
                i, rec = 0, lat.append
                while True:
                    t0 = now()
                    if t0 >= end:
                        break
                    await db.put(b"%03d-%09d" % (t, i), VALUE)
                    rec(now() - t0)
                    i += 1
                acked[t] = i

            t0, c0, l0 = time.perf_counter(), _cpu(), time.thread_time()
            await asyncio.gather(*(task(t) for t in range(tasks)))
            loop_cpu = time.thread_time() - l0      # the event loop's thread alone
            return time.perf_counter() - t0, _cpu() - c0, loop_cpu, db.stats()["aio_group_size_mean"]

    try:
        took, cpu, loop_cpu, group = asyncio.run(main())
        r = _summary(lat, took, cpu)
        r["group_mean"] = group
        r["loop_cpu_us_per_op"] = loop_cpu / max(r["ops"], 1) * 1e6
        with pagestore.open(d) as db:
            missing = sum(1 for t in range(tasks) for i in range(acked[t])
                          if db.get(b"%03d-%09d" % (t, i)) != VALUE)
        r["acked"], r["missing_after_reopen"] = sum(acked), missing
        return r
    finally:
        shutil.rmtree(d, ignore_errors=True)


class _Rounds:
    """A group commit with no store behind it: `run` (its own thread) starts a
    round when a future is registered, reads how many are registered, writes
    4 KiB and fdatasyncs (nothing, without a file), then adds 1 to an eventfd
    the loop watches; `on_wake` (the loop's reader) completes every future
    registered before the finished round began."""

    BLOCK, BLOCKS = 4096, 256

    def __init__(self, fd: int, efd: int):
        self.fd, self.efd = fd, efd
        self.registered = [0]       # written by the loop's thread only
        self.covered = 0            # `registered` as read at the start of the last finished round
        self.completed = 0
        self.rounds = 0
        self.pending: collections.deque = collections.deque()
        self.wake = threading.Event()
        self.stop = False
        self.error: BaseException | None = None

    def run(self) -> None:
        """The rounds, until `stop`; an error is handed to the loop."""
        fd, efd, wake, registered = self.fd, self.efd, self.wake, self.registered
        buf = os.urandom(self.BLOCK)
        try:
            while True:
                wake.wait()
                wake.clear()        # a registration after this sets it again: no lost round
                if self.stop:
                    return
                n = registered[0]
                if n == self.covered:
                    continue
                if fd >= 0:
                    os.pwrite(fd, buf, (self.rounds % self.BLOCKS) * self.BLOCK)
                    os.fdatasync(fd)
                self.rounds += 1
                self.covered = n    # before the wake-up: the loop reads it after
                os.eventfd_write(efd, 1)
        except BaseException as exc:    # noqa: BLE001 - raised from the awaits
            self.error = exc
            os.eventfd_write(efd, 1)

    def on_wake(self) -> None:
        """One call per wake-up, whatever number of rounds it counts."""
        try:
            os.eventfd_read(self.efd)
        except BlockingIOError:
            return
        pop, done = self.pending.popleft, self.completed
        if self.error is not None:
            while self.pending:
                pop().set_exception(self.error)
            return
        covered = self.covered
        while done < covered:
            pop().set_result(None)
            done += 1
        self.completed = done


def asyncio_floor(tasks: int, seconds: float, data_dir=None, disk: bool = True, stall: float = 60.0) -> dict:
    """The ideal store's durable awaits: `tasks` tasks in one loop, each awaiting
    in a loop a future that `_Rounds` completes after a pwrite + fdatasync round
    (no I/O with disk=False), latency recorded as `pagestore_aio` records it.
    Raises RuntimeError if futures are still pending `stall` seconds after the
    run's end (a round that never came)."""
    d = tempfile.mkdtemp(prefix="bench-durable-floor-", dir=data_dir)
    fd = efd = -1
    lat: list = []
    per_task: list = [0] * tasks
    try:
        if disk:
            fd = os.open(os.path.join(d, "f"), os.O_RDWR | os.O_CREAT, 0o644)
            os.write(fd, b"\0" * _Rounds.BLOCK * _Rounds.BLOCKS)
            os.fsync(fd)
        efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        rounds = _Rounds(fd, efd)

        async def main():
            loop = asyncio.get_running_loop()
            loop.add_reader(efd, rounds.on_wake)
            now, future = time.perf_counter_ns, asyncio.Future
            register, registered = rounds.pending.append, rounds.registered
            is_set, wake = rounds.wake.is_set, rounds.wake.set
            end = now() + int(seconds * 1e9)

            async def task(t):
                i, rec = 0, lat.append
                while True:
                    t0 = now()
                    if t0 >= end:
                        break
                    fut = future(loop=loop)
                    register(fut)
                    registered[0] += 1
                    if not is_set():
                        wake()
                    await fut
                    rec(now() - t0)
                    i += 1
                per_task[t] = i

            t0, c0, l0 = time.perf_counter(), _cpu(), time.thread_time()
            try:
                await asyncio.wait_for(asyncio.gather(*(task(t) for t in range(tasks))), seconds + stall)
            except asyncio.TimeoutError:
                raise RuntimeError(f"asyncio floor: {rounds.registered[0] - rounds.completed} of "
                                   f"{rounds.registered[0]} futures still pending {stall:.0f} s after the "
                                   f"run's end ({rounds.rounds} rounds)") from None
            finally:
                loop.remove_reader(efd)
            return time.perf_counter() - t0, _cpu() - c0, time.thread_time() - l0

        syncer = threading.Thread(target=rounds.run, name="bench-floor-rounds", daemon=True)
        syncer.start()
        try:
            took, cpu, loop_cpu = asyncio.run(main())
        finally:
            rounds.stop = True
            rounds.wake.set()
            syncer.join()
        r = _summary(lat, took, cpu)
        r["loop_cpu_us_per_op"] = loop_cpu / max(r["ops"], 1) * 1e6
        r["group_mean"] = rounds.completed / max(rounds.rounds, 1)
        r.update(rounds=rounds.rounds, registered=rounds.registered[0], completed=rounds.completed,
                 most_per_task=max(per_task, default=0))
        return r
    finally:
        for f in (fd, efd):
            if f >= 0:
                os.close(f)
        shutil.rmtree(d, ignore_errors=True)


def gets(n: int, rounds: int, batch: int = 100, data_dir=None) -> list:
    """Per round: pagestore get, LMDB get in one read txn, pagestore get_many (gets/s)."""
    import lmdb

    import pagestore
    rng = np.random.default_rng(7)
    keys = make_keys(rng.permutation(n).astype(np.uint64) + np.uint64(1 << 40), 16)
    order = [keys[i] for i in rng.permutation(n)]
    batches = [order[i:i + batch] for i in range(0, n, batch)]
    d = tempfile.mkdtemp(prefix="bench-gets-", dir=data_dir)
    out = []
    try:
        db = pagestore.open(os.path.join(d, "ps"), memory_size=max(256 << 20, n * 600))
        for i in range(0, n, 10_000):
            db.put_many([(k, VALUE) for k in keys[i:i + 10_000]])
        env = lmdb.open(os.path.join(d, "lmdb"), map_size=max(1 << 30, n * 1000), sync=False)
        with env.begin(write=True) as tx:
            tx.cursor().putmulti([(k, VALUE) for k in keys])
        get, get_many = db.get, db.get_many
        for _ in range(rounds):
            t0 = time.perf_counter()
            for k in order:
                get(k)
            ps = n / (time.perf_counter() - t0)
            with env.begin() as tx:
                lget = tx.get
                t0 = time.perf_counter()
                for k in order:
                    lget(k)
                lm = n / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            for b in batches:
                get_many(b)
            gm = n / (time.perf_counter() - t0)
            out.append(dict(pagestore_get=ps, lmdb_txn_get=lm, pagestore_get_many=gm))
        db.close()
        env.close()
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def durable_compare(rounds: int = 3, seconds: float = 3.0, tasks: int = 256, keys: int = 1_000_000,
                    data_dir=None, progress=print) -> dict:
    """The interleaved rounds; returns per-round rows and the ratios (median, spread)."""
    rows = []
    for r in range(rounds):
        row = {}
        for name, fn in (("bare_fdatasync", lambda: fdatasync_loop(seconds, data_dir)),
                         ("pagestore_fsync_1", lambda: pagestore_threads(1, seconds, data_dir)),
                         ("plyvel_sync_16", lambda: plyvel_threads(16, seconds, data_dir)),
                         ("pagestore_fsync_16", lambda: pagestore_threads(16, seconds, data_dir)),
                         (f"pagestore_aio_{tasks}", lambda: pagestore_aio(tasks, seconds, data_dir)),
                         (f"asyncio_floor_{tasks}", lambda: asyncio_floor(tasks, seconds, data_dir)),
                         (f"asyncio_no_io_{tasks}", lambda: asyncio_floor(tasks, seconds, data_dir, disk=False))):
            progress(f"round {r + 1}/{rounds}: {name}")
            row[name] = fn()
        rows.append(row)
    aio = f"pagestore_aio_{tasks}"
    ratio_defs = {
        "fsync 1 thread / bare pwrite+fdatasync": lambda w: w["pagestore_fsync_1"]["ops_per_s"] / w["bare_fdatasync"]["ops_per_s"],
        "fsync 16 threads / plyvel sync 16 threads": lambda w: w["pagestore_fsync_16"]["ops_per_s"] / w["plyvel_sync_16"]["ops_per_s"],
        f"aio {tasks} tasks / plyvel sync 16 threads": lambda w: w[aio]["ops_per_s"] / w["plyvel_sync_16"]["ops_per_s"],
        f"aio {tasks} tasks p99 / fdatasync p99": lambda w: w[aio]["p99_us"] / w["bare_fdatasync"]["p99_us"],
        f"asyncio floor {tasks} tasks p99 / fdatasync p99":
            lambda w: w[f"asyncio_floor_{tasks}"]["p99_us"] / w["bare_fdatasync"]["p99_us"],
        f"asyncio no I/O {tasks} tasks p99 / fdatasync p99":
            lambda w: w[f"asyncio_no_io_{tasks}"]["p99_us"] / w["bare_fdatasync"]["p99_us"],
    }
    get_rows = []
    if keys:
        progress(f"gets: {keys} keys, {rounds} rounds")
        get_rows = gets(keys, rounds, data_dir=data_dir)
        ratio_defs_gets = {
            "get / LMDB get in one read txn": lambda g: g["pagestore_get"] / g["lmdb_txn_get"],
            "get_many(100) / LMDB get in one read txn": lambda g: g["pagestore_get_many"] / g["lmdb_txn_get"],
        }
    ratios = {k: _spread([f(w) for w in rows]) for k, f in ratio_defs.items()}
    for k, f in (ratio_defs_gets.items() if keys else ()):
        ratios[k] = _spread([f(g) for g in get_rows])
    return dict(rounds=rows, gets=get_rows, ratios=ratios)


def _spread(xs: list) -> dict:
    return dict(median=statistics.median(xs), min=min(xs), max=max(xs), each=xs)


def show(res: dict) -> None:
    """Print every round's figures, then the ratios."""
    for i, row in enumerate(res["rounds"]):
        print(f"-- round {i + 1}")
        for name, r in row.items():
            extra = "".join(f"  {k}={r[k]:.4g}" for k in ("loop_cpu_us_per_op", "group_mean", "acked",
                                                          "missing_after_reopen") if k in r)
            cpu = f"  cpu {r['cpu_us_per_op']:5.1f} us/op" if "cpu_us_per_op" in r else ""
            print(f"   {name:22s} {r['ops_per_s']:10.0f}/s  p50 {r['p50_us']:8.0f} us  p99 {r['p99_us']:8.0f} us{cpu}{extra}")
    for i, g in enumerate(res["gets"]):
        print(f"-- gets round {i + 1}: " + "  ".join(f"{k} {v:,.0f}/s" for k, v in g.items()))
    print("-- ratios: median [min - max] over the rounds")
    for k, s in res["ratios"].items():
        print(f"   {k:46s} {s['median']:.2f}x  [{s['min']:.2f} - {s['max']:.2f}]")


def main(argv=None) -> int:
    """Run the rounds from the command line and print them (``show``); exit code 0."""
    p = argparse.ArgumentParser(prog="python -m bench.durable_peers", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--tasks", type=int, default=256)
    p.add_argument("--keys", type=int, default=1_000_000, help="for the gets; 0 skips them")
    p.add_argument("--data-dir", default=None)
    a = p.parse_args(argv)
    show(durable_compare(a.rounds, a.seconds, a.tasks, a.keys, a.data_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
