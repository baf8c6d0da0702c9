"""`python -m bench.spark {generate,run,report,synth}`: the project's Spark jobs.

    generate OUT --ops N --partitions P --seed S --dist D ...   workload as Parquet
    run WORKLOAD RESULTS --nodes N [--master URL] ...            N store nodes as Spark tasks
    report RESULTS... --out DIR [--baseline run_id|config]      tables, charts, one HTML file
    synth OUT --rows R                                          synthetic results (for trials)

Spark runs in local mode (`local[*]`) unless `--master` names a cluster.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def _parse_value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", default=None,
                   help="Spark master URL (default local[*], or $PAGESTORE_SPARK_MASTER)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.spark", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    g = sub.add_parser("generate", help="generate a workload as Parquet (partitioned by `partition`)")
    g.add_argument("out")
    g.add_argument("--ops", type=int, required=True, help="data operations in total (markers extra)")
    g.add_argument("--partitions", type=int, default=1, help="streams: one per node or thread")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--dist", default="uniform", choices=("uniform", "zipf", "sequential", "unique", "hotset"))
    g.add_argument("--theta", type=float, default=0.99, help="zipf exponent")
    g.add_argument("--key-range", type=int, default=1_000_000, help="key ids for uniform/zipf/hotset")
    g.add_argument("--mix", default="put=0.5,get=0.4,delete=0.05,scan=0.05")
    g.add_argument("--tx-size", type=int, default=1, help="ops per transaction (>1 adds op-5 markers)")
    g.add_argument("--value-size", default="fixed:100", help="fixed:N or uniform:LO-HI (bytes)")
    g.add_argument("--scan-len", default="uniform:1-100", help="keys per scan: fixed:N or uniform:LO-HI")
    g.add_argument("--value-compressibility", type=float, default=0.5,
                   help="recorded in the spec; the replaying harness builds values a fast compressor "
                        "cuts by this fraction (db_bench's 1 - --compression_ratio; 0: random bytes)")
    g.add_argument("--hot-fraction", type=float, default=0.01, help="hotset: share of the key range")
    g.add_argument("--hot-share", type=float, default=0.9, help="hotset: share of operations on it")
    g.add_argument("--chunk-ops", type=int, default=1 << 20,
                   help="ops per generation task and file (part of the determinism contract)")
    _common(g)

    r = sub.add_parser("run", help="run N store nodes as Spark tasks, append their result rows")
    r.add_argument("workload", help="a directory written by `generate` (one partition per node)")
    r.add_argument("results", help="results directory (timeseries/, checkpoints/, summary/)")
    r.add_argument("--nodes", type=int, required=True)
    r.add_argument("--config", help="JSON file: the harness configuration handed to every node")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="harness option (value parsed as JSON when it is JSON), repeatable")
    r.add_argument("--run-id", default=None)
    r.add_argument("--runner", default="bench.runner:run", help="module:function with run()'s signature")
    r.add_argument("--workload-class", default="bench.workload:ParquetWorkload")
    r.add_argument("--work-dir", default=None, help="parent of the nodes' store directories")
    r.add_argument("--keep", action="store_true", help="keep the nodes' store directories")
    _common(r)

    p = sub.add_parser("report", help="tables (CSV, Markdown), PNG charts and one HTML file")
    p.add_argument("results", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--baseline", default=None,
                   help="configuration label, run_id or a substring naming one configuration "
                        "(default: the legacy recovery_data=wal configuration)")
    _common(p)

    s = sub.add_parser("synth", help="write synthetic results (schema-conforming, not measured)")
    s.add_argument("out")
    s.add_argument("--rows", type=int, default=1_000_000, help="timeseries rows, about")
    s.add_argument("--configs", type=int, default=12)
    s.add_argument("--runs", type=int, default=2)
    s.add_argument("--nodes", type=int, default=2)
    return ap


def cmd_generate(a) -> int:
    from .generate import WorkloadSpec, generate, parse_mix, parse_size
    from .session import get_session
    spec = WorkloadSpec(ops=a.ops, partitions=a.partitions, seed=a.seed, dist=a.dist, theta=a.theta,
                        key_range=a.key_range, mix=parse_mix(a.mix), tx_size=a.tx_size,
                        value_size=parse_size(a.value_size), scan_len=parse_size(a.scan_len),
                        hot_fraction=a.hot_fraction, hot_share=a.hot_share, chunk=a.chunk_ops,
                        value_compressibility=a.value_compressibility)
    t0 = time.perf_counter()
    spark = get_session(a.master, app="pagestore-generate", quick_jit=False)
    t1 = time.perf_counter()
    generate(spark, a.out, spec)
    t2 = time.perf_counter()
    print(f"{a.ops:,} ops in {a.partitions} partitions -> {a.out} "
          f"(generate {t2 - t1:.1f} s, Spark start {t1 - t0:.1f} s)")
    return 0


def cmd_run(a) -> int:
    from .distributed import run_distributed
    from .session import get_session
    config = {}
    if a.config:
        with open(a.config) as f:
            config = json.load(f)
    for item in a.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected KEY=VALUE")
        config[key] = _parse_value(value)
    spark = get_session(a.master, app="pagestore-run")
    out = run_distributed(spark, a.workload, a.results, a.nodes, config, runner=a.runner,
                          workload_class=a.workload_class, run_id=a.run_id, work_dir=a.work_dir,
                          keep=a.keep)
    print(f"run {out['run_id']}: nodes {out['nodes']}, rows {out['rows']} -> {a.results}")
    return 0


def cmd_report(a) -> int:
    from .report import report
    from .session import get_session
    t0 = time.perf_counter()
    spark = get_session(a.master, app="pagestore-report")
    path = report(spark, a.results, a.out, baseline=a.baseline)
    print(f"report built in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print(path)
    return 0


def cmd_synth(a) -> int:
    from .synth import write_results
    shape = write_results(a.out, rows=a.rows, configs=a.configs, runs=a.runs, nodes=a.nodes)
    print(f"{a.out}: {shape}")
    return 0


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    return {"generate": cmd_generate, "run": cmd_run, "report": cmd_report, "synth": cmd_synth}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
