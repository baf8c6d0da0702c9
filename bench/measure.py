"""The measuring loop: writer threads, per-second recording and the sampler.

Writers run without a break from warm-up into the measured phase; each op's
end time and latency go to a :class:`ThreadRecorder`, which drops ops outside
the measured window and files the rest by second (a latency histogram and an
op count per second) and by "inside / outside a checkpoint" (each writer reads
the store's ``checkpoint_state()`` once per chunk where it has one; else the
sampler's flag). The hot loop takes
one ``perf_counter_ns`` per op into a list (a comprehension over ``map``: no
per-op bytecode beyond the clock read); each chunk becomes a numpy array of
end stamps and latencies, and the histograms are filled from buffers of about
16 K ops, so the harness costs about 0.1 µs per op (the noop store measures it).

In ``fixed-rate`` mode each thread paces chunks of ops to an intended schedule
and measures latency from each op's intended start, so a stall shows up as
latency of the ops queued behind it (no coordinated omission).

The :class:`Sampler` runs in the calling thread: every ``SAMPLE_S`` it reads
``store.stats()`` (checkpoint running, dirty pages, buffer use, parks, the
checkpoint count), and at each second of the measured phase it records the
stats half of a timeseries row. A checkpoint's start is estimated as the moment
the sampler saw it done minus its ``total_ms``.
"""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np

from bench.histogram import LogHistogram
from bench.workload import OP_COMMIT, OP_DELETE, OP_GET, OP_PUT, OP_SCAN

SAMPLE_S = 0.05
NS = 1_000_000_000
_FAR = 1 << 62


class Control:
    """Shared between writers and the sampler."""

    def __init__(self, t0_ns: int, warmup_s: float, duration_s: float | None,
                 op_budget: int | None = None):
        self.t0_ns = t0_ns
        self.measure_start_ns = t0_ns + int(warmup_s * NS)
        self.end_ns = self.measure_start_ns + int(duration_s * NS) if duration_s else _FAR
        self.op_budget = op_budget          # ops per thread in the measured phase
        self.stop = False
        self.in_ckpt = False
        self.errors = []


class ThreadRecorder:
    """Per-thread measurements of the measured window.

    ``add`` only trims a chunk to the window and buffers it; histograms are filled
    from about ``FLUSH_OPS`` buffered ops at a time (``flush``), each op once, into
    the histogram of its (second, inside a checkpoint) pair -- that is what keeps the
    harness's own cost per op low. ``sec_hist``, ``hist_ckpt`` and ``hist_out`` are
    merged from those on reading, after a flush, so a reader sees every op added.
    """

    FLUSH_OPS = 1 << 14

    def __init__(self, ctl: Control):
        self.ctl = ctl
        self._hists = {}        # (second, in_ckpt) -> LogHistogram
        self._views = None      # merged (sec_hist, hist_ckpt, hist_out), until the next flush
        self._buf = []          # (ends, lats, in_ckpt) chunks not yet in the histograms
        self._buffered = 0
        self.ops = 0
        self.last_end_ns = 0

    def add(self, ends: np.ndarray, lats: np.ndarray, in_ckpt: bool | None = None) -> None:
        """One chunk of one writer: end stamps (non-decreasing: one thread's monotonic
        clock) and latencies, in ns; `in_ckpt`, the writer's own reading of whether a
        checkpoint ran during the chunk, else the sampler's view when it ends."""
        ctl = self.ctl
        n = ends.size
        if n == 0:
            return
        lo = 0 if ends[0] >= ctl.measure_start_ns else int(np.searchsorted(ends, ctl.measure_start_ns))
        hi = n if ends[-1] < ctl.end_ns else int(np.searchsorted(ends, ctl.end_ns))
        if hi <= lo:
            return
        if lo or hi < n:
            ends, lats = ends[lo:hi], lats[lo:hi]
        flag = ctl.in_ckpt if in_ckpt is None else in_ckpt
        self._buf.append((ends, lats, bool(flag)))
        self._buffered += hi - lo
        self.ops += hi - lo
        self.last_end_ns = int(ends[-1])
        if self._buffered >= self.FLUSH_OPS:
            self.flush()

    def flush(self) -> None:
        """File the buffered ops by (second, inside a checkpoint)."""
        buf = self._buf
        if not buf:
            return
        self._buf, self._buffered, self._views = [], 0, None
        ends = np.concatenate([c[0] for c in buf]) if len(buf) > 1 else buf[0][0]
        lats = np.concatenate([c[1] for c in buf]) if len(buf) > 1 else buf[0][1]
        secs = (ends - self.ctl.measure_start_ns) // NS
        # runs of equal (second, flag): cut at each chunk's start and each second's start
        starts, pos = [], 0
        for c in buf:
            starts.append(pos)
            pos += c[0].size
        cuts = set(starts)
        first, last = int(secs[0]), int(secs[-1])
        if last > first:
            cuts.update(np.searchsorted(secs, np.arange(first + 1, last + 1)).tolist())
        cuts = sorted(cuts) + [pos]
        runs, chunk = [], 0
        for a in cuts[:-1]:
            while chunk + 1 < len(starts) and starts[chunk + 1] <= a:
                chunk += 1
            key = (int(secs[a]), buf[chunk][2])
            if runs and runs[-1][0] == key:
                continue
            runs.append((key, a))
        idx = None
        for i, (key, a) in enumerate(runs):
            b = runs[i + 1][1] if i + 1 < len(runs) else pos
            h = self._hists.get(key)
            if h is None:
                h = self._hists[key] = LogHistogram()
            if idx is None:
                idx = h._index(lats)  # once for the whole buffer
            h.record_many(lats[a:b], idx[a:b])

    def _merged(self):
        self.flush()
        if self._views is None:
            secs, ck, out = {}, LogHistogram(), LogHistogram()
            for (s, flag), h in sorted(self._hists.items()):
                secs.setdefault(s, LogHistogram()).merge(h)
                (ck if flag else out).merge(h)
            self._views = (secs, ck, out)
        return self._views

    @property
    def sec_hist(self) -> dict:
        """second of the measured window -> latency histogram of the ops that ended in it."""
        return self._merged()[0]

    @property
    def hist_ckpt(self) -> LogHistogram:
        """Latencies of ops whose chunk ended while a checkpoint ran."""
        return self._merged()[1]

    @property
    def hist_out(self) -> LogHistogram:
        """Latencies of ops whose chunk ended outside any checkpoint."""
        return self._merged()[2]


