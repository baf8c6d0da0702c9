"""Synthetic result rows: a runner with the harness's signature, and bulk datasets.

`runner(config, workload, node)` has the signature of `bench.runner.run` and
returns rows that conform to docs/results-schema.md, shaped by the real
workload partition it is handed (it counts the partition's operations). The
distributed run is tested with it, and `python -m bench.spark run
--runner bench.spark.synth:runner` is a dry run of a cluster without a store.
`write_results` writes a large synthetic results directory (the report's
speed is measured on one). Figures are plausible, not measured.
"""

from __future__ import annotations

import itertools
import json
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .generate import OP_COMMIT, OP_PUT, PartitionReader
from bench.results import write_table
from bench.schema import SCHEMAS

PAGE = 4096
_CODEC_RATIO = {"disabled": 1.0, "skip_garbage": 0.7, "snappy": 0.45, "lz4": 0.42, "zstd": 0.3}


def config_matrix(n: int) -> list:
    """n distinct configurations: pagestore's modes × codecs × throttling, then peers."""
    out = [dict(store=s, scenario="full-speed", recovery_data="", compression="", wal_mode=w,
                throttling="", op_style="batch", threads=1)
           for s, w in (("sqlite", "normal"), ("sqlite", "full"), ("lmdb", ""), ("rocksdict", ""))]
    for thr, comp, rd in itertools.product(("fill_rate", "exponential_backoff", "adaptive"),
                                           tuple(_CODEC_RATIO), ("wal", "checkpoint")):
        out.append(dict(store="pagestore", scenario="full-speed", recovery_data=rd, compression=comp,
                        wal_mode="log_only", throttling=thr, op_style="batch", threads=4))
    pages = [c for c in out if c["store"] == "pagestore"]
    chosen = pages[: max(0, n - 2)] + out[: min(2, n)]
    return chosen[:n]


def _arrow(dataset: str, cols: dict) -> pa.Table:
    """Columns as a table of the dataset's schema; a column the generator does not fake is null."""
    n = len(next(iter(cols.values())))
    full = {f.name: cols.get(f.name, [None] * n) for f in SCHEMAS[dataset]}
    return pa.table(full, schema=SCHEMAS[dataset])


def _rng(run_id: str, node: int) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(run_id.encode()), node])


