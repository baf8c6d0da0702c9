"""Workloads: generated key/value streams and replay of Spark-built Parquet files.

A workload hands each writer thread an endless iterator of :class:`Batch`
objects (``batches(thread, threads)``); the runner stops on time or op count.
Keys come from integer indexes through a bijective 64-bit mix (splitmix64's
finaliser), so a key index always maps to the same key bytes and random order
is random in key space too. Layout of a key of ``key_size`` bytes (>= 8):
``be64(mix(i)) + be64(i) + zero padding`` for every distribution except
``sequential``, whose keys are ``be64(i) + be64(mix(i))`` (ascending order).

Distributions over ``key_range`` indexes: ``uniform``, ``zipf`` (bounded,
exponent ``zipf_theta``), ``sequential`` (each thread ascends its own stride,
wrapping), ``unique`` (never repeats, starts above the key range, so it grows
the store), ``hot-set`` (``hot_ops`` of the operations hit the first
``hot_fraction`` of the range).

Generation is vectorised per batch with numpy; values are taken from a pool of
random (incompressible) byte strings so no value is built in the hot loop.
"""

from __future__ import annotations

import glob
import json
import os
import threading
from dataclasses import dataclass

import numpy as np

OP_PUT, OP_GET, OP_DELETE, OP_SCAN, OP_COMMIT = 1, 2, 3, 4, 5
OP_NAMES = {"put": OP_PUT, "get": OP_GET, "delete": OP_DELETE, "scan": OP_SCAN}
DISTRIBUTIONS = ("uniform", "zipf", "sequential", "unique", "hot-set")
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


@dataclass
class Batch:
    """One slice of work. ``ops is None`` means every entry is a put."""

    keys: list
    values: list
    ops: list | None = None
    scan_lens: list | None = None