def _dispatch(handle, style):
    put = handle.put_tx if style == "implicit-tx" else handle.put
    return put, handle.get, handle.delete, handle.scan


def run_writer(handle, batches, style: str, rec: ThreadRecorder, rate: float | None = None):
    """One writer thread: ops until the end of the window or the op budget."""
    ctl = rec.ctl
    now = time.perf_counter_ns
    pending = []
    chunk = 16
    interval_ns = NS / rate if rate else 0.0
    sent = 0
    try:
        put, get, delete, scan = _dispatch(handle, style)
        write_tx = handle.write_tx
        # A chunk is inside a checkpoint if one ran when it began or ended, or one
        # ended within it: the state read at each chunk's end serves as the next
        # chunk's start. (The sampler's 50 ms view would misfile the first tens of
        # ms of every checkpoint as outside and as many after it as inside.)
        probe = handle.checkpoint_state     # None: a store that does not checkpoint
        state = probe() if probe else None
        for b in batches:
            n = len(b.keys)
            pos = 0
            while pos < n:
                c = min(chunk, n - pos)
                if ctl.op_budget:
                    c = max(1, min(c, ctl.op_budget - rec.ops))
                if pos == 0 and c == n:
                    keys, vals = b.keys, b.values
                else:
                    keys, vals = b.keys[pos:pos + c], b.values[pos:pos + c]
                if rate:
                    due = ctl.t0_ns + int(sent * interval_ns)
                    wait = due - now()
                    if wait > 0:  # no spinning: the store needs both cores more than we do
                        time.sleep(wait / NS)
                if b.ops is None:
                    t_first = now()
                    # the whole per-op cost of the harness: put, then one clock read into a list
                    # (a comprehension over map keeps both calls out of the bytecode loop)
                    stamps = [now() for _ in map(put, keys, vals)]
                else:
                    stamps = []
                    app = stamps.append
                    t_first = now()
                    ops, slens = b.ops[pos:pos + c], b.scan_lens[pos:pos + c]
                    for op, k, v, sl in zip(ops, keys, vals, slens):
                        if style == "tx" and op in (OP_PUT, OP_DELETE):
                            pending.append((k, v if op == OP_PUT else None))
                        elif op == OP_PUT:
                            put(k, v)
                        elif op == OP_GET:
                            get(k)
                        elif op == OP_DELETE:
                            delete(k)
                        elif op == OP_SCAN:
                            scan(k, sl)
                        elif op == OP_COMMIT and pending:
                            write_tx(pending)
                            pending = []
                        app(now())
                ends = np.fromiter(stamps, dtype=np.int64, count=len(stamps))
                lats = np.empty_like(ends)  # np.diff(prepend=) costs more per chunk than this
                lats[0] = ends[0] - t_first
                np.subtract(ends[1:], ends[:-1], out=lats[1:])
                t0 = int(ends[-1])
                if rate:  # latency from each op's intended start
                    due = ctl.t0_ns + ((sent + np.arange(c)) * interval_ns).astype(np.int64)
                    lats = np.maximum(ends - due, lats)
                sent += c
                flag = None
                if probe:
                    now_state = probe()
                    flag = state[0] or now_state[0] or now_state[1] != state[1]
                    state = now_state
                rec.add(ends, lats, flag)
                pos += c
                spent = t0 - t_first
                # chunks of about 2 ms keep the window edges sharp at any op rate
                chunk = max(1, min(4096, int(c * 2_000_000 / spent))) if spent > 0 else min(4096, c * 2)
                if rate:  # paced: at most about 1 ms of the schedule per chunk
                    chunk = min(chunk, max(1, int(rate / 1000)))
                if t0 >= ctl.end_ns or ctl.stop or (ctl.op_budget and rec.ops >= ctl.op_budget):
                    return
    except Exception as e:  # reported by the runner; other writers stop too
        ctl.errors.append(repr(e))
        ctl.stop = True
    finally:
        if pending:
            handle.write_tx(pending)
        rec.flush()


