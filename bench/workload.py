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

Generation is vectorised per batch with numpy (keys leave one matrix through a
single ``struct.unpack``); values are taken from a pool built before the timed
loop, so no value is built in the hot loop. Values are compressible like
db_bench's (``value_compressibility``, default 0.5: a random run of half the
length, repeated; 0 gives random bytes) so that page and recovery-data codecs
meet data that compresses as real data does; see ``docs/bench.md``.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import struct
import threading
from dataclasses import dataclass

import numpy as np

OP_PUT, OP_GET, OP_DELETE, OP_SCAN, OP_COMMIT = 1, 2, 3, 4, 5
OP_NAMES = {"put": OP_PUT, "get": OP_GET, "delete": OP_DELETE, "scan": OP_SCAN}
DISTRIBUTIONS = ("uniform", "zipf", "sequential", "unique", "hot-set")
_SPLIT_ROWS = 1 << 16        # rows per struct unpack in make_keys
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
    if n == 0:
        return []
    words = max(2, -(-key_size // 8))
    mat = np.zeros((n, words), dtype=">u8") if words > 2 else np.empty((n, 2), dtype=">u8")
    a, b = (idx, mix64(idx)) if ordered else (mix64(idx), idx)
    mat[:, 0] = a
    mat[:, 1] = b
    # one C-level unpack cuts the rows into bytes objects (trailing zero bytes kept, the
    # rest of a row skipped): 3x cheaper than a void view's tolist, and key generation is
    # part of the harness's per-op cost
    buf, row = mat.tobytes(), 8 * words
    if n <= _SPLIT_ROWS:
        return list(_row_splitter(n, key_size, row).unpack(buf))
    out, full = [], _row_splitter(_SPLIT_ROWS, key_size, row)
    for s in range(0, n, _SPLIT_ROWS):  # bounded Struct sizes: the cache stays small
        part = buf[s * row:(s + _SPLIT_ROWS) * row]
        out += (full if len(part) == _SPLIT_ROWS * row else
                _row_splitter(len(part) // row, key_size, row)).unpack(part)
    return out


@functools.lru_cache(maxsize=32)
def _row_splitter(n: int, size: int, row: int) -> struct.Struct:
    return struct.Struct((f"{size}s{row - size}x" if row > size else f"{size}s") * n)


DEFAULT_COMPRESSIBILITY = 0.5   # db_bench's --compression_ratio default (0.5), as 1 - ratio
_PIECE = 100                     # db_bench builds its value buffer from 100-byte pieces


def compressible_bytes(rng, size: int, compressibility: float) -> bytes:
    """``size`` bytes a fast compressor shrinks by about ``compressibility``: a random run of
    ``round(size * (1 - compressibility))`` bytes (at least 1) repeated to fill the size, as
    db_bench's CompressibleString. 0 gives plain random bytes."""
    return compressible_many(rng, [size], compressibility)[0]


def compressible_many(rng, sizes, compressibility: float) -> list:
    """:func:`compressible_bytes` for each size, cutting the random runs from one buffer
    (one ``rng.bytes`` call per value would cost ~10 us each)."""
    sizes = [int(x) for x in sizes]
    if compressibility <= 0:
        return [rng.bytes(x) for x in sizes]
    raws = [max(1, round(x * (1.0 - compressibility))) if x > 1 else x for x in sizes]
    blob, out, off = rng.bytes(sum(raws)), [], 0
    for x, r in zip(sizes, raws):
        raw = blob[off:off + r]
        off += r
        out.append((raw * -(-x // r))[:x] if r else b"")
    return out


def check_compressibility(c) -> float:
    c = float(c)
    if not 0.0 <= c < 1.0:
        raise ValueError(f"value_compressibility must be in [0, 1), not {c!r}")
    return c


class ValuePool:
    """Value byte strings; ``take(n)`` returns n of them, rotating through the pool.

    ``compressibility`` (default 0.5, db_bench's): each value is built by
    :func:`compressible_bytes`, so snappy/lz4/zstd cut it by about that fraction;
    0 gives random (incompressible) bytes. ``by_length`` slices a 1 MiB buffer made,
    like db_bench's, of 100-byte pieces built the same way.
    """

    def __init__(self, size: int = 100, size_max: int | None = None, count: int = 8192, seed: int = 7,
                 compressibility: float = DEFAULT_COMPRESSIBILITY):
        self.compressibility = c = check_compressibility(compressibility)
        rng = np.random.default_rng(seed)
        hi = max(size, size_max or size)
        sizes = rng.integers(size, hi + 1, count) if hi > size else np.full(count, size)
        self.values, off = [], 0
        if c == 0:  # the pre-option byte stream, unchanged
            blob = rng.bytes(int(sizes.sum()) + 1)
            for s in sizes.tolist():
                self.values.append(blob[off:off + s])
                off += s
            self._blob = rng.bytes(1 << 20) + rng.bytes(hi)
        else:
            self.values = compressible_many(rng, sizes.tolist(), c)
            n = ((1 << 20) + hi) // _PIECE + 1
            self._blob = b"".join(compressible_many(rng, [_PIECE] * n, c))
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
        """One value per requested length (slices of the 1 MiB buffer)."""
        out, blob = [], self._blob
        # compressible slices start on a piece: a slice cutting two pieces would carry two
        # random runs and compress by less than the option says
        if self.compressibility == 0:
            step, span = 997, 1 << 20
        else:
            step, span = 997 * _PIECE, (1 << 20) // _PIECE * _PIECE
        for ln in lengths:
            if self._off + ln > len(blob):
                self._off = 0
            out.append(blob[self._off:self._off + ln])
            self._off = (self._off + step) % span
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

    transactional = False     # single operations: no commit markers to replay up to

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
        self.compressibility = check_compressibility(cfg.get("value_compressibility", DEFAULT_COMPRESSIBILITY))

    def _keys(self, idx: np.ndarray) -> list:
        return make_keys(idx, self.key_size, self.ordered)

    def batches(self, thread: int = 0, threads: int = 1):
        ks = KeyStream(self.cfg, thread, threads)
        pool = ValuePool(int(self.cfg.get("value_size", 100)), self.cfg.get("value_size_max"),
                         seed=int(self.cfg.get("seed", 1)) * 1000 + thread, compressibility=self.compressibility)
        n, rng = self.batch, np.random.default_rng([int(self.cfg.get("seed", 1)), thread, 99])
        while True:
            keys = self._keys(ks.draw(n))
            if self.all_puts:
                yield Batch(keys, pool.take(n))
            else:
                ops = rng.choice(self.codes, n, p=self.probs).tolist()
                yield Batch(keys, pool.take(n), ops, [self.scan_len] * n)

    def preload_pairs(self, chunk: int = 100_000):
        """All keys of the key range, in random order, with values: lists of pairs."""
        k = int(self.cfg.get("key_range", 100_000))
        order = np.random.default_rng(int(self.cfg.get("seed", 1)) + 5).permutation(k).astype(np.uint64)
        pool = ValuePool(int(self.cfg.get("value_size", 100)), self.cfg.get("value_size_max"), seed=3,
                         compressibility=self.compressibility)
        for s in range(0, k, chunk):
            idx = order[s:s + chunk]
            yield list(zip(self._keys(idx), pool.take(idx.size)))


class ParquetWorkload:
    """Streams a Spark-written workload (columns op, key, value_len, scan_len).

    ``path`` is the dataset directory partitioned by ``partition`` (Hive layout,
    ``<path>/partition=<p>/*.parquet``) or a single Parquet file. Batches are
    read with ``ParquetFile.iter_batches``: the file is never held in memory.
    Threads share one reader; each takes the next batch. ``transactional`` is
    true when the generator's metadata says transactions hold several ops; the
    runner then replays writes up to each commit marker as one transaction.
    Value bytes come from a :class:`ValuePool` buffer with the spec's
    ``value_compressibility`` (0.5 when the spec has none), unless given here.
    """

    COLUMNS = ("op", "key", "value_len", "scan_len")

    def __init__(self, path: str, partition=0, batch_size: int = 4096, compressibility=None):
        self.path, self.partition, self.batch_size = path, partition, batch_size
        if os.path.isfile(path):
            self.files = [path]
        else:
            self.files = sorted(glob.glob(os.path.join(path, f"partition={partition}", "*.parquet")))
        if not self.files:
            raise FileNotFoundError(f"no Parquet files for partition {partition} under {path}")
        self._lock = threading.Lock()
        self._it = None
        spec = self._spec()
        if compressibility is None:
            compressibility = spec.get("value_compressibility", DEFAULT_COMPRESSIBILITY)
        self.compressibility = check_compressibility(compressibility)
        self._pool = ValuePool(1, count=1, compressibility=self.compressibility)
        try:
            self.transactional = int(spec.get("tx_size", 1)) > 1
        except (TypeError, ValueError):
            self.transactional = False

    def _spec(self) -> dict:
        """The generator's spec from ``_workload.json``; {} when absent or unreadable."""
        meta = os.path.join(self.path, "_workload.json")
        try:
            with open(meta) as f:
                spec = json.load(f).get("spec", {})
            spec = json.loads(spec) if isinstance(spec, str) else spec
            return spec if isinstance(spec, dict) else {}
        except (OSError, ValueError, AttributeError, TypeError):
            return {}

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