def node_rows(run_id: str, node: int, cfg: dict, seconds: int, put_share: float = 0.5,
              ops_hint: int | None = None) -> dict:
    """Columns (dict of numpy arrays / lists) for one run and node of one configuration."""
    rng = _rng(run_id, node)
    rd, comp = cfg.get("recovery_data", ""), cfg.get("compression", "")
    base = 200_000.0 if cfg["store"] == "pagestore" else 120_000.0
    base *= 1.04 if rd == "checkpoint" else 1.0
    sec = np.arange(seconds, dtype=np.int32)
    period = 30
    running = ((sec % period) < 8) & (cfg["store"] == "pagestore")
    thr = base * (1 - 0.15 * running) * rng.normal(1.0, 0.03, seconds)
    if ops_hint is not None:
        thr *= ops_hint / max(1.0, thr.sum())
    ops = np.maximum(thr, 0).astype(np.int64)
    lat_mean = 1e6 * cfg.get("threads", 1) / np.maximum(thr, 1)
    paged = cfg["store"] == "pagestore"
    cap = 65536 if paged else 0
    cow = np.where(running & paged, (cap * rng.uniform(0.2, 0.7, seconds)).astype(np.int64), 0)
    parks = np.where(cow > cap * 0.5, rng.integers(0, 50, seconds), 0).astype(np.int64)
    ts = dict(run_id=[run_id] * seconds, node=np.full(seconds, node, np.int32), second=sec, ops=ops,
              throughput=ops.astype(np.float64), lat_mean_us=lat_mean, lat_p50_us=lat_mean * 0.8,
              lat_p99_us=lat_mean * (4 + 3 * running), lat_p999_us=lat_mean * 12,
              lat_max_us=lat_mean * 40, dirty_pages=rng.integers(1000, 50000, seconds),
              cow_used=cow, cow_capacity=np.full(seconds, cap, np.int64), parks=parks,
              park_seconds=parks * 2e-5, checkpoint_running=running)
    n_cp = max(1, seconds // period) if paged else 0
    pages = rng.integers(20_000, 60_000, n_cp)
    ratio = _CODEC_RATIO.get(comp, 1.0)
    rec = (pages * PAGE * ratio).astype(np.int64) if rd == "checkpoint" else np.zeros(n_cp, np.int64)
    rec_ms = rec / 4e5
    page_ms = pages * PAGE / 5e5
    fsync_ms = rng.uniform(5, 40, n_cp)
    cp = dict(run_id=[run_id] * n_cp, node=np.full(n_cp, node, np.int32),
              checkpoint_id=np.arange(1, n_cp + 1, dtype=np.int64),
              t_start=np.arange(n_cp, dtype=np.float64) * period, pages=pages, recovery_bytes=rec,
              lock_ms=rng.uniform(0.1, 2.0, n_cp), recovery_write_ms=rec_ms, page_write_ms=page_ms,
              fsync_ms=fsync_ms, total_ms=rec_ms + page_ms + fsync_ms,
              cow_peak=rng.integers(1000, max(cap, 1001), n_cp))
    total_ops = int(ops.sum())
    wal_per_put = 60.0 + (PAGE * 0.5 * ratio if rd == "wal" else 0.0)
    wal = int(total_ops * put_share * wal_per_put)
    page_bytes = int(pages.sum() * PAGE)
    summ = dict(run_id=[run_id], node=[np.int32(node)], store=[cfg["store"]], scenario=[cfg["scenario"]],
                recovery_data=[rd], compression=[comp], wal_mode=[cfg.get("wal_mode", "")],
                throttling=[cfg.get("throttling", "")], op_style=[cfg.get("op_style", "")],
                threads=[np.int32(cfg.get("threads", 1))], duration_s=[float(seconds)], ops=[total_ops],
                throughput=[float(np.median(ops))],
                lat_mean_us=[float(np.average(lat_mean, weights=np.maximum(ops, 1)))],
                lat_p99_us=[float(np.percentile(ts["lat_p99_us"], 99))], wal_bytes=[wal],
                recovery_bytes=[int(rec.sum())], page_bytes=[page_bytes],
                disk_write_bytes=[wal + int(rec.sum()) + page_bytes],
                bytes_per_op=[(wal + int(rec.sum()) + page_bytes) / max(1, total_ops)],
                wal_bytes_per_op=[wal / max(1, total_ops)], parks=[int(parks.sum())],
                stalls=[0], checkpoints=[n_cp], park_seconds=[float(ts["park_seconds"].sum())],
                park_seconds_max=[float(ts["park_seconds"].max(initial=0.0))],
                config_json=[json.dumps(cfg, sort_keys=True)])
    return {"timeseries": ts, "checkpoints": cp, "summary": summ}


def runner(config: dict, workload, node: int) -> dict:
    """A stand-in for `bench.runner.run`: rows shaped by the workload partition it is given."""
    table = PartitionReader(workload.path, workload.partition).read()
    ops = pc.value_counts(table.column("op")).to_pylist() if table.num_rows else []
    counts = {int(d["values"]): int(d["counts"]) for d in ops}
    data_ops = sum(c for op, c in counts.items() if op != OP_COMMIT)
    cfg = {k: config.get(k, v) for k, v in dict(store="pagestore", scenario="full-speed",
                                                recovery_data="checkpoint", compression="skip_garbage",
                                                wal_mode="log_only", throttling="adaptive",
                                                op_style="batch", threads=1).items()}
    cfg["workload_ops"] = data_ops
    seconds = int(config.get("duration_s", 10))
    cols = node_rows(config["run_id"], node, cfg, seconds,
                     put_share=counts.get(OP_PUT, 0) / max(1, data_ops), ops_hint=data_ops)
    rows = {name: _arrow(name, cols[name]).to_pylist() for name in SCHEMAS}
    return {"timeseries": rows["timeseries"], "checkpoints": rows["checkpoints"],
            "summary": rows["summary"][0]}


def write_results(out: str, rows: int = 1_000_000, configs: int = 10, runs: int = 2, nodes: int = 2,
                  seed: int = 0) -> dict:
    """A synthetic results directory with about `rows` timeseries rows; returns its shape."""
    matrix = config_matrix(configs)
    seconds = max(1, rows // (len(matrix) * runs * nodes))
    run_ids = []
    for ci, cfg in enumerate(matrix):
        for r in range(runs):
            run_id = f"s{seed}-c{ci:02d}-r{r}"
            run_ids.append(run_id)
            parts = [node_rows(run_id, n, cfg, seconds) for n in range(nodes)]
            for name in SCHEMAS:
                tables = [_arrow(name, p[name]) for p in parts]
                write_table(out, name, pa.concat_tables(tables))
    return {"configs": len(matrix), "runs": len(run_ids), "nodes": nodes, "seconds": seconds,
            "timeseries_rows": seconds * len(run_ids) * nodes}


def write_iep_results(out: str, rounds: int = 3, seconds: int = 12, nodes: int = 1) -> dict:
    """The IEP-113 experiment, the throttling comparison and a few peer rows, synthetic (for the
    report's tests): the layout ``python -m bench quick`` writes, with plausible figures."""
    from bench.experiment import IEP, MODES, POLICIES, SCENARIOS, THROTTLING
    runs = []
    for r in range(rounds):
        for scen in SCENARIOS:
            for key, _title, opts in MODES:
                cfg = dict(store="pagestore", scenario=scen, recovery_data=opts["recovery_data"],
                           compression=opts["recovery_compression"], wal_mode="log_only", throttling="default",
                           op_style="atomic", threads=1)
                runs.append((f"i{r}-{scen}-{key}", cfg, IEP, r))
        if r < 2:
            for pol in POLICIES:
                cfg = dict(store="pagestore", scenario="extreme", recovery_data="checkpoint", compression="lz4",
                           wal_mode="log_only", throttling=pol, op_style="atomic", threads=1)
                runs.append((f"t{r}-{pol}", cfg, THROTTLING, r))
    for store in ("pagestore", "lmdb", "sqlite"):
        for wal, threads in (("log_only", 1), ("fsync", 1), ("fsync", 4)):
            cfg = dict(store=store, scenario="full-speed", recovery_data="", compression="", wal_mode=wal,
                       throttling="", op_style="atomic", threads=threads)
            runs.append((f"p-{store}-{wal}-{threads}", cfg, "peers", None))
    for run_id, cfg, experiment, rnd in runs:
        parts = [node_rows(run_id, n, cfg, seconds) for n in range(nodes)]
        for p in parts:
            p["summary"]["experiment"] = [experiment]
            p["summary"]["round"] = [rnd]
            p["summary"]["session"] = ["q-synthetic"]
        for name in SCHEMAS:
            write_table(out, name, pa.concat_tables([_arrow(name, p[name]) for p in parts]))
    return {"runs": len(runs), "rounds": rounds, "nodes": nodes, "seconds": seconds}