def read_proc_io() -> int:
    """``write_bytes`` of /proc/self/io (0 where unavailable)."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def read_rss() -> dict:
    """VmRSS and VmHWM of this process, in bytes."""
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    name, val, _unit = line.split()
                    out[name[:-1]] = int(val) * 1024
    except OSError:
        pass
    return out


def checkpoint_running(st: dict) -> bool:
    """Whether the stats say a checkpoint is in progress: ``checkpoint_running`` where the
    store reports it, else pages still flagged in-checkpoint (``ckpt_pages``: steps 1-5)."""
    if "checkpoint_running" in st:
        return bool(st["checkpoint_running"])
    return int(st.get("ckpt_pages", 0) or 0) > 0


class Sampler:
    """Polls ``store.stats()`` and keeps per-second store state and checkpoint starts."""

    def __init__(self, store, ctl: Control, progress=None):
        self.store, self.ctl, self.progress = store, ctl, progress
        self.rows = {}            # second -> stats part of the timeseries row
        self.ckpt_done = {}       # checkpoint count -> seconds since measure start it was seen done
        self.ckpt_seen = {}       # checkpoint count -> last_checkpoint dict observed
        self.start_stats = {}
        self.end_stats = {}
        self.io_start = self.io_end = 0

    def _sample(self, st, prev):
        running = checkpoint_running(st)
        n = int(st.get("checkpoints", 0) or 0)
        n_prev = int(prev.get("checkpoints", 0) or 0) if prev else n
        new = n != n_prev
        if new:
            t = (time.perf_counter_ns() - self.ctl.measure_start_ns) / NS
            for c in range(n_prev + 1, n + 1):
                self.ckpt_done[c] = t
            if isinstance(st.get("last_checkpoint"), dict):
                self.ckpt_seen[n] = dict(st["last_checkpoint"])
        self.ctl.in_ckpt = running or new
        return running or new

    def run(self, threads) -> None:
        """Sample until the writers end; ticks fall exactly on the window's start, seconds and end."""
        ctl, stats, now = self.ctl, self.store.stats, time.perf_counter_ns
        ms, step = ctl.measure_start_ns, int(SAMPLE_S * NS)
        prev = stats()
        started = ended = False
        k, cur_sec, sec_stats, sec_flag = 0, 0, prev, False
        while any(t.is_alive() for t in threads):
            if not started:
                target = min(now() + step, ms)
            elif not ended:
                k += 1
                target = min(ms + k * step, ctl.end_ns)
            else:
                target = now() + step
            wait = target - now()
            if wait > 0:
                time.sleep(wait / NS)
            st = stats()
            flag = self._sample(st, prev)
            if not started and now() >= ms:
                started = True
                self.start_stats, self.io_start = st, read_proc_io()
                sec_stats, sec_flag = st, flag
            elif started and not ended:
                sec_flag = sec_flag or flag
                sec = (target - ms) // NS
                if sec != cur_sec:
                    self._close_second(cur_sec, sec_stats, st, sec_flag)
                    cur_sec, sec_stats, sec_flag = sec, st, flag
                if target >= ctl.end_ns:
                    ended = True
                    self.end_stats, self.io_end = st, read_proc_io()
                    if (ctl.end_ns - ms) % NS:
                        self._close_second(cur_sec, sec_stats, st, sec_flag)
            prev = st
            if self.progress is not None:
                self.progress(now())
        if not started:  # the writers ended within the warm-up
            self.start_stats, self.io_start = prev, read_proc_io()
        if not ended:  # an op budget, or a workload that ran out
            self._close_second(cur_sec, sec_stats, prev, sec_flag)
            self.end_stats, self.io_end = prev, read_proc_io()

    def _close_second(self, sec, before, after, flag):
        g = lambda d, k: d.get(k, 0) or 0  # noqa: E731
        self.rows[int(sec)] = dict(
            dirty_pages=int(g(after, "dirty_pages")), cow_used=int(g(after, "cow_used")),
            cow_capacity=int(g(after, "cow_capacity")),
            parks=int(g(after, "throttle_parks") - g(before, "throttle_parks")),
            park_seconds=float(g(after, "throttle_park_seconds") - g(before, "throttle_park_seconds")),
            checkpoint_running=bool(flag))


