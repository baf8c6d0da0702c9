"""``python -m bench.servers``: run the torn-page comparison, print its table, write the results."""

from __future__ import annotations

import argparse
import os
import sys
import time


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m bench.servers``."""
    ap = argparse.ArgumentParser(prog="python -m bench.servers",
                                 description="PostgreSQL full-page writes and InnoDB's doublewrite against "
                                             "pagestore's recovery files, on one update workload.")
    ap.add_argument("--results", default="results", help="result directory (Parquet datasets)")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows in the table")
    ap.add_argument("--seconds", type=float, default=60.0, help="measured seconds per setting")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds of updates before each window")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--checkpoint-interval", type=int, default=30, help="seconds between checkpoints")
    ap.add_argument("--systems", default="postgresql,mariadb,pagestore")
    ap.add_argument("--html", default=None, help="standalone page of the section "
                                                 "(default: RESULTS/torn-page.html)")
    return ap


def main(argv=None) -> int:
    """Run, print, write; exit 1 when no system could run."""
    args = build_parser().parse_args(argv)
    from bench.results import write_dataset
    from bench.servers import comparison, section
    t0 = time.monotonic()
    systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    unknown = set(systems) - set(comparison.SYSTEMS)
    if unknown:
        print(f"unknown system(s): {', '.join(sorted(unknown))}; choose from "
              f"{', '.join(comparison.SYSTEMS)}", file=sys.stderr)
        return 2
    res = comparison.run(rows=args.rows, seconds=args.seconds, warmup=args.warmup, clients=args.clients,
                         checkpoint_s=args.checkpoint_interval, systems=systems,
                         progress=lambda s: print(s, flush=True))
    write_dataset(args.results, "summary", res["rows"])
    out = args.html or os.path.join(args.results, "torn-page.html")
    with open(out, "w") as f:
        f.write(section.page([args.results]))
    print()
    print(comparison.table_text(res["rows"]))
    print()
    print(comparison.findings(res["rows"])["sentence"])
    for s, why in res["skipped"].items():
        print(f"not run: {comparison.LABELS[s]}: {why}")
    print(f"\nresults: {args.results} (run {res['run_id']}); page: {out}; {time.monotonic() - t0:.0f} s")
    return 0 if res["rows"] else 1


if __name__ == "__main__":
    sys.exit(main())
