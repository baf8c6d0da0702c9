"""Workload generation: deterministic operation streams written as Parquet by Spark.

A workload is `ops` data operations split over `partitions` streams (one per
worker or node). Each stream is cut into fixed chunks of `CHUNK_OPS`
operations; every chunk is one Spark task whose numpy generator is seeded from
(seed, partition, chunk), so the bytes depend only on the spec and the
partition count, never on the cluster. Zipf ranks come from an inverse-CDF
table (exact for the first `ZIPF_TABLE` ranks, the analytic integral of
x^-theta beyond). The layout is documented in docs/workload-schema.md.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

OP_PUT, OP_GET, OP_DELETE, OP_SCAN, OP_COMMIT = 1, 2, 3, 4, 5
OP_CODES = {"put": OP_PUT, "get": OP_GET, "delete": OP_DELETE, "scan": OP_SCAN}
DISTRIBUTIONS = ("uniform", "zipf", "sequential", "unique", "hotset")
KEY_BYTES = 16
CHUNK_OPS = 1 << 20          # part of the determinism contract: do not change casually
ZIPF_TABLE = 1 << 12         # ranks with an exact CDF entry (32 KiB: stays in cache)
STREAM_SHIFT = 40            # sequential / unique key ids: partition << 40 | index
SCHEMA = pa.schema([("op", pa.int8()), ("key", pa.binary()),
                    ("value_len", pa.int32()), ("scan_len", pa.int32()),
                    ("partition", pa.int32())])
SPARK_SCHEMA = "op byte, key binary, value_len int, scan_len int, partition int"
META_FILE = "_workload.json"


def parse_mix(text: str) -> tuple:
    """'put=0.5,get=0.4,...' -> ((op_code, weight), ...) normalised to sum 1."""
    pairs = []
    for item in text.split(","):
        name, _, weight = item.strip().partition("=")
        if name not in OP_CODES:
            raise ValueError(f"unknown operation {name!r} in mix (known: {', '.join(OP_CODES)})")
        if float(weight) < 0:
            raise ValueError(f"negative weight for {name!r}")
        pairs.append((OP_CODES[name], float(weight)))
    total = sum(w for _, w in pairs)
    if total <= 0:
        raise ValueError("operation mix weights sum to zero")
    return tuple((op, w / total) for op, w in pairs)


def parse_size(text: str) -> tuple:
    """'fixed:100' or 'uniform:50-500' -> (lo, hi) inclusive."""
    kind, _, arg = text.partition(":")
    if kind == "fixed":
        lo = hi = int(arg)
    elif kind == "uniform":
        a, _, b = arg.partition("-")
        lo, hi = int(a), int(b)
    else:
        raise ValueError(f"size {text!r}: expected fixed:N or uniform:LO-HI")
    if lo < 0 or hi < lo:
        raise ValueError(f"size {text!r}: need 0 <= LO <= HI")
    return lo, hi


@dataclasses.dataclass(frozen=True)
class WorkloadSpec:
    ops: int
    partitions: int
    seed: int = 0
    dist: str = "uniform"
    theta: float = 0.99
    key_range: int = 1_000_000
    mix: tuple = ((OP_PUT, 0.5), (OP_GET, 0.4), (OP_DELETE, 0.05), (OP_SCAN, 0.05))
    tx_size: int = 1
    value_size: tuple = (100, 100)
    scan_len: tuple = (1, 100)
    hot_fraction: float = 0.01
    hot_share: float = 0.9
    chunk: int = CHUNK_OPS
    # not in the Parquet (values are not stored): the replaying harness's ValuePool uses it
    value_compressibility: float = 0.5

    def __post_init__(self):
        if self.dist not in DISTRIBUTIONS:
            raise ValueError(f"dist must be one of {DISTRIBUTIONS}, got {self.dist!r}")
        if min(self.partitions, self.tx_size, self.key_range, self.chunk) < 1 or self.ops < 0:
            raise ValueError("need ops >= 0 and partitions, tx_size, key_range, chunk >= 1")
        if self.partitions >= 1 << (64 - STREAM_SHIFT) or self.ops >= 1 << STREAM_SHIFT:
            raise ValueError("too many partitions or operations for 64-bit key ids")
        if not (self.theta > 0 and 0 < self.hot_fraction <= 1 and 0 <= self.hot_share <= 1):
            raise ValueError("need theta > 0, 0 < hot_fraction <= 1, 0 <= hot_share <= 1")
        if not 0 <= self.value_compressibility < 1:
            raise ValueError("need 0 <= value_compressibility < 1")

    def partition_ops(self, p: int) -> int:
        return self.ops // self.partitions + (1 if p < self.ops % self.partitions else 0)

    @property
    def chunk_ops(self) -> int:
        return max(self.tx_size, self.chunk // self.tx_size * self.tx_size)

    def chunks(self) -> list:
        """(partition, chunk, first_op, n_ops) for every chunk, in file order."""
        out = []
        for p in range(self.partitions):
            n = self.partition_ops(p)
            for c, start in enumerate(range(0, n, self.chunk_ops)):
                out.append((p, c, start, min(self.chunk_ops, n - start)))
        return out

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["mix"] = {name: w for name, code in OP_CODES.items() for op, w in self.mix if op == code}
        return d


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection on uint64 (used to spread key bytes)."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def key_bytes(ids: np.ndarray, ordered: bool) -> bytes:
    """16-byte keys: ordered = id || mix64(id); hashed = mix64(id) || id (big-endian)."""
    out = np.empty((len(ids), 2), dtype=">u8")
    ids = ids.astype(np.uint64)
    h = mix64(ids)
    out[:, 0], out[:, 1] = (ids, h) if ordered else (h, ids)
    return out.tobytes()


@lru_cache(maxsize=8)
def zipf_table(key_range: int, theta: float) -> tuple:
    """(cumulative weights of the first ranks, head sum, tail mass) for Zipf(theta) over key_range."""
    head = min(key_range, ZIPF_TABLE)
    cum = np.cumsum(np.arange(1, head + 1, dtype=np.float64) ** -theta)
    tail = 0.0
    if key_range > head:
        tail = _integral(head + 0.5, key_range + 0.5, theta)
    return cum, float(cum[-1]), tail


def _integral(a: float, b: float, theta: float) -> float:
    if abs(1.0 - theta) < 1e-12:
        return float(np.log(b / a))
    return (b ** (1 - theta) - a ** (1 - theta)) / (1 - theta)


def zipf_ranks(u: np.ndarray, key_range: int, theta: float) -> np.ndarray:
    """Inverse CDF: uniforms in [0,1) -> 0-based ranks (0 is the hottest key)."""
    cum, head_sum, tail = zipf_table(key_range, theta)
    x = u * (head_sum + tail)
    ranks = np.searchsorted(cum, x, side="right").astype(np.int64)
    in_tail = x >= head_sum
    if in_tail.any():
        a = len(cum) + 0.5
        rest = x[in_tail] - head_sum
        if abs(1.0 - theta) < 1e-12:
            r = a * np.exp(rest)
        else:
            r = (rest * (1 - theta) + a ** (1 - theta)) ** (1 / (1 - theta))
        ranks[in_tail] = np.clip(np.floor(r + 0.5).astype(np.int64), len(cum) + 1, key_range) - 1
    return np.minimum(ranks, key_range - 1)


def _key_ids(spec: WorkloadSpec, rng, p: int, first: int, n: int) -> np.ndarray:
    if spec.dist in ("sequential", "unique"):
        return (np.uint64(p) << np.uint64(STREAM_SHIFT)) + np.arange(first, first + n, dtype=np.uint64)
    if spec.dist == "uniform":
        return rng.integers(0, spec.key_range, size=n, dtype=np.uint64)
    if spec.dist == "zipf":
        return zipf_ranks(rng.random(n), spec.key_range, spec.theta).astype(np.uint64)
    hot = max(1, min(spec.key_range, round(spec.key_range * spec.hot_fraction)))
    is_hot = rng.random(n) < spec.hot_share
    ids = rng.integers(0, hot, size=n, dtype=np.uint64)
    if hot < spec.key_range:
        cold = rng.integers(hot, spec.key_range, size=n, dtype=np.uint64)
        ids = np.where(is_hot, ids, cold)
    return ids


def generate_chunk(spec: WorkloadSpec, p: int, c: int, first: int, n: int) -> pa.RecordBatch:
    """One chunk of partition p: n data operations plus its tx-commit markers."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([spec.seed, p, c])))
    codes = np.array([op for op, _ in spec.mix], dtype=np.int8)
    cum = np.cumsum([w for _, w in spec.mix])
    ops = codes[np.minimum(np.searchsorted(cum, rng.random(n), side="right"), len(codes) - 1)]
    keys = key_bytes(_key_ids(spec, rng, p, first, n), ordered=spec.dist == "sequential")
    vlen = rng.integers(spec.value_size[0], spec.value_size[1] + 1, size=n, dtype=np.int32)
    slen = rng.integers(spec.scan_len[0], spec.scan_len[1] + 1, size=n, dtype=np.int32)
    vlen[ops != OP_PUT] = 0
    slen[ops != OP_SCAN] = 0
    if spec.tx_size == 1:
        offsets = np.arange(0, KEY_BYTES * (n + 1), KEY_BYTES, dtype=np.int32)
        key = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(keys)])
        return _batch(ops, key, vlen, slen, p, n)
    t = spec.tx_size
    total = n + -(-n // t)
    is_data = np.ones(total, dtype=bool)
    markers = np.arange(1, n // t + 1) * (t + 1) - 1
    is_data[markers] = False
    is_data[total - 1] = False                       # every chunk closes its last transaction
    out_ops = np.full(total, OP_COMMIT, dtype=np.int8)
    out_v, out_s = np.zeros(total, dtype=np.int32), np.zeros(total, dtype=np.int32)
    out_ops[is_data], out_v[is_data], out_s[is_data] = ops, vlen, slen
    offsets = np.concatenate([[0], np.cumsum(is_data * KEY_BYTES)]).astype(np.int32)
    validity = pa.array(is_data).buffers()[1]
    key = pa.Array.from_buffers(pa.binary(), total, [validity, pa.py_buffer(offsets), pa.py_buffer(keys)],
                                null_count=total - n)
    return _batch(out_ops, key, out_v, out_s, p, total)


def _batch(ops, key, vlen, slen, p, total) -> pa.RecordBatch:
    part = pa.array(np.full(total, p, dtype=np.int32))
    return pa.RecordBatch.from_arrays([pa.array(ops), key, pa.array(vlen), pa.array(slen), part],
                                      schema=SCHEMA)


def generate(spark, out: str, spec: WorkloadSpec) -> dict:
    """Write the workload under `out` (Hive layout partition=<p>/part-*.parquet); return its metadata."""
    chunks = spec.chunks()
    if not chunks:
        raise ValueError("the workload has no operations")

    def task(batches):
        for b in batches:
            for i in b.column(0).to_pylist():
                p, c, first, n = chunks[i]
                yield generate_chunk(spec, p, c, first, n)

    df = (spark.range(len(chunks), numPartitions=len(chunks))
          .mapInArrow(task, SPARK_SCHEMA))
    # One task writes one file of one partition; no sort before the write, so the
    # rows keep their generated order (file name order = chunk order).
    spark.conf.set("spark.sql.optimizer.plannedWrite.enabled", "false")
    spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", "4")
    df.write.mode("overwrite").option("compression", "snappy").partitionBy("partition").parquet(out)
    meta = {"format": "pagestore-workload/1", "spec": spec.to_json(), "chunk_ops": spec.chunk_ops,
            "partition_ops": [spec.partition_ops(p) for p in range(spec.partitions)]}
    if "://" not in out or out.startswith("file://"):
        with open(os.path.join(out.removeprefix("file://"), META_FILE), "w") as f:
            json.dump(meta, f, indent=1)
    return meta


def partition_files(path: str, partition: int) -> list:
    """The Parquet files of one workload partition, in replay order."""
    return sorted(glob.glob(os.path.join(path, f"partition={partition}", "*.parquet")))


class PartitionReader:
    """Streams one partition of a generated workload as Arrow batches (pyarrow only)."""

    def __init__(self, path: str, partition: int, batch_size: int = 65536):
        self.path, self.partition, self.batch_size = path, partition, batch_size

    def __iter__(self):
        for f in partition_files(self.path, self.partition):
            yield from pq.ParquetFile(f).iter_batches(batch_size=self.batch_size,
                                                      columns=["op", "key", "value_len", "scan_len"])

    def read(self) -> pa.Table:
        batches = list(self)
        return pa.Table.from_batches(batches) if batches else SCHEMA.remove(4).empty_table()