def measure(store, workload, cfg: dict, progress=None) -> dict:
    """Run writers over warm-up and the measured window; return the raw parts."""
    threads_n = int(cfg.get("threads", 1))
    rate = cfg.get("rate")
    per_thread_rate = float(rate) / threads_n if rate else None
    budget = int(cfg["ops"]) // threads_n if cfg.get("ops") else None
    # each writer's first batch (and its value pool) is built before the clock starts:
    # a late start would make a paced writer burst to catch up with its schedule
    streams = []
    for i in range(threads_n):
        it = workload.batches(i, threads_n)
        first = next(it, None)
        streams.append(itertools.chain([first], it) if first is not None else iter(()))
    ctl = Control(time.perf_counter_ns(), float(cfg.get("warmup", 0)),
                  None if budget else float(cfg.get("duration", 10)), budget)
    recs, threads = [], []
    for i in range(threads_n):
        rec = ThreadRecorder(ctl)
        th = threading.Thread(target=run_writer, name=f"bench-writer-{i}", daemon=True,
                              args=(store.worker(), streams[i],
                                    cfg.get("op_style", "atomic"), rec, per_thread_rate))
        recs.append(rec)
        threads.append(th)
    ckpt_thread = None
    if cfg.get("checkpoint_every") is not None:
        ckpt_thread = threading.Thread(target=_checkpoint_loop, daemon=True,
                                       args=(store, ctl, float(cfg["checkpoint_every"])))
    for th in threads:
        th.start()
    if ckpt_thread:
        ckpt_thread.start()
    sampler = Sampler(store, ctl, progress)
    sampler.run(threads)
    ctl.stop = True
    for th in threads:
        th.join()
    if ckpt_thread:
        ckpt_thread.join()
    end_ns = min(ctl.end_ns, max([r.last_end_ns for r in recs] + [ctl.measure_start_ns]))
    return dict(recorders=recs, sampler=sampler, errors=ctl.errors,
                duration_s=max(1e-9, (end_ns - ctl.measure_start_ns) / NS))


def _checkpoint_loop(store, ctl: Control, every: float):
    """Calls ``store.checkpoint()`` every ``every`` seconds (0: back to back)."""
    while not ctl.stop:
        due = time.monotonic() + max(every, 0.01)
        try:
            store.checkpoint()
        except Exception as e:
            ctl.errors.append(f"checkpoint: {e!r}")
            return
        while not ctl.stop and time.monotonic() < due:
            time.sleep(min(0.05, max(0.0, due - time.monotonic())))