def mix64(idx: np.ndarray) -> np.ndarray:
    """Bijective 64-bit mix of each index."""
    x = np.asarray(idx, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= _M1
        x ^= x >> np.uint64(27)
        x *= _M2
        x ^= x >> np.uint64(31)
    return x


def make_keys(idx: np.ndarray, key_size: int = 16, ordered: bool = False) -> list:
    """Key bytes for each index (see the module docstring for the layout)."""
    if key_size < 8:
        raise ValueError("key_size must be at least 8")
    idx = np.asarray(idx, dtype=np.uint64)
    n = idx.size
    mat = np.zeros((n, max(key_size, 16)), dtype=np.uint8)
    a, b = (idx, mix64(idx)) if ordered else (mix64(idx), idx)
    mat[:, 0:8] = a.astype(">u8").view(np.uint8).reshape(n, 8)
    mat[:, 8:16] = b.astype(">u8").view(np.uint8).reshape(n, 8)
    # a void view turns each row into one bytes object, trailing zero bytes kept
    return np.ascontiguousarray(mat[:, :key_size]).view(f"V{key_size}").ravel().tolist()


class ValuePool:
    """Random byte strings; ``take(n)`` returns n of them, rotating through the pool."""

    def __init__(self, size: int = 100, size_max: int | None = None, count: int = 8192, seed: int = 7):
        rng = np.random.default_rng(seed)
        hi = max(size, size_max or size)
        sizes = rng.integers(size, hi + 1, count) if hi > size else np.full(count, size)
        blob = rng.bytes(int(sizes.sum()) + 1)
        self.values, off = [], 0
        for s in sizes.tolist():
            self.values.append(blob[off:off + s])
            off += s
        self._blob = rng.bytes(1 << 20) + rng.bytes(hi)
        self._pos = 0
        self._off = 0

    def take(self, n: int) -> list:
        out, vals = [], self.values
        while len(out) < n:
            chunk = vals[self._pos:self._pos + n - len(out)]
            out += chunk
            self._pos = (self._pos + len(chunk)) % len(vals)
        return out

    def by_length(self, lengths) -> list:
        """One value per requested length (slices of a random 1 MiB buffer)."""
        out, blob = [], self._blob
        for ln in lengths:
            if self._off + ln > len(blob):
                self._off = 0
            out.append(blob[self._off:self._off + ln])
            self._off = (self._off + 997) % (1 << 20)
        return out


class KeyStream:
    """Key indexes for one thread, drawn from a distribution."""

    def __init__(self, cfg: dict, thread: int, threads: int):
        self.dist = cfg.get("distribution", "uniform")
        if self.dist not in DISTRIBUTIONS:
            raise ValueError(f"unknown distribution {self.dist!r}")
        self.k = int(cfg.get("key_range", 100_000))
        self.rng = np.random.default_rng([int(cfg.get("seed", 1)), thread])
        self.thread, self.threads = thread, threads
        self.next = 0
        if self.dist == "zipf":
            w = 1.0 / np.arange(1, self.k + 1, dtype=np.float64) ** float(cfg.get("zipf_theta", 0.99))
            self.cdf = np.cumsum(w) / w.sum()
        self.hot_k = max(1, int(self.k * float(cfg.get("hot_fraction", 0.1))))
        self.hot_ops = float(cfg.get("hot_ops", 0.9))

    def draw(self, n: int) -> np.ndarray:
        rng, k = self.rng, self.k
        if self.dist == "uniform":
            return rng.integers(0, k, n, dtype=np.uint64)
        if self.dist == "zipf":
            return np.searchsorted(self.cdf, rng.random(n)).astype(np.uint64)
        if self.dist == "hot-set":
            hot = rng.random(n) < self.hot_ops
            cold_lo = self.hot_k if self.hot_k < k else 0
            return np.where(hot, rng.integers(0, self.hot_k, n),
                            rng.integers(cold_lo, k, n)).astype(np.uint64)
        seq = (self.next + np.arange(n, dtype=np.uint64)) * np.uint64(self.threads) + np.uint64(self.thread)
        self.next += n
        if self.dist == "sequential":
            return seq % np.uint64(k)
        return seq + np.uint64(k)  # unique: above the preloaded range, never repeated


class GeneratedWorkload:
    """Operations from a config: mix, distribution, key and value sizes."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.key_size = int(cfg.get("key_size", 16))
        self.batch = int(cfg.get("batch", 512))
        mix = cfg.get("mix") or {"put": 1.0}
        bad = set(mix) - set(OP_NAMES)
        if bad:
            raise ValueError(f"unknown op in mix: {', '.join(sorted(bad))}")
        total = float(sum(mix.values()))
        self.codes = np.array([OP_NAMES[o] for o in mix], dtype=np.int8)
        self.probs = np.array([mix[o] / total for o in mix])
        self.all_puts = list(mix) == ["put"]
        self.scan_len = int(cfg.get("scan_len", 100))
        self.ordered = cfg.get("distribution") == "sequential"

    def batches(self, thread: int = 0, threads: int = 1):
        ks = KeyStream(self.cfg, thread, threads)
        pool = ValuePool(int(self.cfg.get("value_size", 100)), self.cfg.get("value_size_max"),
                         seed=int(self.cfg.get("seed", 1)) * 1000 + thread)
        n, rng = self.batch, np.random.default_rng([int(self.cfg.get("seed", 1)), thread, 99])
        while True:
            keys = make_keys(ks.draw(n), self.key_size, self.ordered)
            if self.all_puts:
                yield Batch(keys, pool.take(n))
            else:
                ops = rng.choice(self.codes, n, p=self.probs).tolist()
                yield Batch(keys, pool.take(n), ops, [self.scan_len] * n)

    def preload_pairs(self, chunk: int = 100_000):
        """All keys of the key range, in random order, with values: lists of pairs."""
        k = int(self.cfg.get("key_range", 100_000))
        order = np.random.default_rng(int(self.cfg.get("seed", 1)) + 5).permutation(k).astype(np.uint64)
        pool = ValuePool(int(self.cfg.get("value_size", 100)), self.cfg.get("value_size_max"), seed=3)
        for s in range(0, k, chunk):
            idx = order[s:s + chunk]
            yield list(zip(make_keys(idx, self.key_size, self.ordered), pool.take(idx.size)))


class ParquetWorkload:
    """Streams a Spark-written workload (columns op, key, value_len, scan_len).

    ``path`` is the dataset directory partitioned by ``partition`` (Hive layout,
    ``<path>/partition=<p>/*.parquet``) or a single Parquet file. Batches are
    read with ``ParquetFile.iter_batches``: the file is never held in memory.
    Threads share one reader; each takes the next batch. ``transactional`` is
    true when the generator's metadata says transactions hold several ops; the
    runner then replays writes up to each commit marker as one transaction.
    """

    COLUMNS = ("op", "key", "value_len", "scan_len")

    def __init__(self, path: str, partition=0, batch_size: int = 4096):
        self.path, self.partition, self.batch_size = path, partition, batch_size
        if os.path.isfile(path):
            self.files = [path]
        else:
            self.files = sorted(glob.glob(os.path.join(path, f"partition={partition}", "*.parquet")))
        if not self.files:
            raise FileNotFoundError(f"no Parquet files for partition {partition} under {path}")
        self._lock = threading.Lock()
        self._it = None
        self._pool = ValuePool(1, count=1)
        self.transactional = self._tx_size() > 1

    def _tx_size(self) -> int:
        """``tx_size`` from the generator's ``_workload.json``, 1 when absent."""
        meta = os.path.join(self.path, "_workload.json")
        try:
            with open(meta) as f:
                spec = json.load(f).get("spec", {})
            spec = json.loads(spec) if isinstance(spec, str) else spec
            return int(spec.get("tx_size", 1))
        except (OSError, ValueError, AttributeError, TypeError):
            return 1

    def _record_batches(self):
        import pyarrow.parquet as pq
        for f in self.files:
            pf = pq.ParquetFile(f)
            missing = set(self.COLUMNS) - set(pf.schema_arrow.names)
            if missing:
                raise ValueError(f"{f}: missing columns {', '.join(sorted(missing))}")
            yield from pf.iter_batches(batch_size=self.batch_size, columns=list(self.COLUMNS))

    def iter_record_batches(self):
        """The raw pyarrow record batches, in file order."""
        return self._record_batches()

    def _to_batch(self, rb) -> Batch:
        cols = dict(zip(rb.schema.names, rb.columns))
        ops = cols["op"].to_numpy(zero_copy_only=False).astype(np.int8).tolist()
        keys = cols["key"].to_pylist()
        vlen = cols["value_len"].fill_null(0).to_numpy(zero_copy_only=False).tolist()
        slen = cols["scan_len"].fill_null(0).to_numpy(zero_copy_only=False).tolist()
        return Batch(keys, self._pool.by_length(vlen), ops, slen)

    def batches(self, thread: int = 0, threads: int = 1):
        with self._lock:
            if self._it is None:
                self._it = self._record_batches()
        while True:
            with self._lock:
                rb = next(self._it, None)
                if rb is None:
                    return
                batch = self._to_batch(rb)
            yield batch

    def preload_pairs(self, chunk: int = 100_000):
        return iter(())
