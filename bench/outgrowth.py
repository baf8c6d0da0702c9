"""Data that outgrows page memory: random inserts, then random gets, beside the peers.

pagestore keeps its pages in a page memory of ``memory_size`` bytes and cleans
dirty pages only by checkpointing them; LMDB, RocksDB and LevelDB lean on the
operating system's page cache and have no such edge. This scenario loads
random 16-byte keys with 100-byte values in batches of 5,000 until the data is
a chosen multiple of pagestore's page memory (4x and 10x by default), then
reads random loaded keys, into each store in turn, and prints each store's
rate with its ratio to LMDB and RocksDB. When pagestore's checkpoints ran, it
also prints the pages they cleaned per second beside the device's sequential
write rate and its rate of scattered in-place page writes, measured right
after in the same directory, and the keys/s those in-place writes carry.

    python -m bench.outgrowth                        # 4x and 10x of 64 MiB
    python -m bench.outgrowth --memory-size 256 --ratios 4 --rounds 3
    python -m bench.outgrowth --keys 4000000 --memory-size default

``python -m bench quick`` runs it too (``QUICK``: 1x, 4x and 10x of a 3 MiB
page memory, three rounds; ``FULL`` with ``--full``). Non-durable settings
throughout (a write survives a process kill, not a power loss): pagestore
``log_only``, LMDB with ``writemap`` and no sync, RocksDB (rocksdict) and
LevelDB (plyvel) without sync. LMDB reads in one read transaction. Rounds run
every case on every store, the stores' order rotating. With ``--results DIR``
every figure is also written as ``summary`` rows (``scenario`` = ``experiment``
= ``outgrows-memory``, ``op_style`` = ``load`` / ``get``, ``setting`` naming
the case, ``round``, ``data_ratio`` and ``page_memory`` in ``config_json``);
``bench.outgrowth_table`` makes the table and sentence, docs/bench.md says more.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time

MiB = 1 << 20
PAGE = 4096
KEY, VALUE, BATCH = 16, 100, 5_000
# bytes of store per key the data size counts: key, value and ~30 bytes of
# each store's per-entry overhead (a 4 M-key pagestore holds ~600 MB)
ENTRY = 150
STORES = ("pagestore", "lmdb", "rocksdict", "plyvel")
LABELS = {"pagestore": "pagestore", "lmdb": "LMDB", "rocksdict": "RocksDB", "plyvel": "LevelDB"}
SCENARIO = "outgrows-memory"


class Workload:
    """The keys and values of one run: drawn once, the same for every store."""

    def __init__(self, keys: int, gets: int, seed: int = 26):
        rnd = random.Random(seed)
        self.keys = keys
        self.key_bytes = rnd.randbytes(KEY * keys)
        self.value_pool = rnd.randbytes(VALUE * 1024)
        picks = [rnd.randrange(keys) for _ in range(gets)]
        self.get_keys = [self.key(i) for i in picks]

    def key(self, i: int) -> bytes:
        return self.key_bytes[KEY * i:KEY * i + KEY]

    def batches(self):
        """Lists of (key, value) of BATCH pairs, in load order."""
        pool, step = self.value_pool, VALUE
        for first in range(0, self.keys, BATCH):
            yield [(self.key(i), pool[(i % 1021) * step:(i % 1021) * step + step])
                   for i in range(first, min(first + BATCH, self.keys))]


class Peer:
    """One store under test: ``load(batch)``, ``get_all(keys)``, ``facts()``, ``close()``."""

    def __init__(self, name: str, path: str, memory_size: int | None):
        self.name = name
        if name == "pagestore":
            import pagestore
            options = {"wal_mode": "log_only"}
            if memory_size is not None:
                options["memory_size"] = memory_size
            self.db = db = pagestore.open(path, **options)
            too_large = pagestore.TransactionTooLargeError
            fits = [BATCH]          # the largest batch known to fit page memory

            def load(batch):
                # a batch larger than a small page memory holds uncommitted is
                # split, as the error advises (a failed batch changed nothing),
                # and later batches are cut to the size that fitted
                step = fits[0]
                for i in range(0, len(batch), step):
                    part = batch[i:i + step]
                    try:
                        db.put_many(part)
                    except too_large:
                        if len(part) < 2:
                            raise
                        fits[0] = len(part) // 2
                        load(part)

            self.load = load
            get = db.get
            self.get_all = lambda keys: sum(get(k) is not None for k in keys)
        elif name == "lmdb":
            import lmdb
            self.db = env = lmdb.open(path, map_size=64 << 30, writemap=True, sync=False,
                                      metasync=False, map_async=True)

            def load(batch):
                with env.begin(write=True) as t:
                    t.cursor().putmulti(batch)

            def get_all(keys):
                with env.begin() as t:     # one read transaction, as LMDB is meant to be read
                    get = t.get
                    return sum(get(k) is not None for k in keys)

            self.load, self.get_all = load, get_all
        elif name == "rocksdict":
            import rocksdict
            opts = rocksdict.Options(raw_mode=True)
            opts.create_if_missing(True)
            self.db = db = rocksdict.Rdict(path, opts)
            write_batch = rocksdict.WriteBatch

            def load(batch):
                wb = write_batch(raw_mode=True)
                for k, v in batch:
                    wb.put(k, v)
                db.write(wb)

            get = db.get
            self.load = load
            self.get_all = lambda keys: sum(get(k) is not None for k in keys)
        elif name == "plyvel":
            import plyvel
            self.db = db = plyvel.DB(path, create_if_missing=True)

            def load(batch):
                with db.write_batch() as wb:
                    for k, v in batch:
                        wb.put(k, v)

            get = db.get
            self.load = load
            self.get_all = lambda keys: sum(get(k) is not None for k in keys)
        else:
            raise ValueError(f"unknown store {name!r}; choose from {', '.join(STORES)}")

    def facts(self) -> dict:
        """pagestore's page-memory and checkpoint figures after the run (nothing for
        the peers); ``ckpt_pages`` and ``ckpt_seconds`` sum the checkpoints the
        store's history still holds, so their quotient is the pace of cleaning."""
        if self.name != "pagestore":
            return {}
        s = self.db.stats()
        keep = ("page_memory_size", "page_memory_used", "page_memory_resident", "page_loads",
                "evictions", "checkpoints", "throttle_stalls", "throttle_nomem_waits", "throttle_parks",
                "pages_written", "page_bytes_written", "recovery_bytes_written", "page_file_bytes")
        out = {k: s[k] for k in keep if k in s}
        history = s.get("checkpoint_history") or []
        out["ckpt_pages"] = sum(h.get("pages", 0) for h in history)
        out["ckpt_count"] = len(history)
        out["ckpt_seconds"] = sum(h.get("total_seconds") or 0.0 for h in history)
        out["ckpt_napped_seconds"] = sum(h.get("napped_seconds") or 0.0 for h in history)
        return out

    def close(self):
        self.db.close()


def measure(name: str, work: Workload, memory_size: int | None, data_dir: str | None) -> dict:
    """Load every key in batches, then read the sampled keys: seconds of each."""
    if data_dir is not None:
        os.makedirs(data_dir, exist_ok=True)      # --data-dir may name a directory to make
    path = tempfile.mkdtemp(prefix=f"outgrow-{name}-", dir=data_dir)
    try:
        peer = Peer(name, path, memory_size)
        try:
            load_s = 0.0
            for batch in work.batches():
                t = time.perf_counter()
                peer.load(batch)
                load_s += time.perf_counter() - t
            t = time.perf_counter()
            found = peer.get_all(work.get_keys)
            get_s = time.perf_counter() - t
            if found != len(work.get_keys):
                raise RuntimeError(f"{name}: {len(work.get_keys) - found} loaded keys not found")
            facts = peer.facts()
        finally:
            peer.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)
    if facts.get("ckpt_seconds"):
        facts.update(cleaning(facts, data_dir, work.keys))
    return {"store": name, "load_s": load_s, "get_s": get_s,
            "load_per_s": work.keys / load_s, "get_per_s": len(work.get_keys) / get_s, **facts}


def cleaning(facts: dict, data_dir, keys: int) -> dict:
    """How fast checkpoints cleaned pages, beside what the device does, measured
    now in the same directory. Each cleaned page is written twice: its recovery
    copy, sequentially, and its place in the page file, scattered. So:

    * ``device_pages_per_s``: half the device's sequential rate in pages (the
      plain write is as large as what the checkpoints wrote, capped at 256 MiB);
    * ``device_scattered_pages_per_s``: in-place writes alone, as many random
      pages as an average checkpoint wrote, over a file the page file's size,
      ascending, then fsync (what a checkpoint's in-place step asks);
    * ``inplace_keys_per_s``: that rate over the pages the load wrote in place
      per key -- about the keys/s the in-place writes alone carry here.
    """
    from bench.ckptbench import scattered_write_rate, sequential_write_rate
    written = facts.get("page_bytes_written", 0) + facts.get("recovery_bytes_written", 0)
    seq = sequential_write_rate(min(max(written, MiB), 256 * MiB), data_dir)["rate"]
    out = {"ckpt_pages_per_s": facts["ckpt_pages"] / facts["ckpt_seconds"],
           "device_write_per_s": seq, "device_pages_per_s": seq / PAGE / 2}
    span = (facts.get("page_file_bytes") or 0) // PAGE    # None while a checkpoint held the figure
    if facts.get("pages_written") and span >= 2:
        per_ckpt = facts["ckpt_pages"] / max(facts.get("ckpt_count", 1), 1)
        scattered = scattered_write_rate(per_ckpt, span, data_dir)["rate"]
        per_key = facts["pages_written"] / keys
        out.update(device_scattered_pages_per_s=scattered, pages_written_per_key=per_key,
                   inplace_keys_per_s=scattered / per_key)
    return out


def run(cases, stores=STORES, gets: int = 300_000, data_dir=None, say=print, rounds: int = 1) -> list:
    """Each case is (label, keys, memory_size or None): every store in turn on
    the same keys. With several rounds every round runs every case, the order
    of the stores rotating from round to round, so a drift of the machine
    falls on every store. Returns one dict per (round, case, store)."""
    out, memory = [], {}
    for rnd in range(rounds):
        order = list(stores[rnd % len(stores):]) + list(stores[:rnd % len(stores)]) if stores else []
        for label, keys, memory_size in cases:
            if memory_size not in memory:
                memory[memory_size] = memory_size or default_memory_size()
            work = Workload(keys, min(gets, keys))
            for name in order:
                try:
                    r = measure(name, work, memory_size, data_dir)
                except ImportError as e:
                    say(f"  {LABELS.get(name, name)}: not installed ({e})")
                    continue
                r.update(case=label, keys=keys, memory_size=memory_size, page_memory=memory[memory_size],
                         data_ratio=round(keys * ENTRY / memory[memory_size], 1), round=rnd)
                say(f"  {'' if rounds == 1 else f'round {rnd + 1} '}{label:<28} {LABELS.get(name, name):<10} "
                    f"load {r['load_per_s']:>10,.0f}/s   gets {r['get_per_s']:>10,.0f}/s")
                if "ckpt_pages_per_s" in r:
                    say(f"    checkpoints cleaned {r['ckpt_pages_per_s']:,.0f} pages/s while they ran; "
                        f"the device writes {r['device_write_per_s'] / MiB:,.0f} MiB/s sequentially, "
                        f"{r['device_pages_per_s']:,.0f} pages/s at two writes a page")
                if "inplace_keys_per_s" in r:
                    say(f"    in place it writes {r['device_scattered_pages_per_s']:,.0f} scattered pages/s; "
                        f"the load wrote {r['pages_written_per_key']:.2f} pages in place per key, so those "
                        f"writes alone carry about {r['inplace_keys_per_s']:,.0f} keys/s here")
                out.append(r)
    return out


def summary_rows(rows, run_id: str, session: str | None = None) -> list:
    """The figures as rows of the bench's ``summary`` dataset (bench/schema.py): per
    (round, case, store) a load row and a get row under a run id of their own
    (``run_id`` with a suffix), so no reader sums two cases' rates as one run's."""
    out = []
    for r in rows:
        extra = {k: v for k, v in r.items() if k not in ("store", "case", "load_s", "get_s",
                                                           "load_per_s", "get_per_s", "round")}
        rid = f"{run_id}-{r.get('round', 0)}-{r['data_ratio']:g}x-{r['store']}"
        for style, secs, ops in (("load", r["load_s"], r["keys"]), ("get", r["get_s"], None)):
            ops = ops if ops is not None else round(r["get_per_s"] * r["get_s"])
            out.append({"run_id": rid, "node": 0, "store": r["store"], "scenario": SCENARIO,
                        "experiment": SCENARIO, "op_style": style, "threads": 1,
                        "duration_s": secs, "ops": ops, "throughput": ops / secs,
                        "wal_mode": "log_only", "setting": r["case"], "round": r.get("round", 0),
                        "session": session, "config_json": json.dumps(extra, sort_keys=True)})
    return out


def default_memory_size() -> int:
    """The page memory a store opened with default options has (its stats say)."""
    import pagestore
    with tempfile.TemporaryDirectory(prefix="outgrow-probe-") as d:
        with pagestore.open(d) as db:
            return db.stats()["page_memory_size"]


def sized_cases(memory_size, ratios) -> list:
    """(label, keys, memory_size) of each data-to-memory ratio: ``memory_size`` in
    bytes (rounded down to whole 4 KiB pages), or None for the store's default."""
    if memory_size is None:
        memory = None
        sized = default_memory_size()
        mem_label = f"default memory_size ({sized / MiB:,.0f} MiB)"
    else:
        memory = sized = int(memory_size) // PAGE * PAGE
        mem_label = f"memory_size {sized / MiB:,.0f} MiB"
    return [(f"data {ratio:g}x page memory, {mem_label}", int(ratio * sized // ENTRY), memory)
            for ratio in ratios]


def cases_from(args) -> list:
    """(label, keys, memory_size) per requested ratio, or the one --keys case."""
    memory = None if args.memory_size == "default" else float(args.memory_size) * MiB
    if args.keys:
        sized = int(memory) // PAGE * PAGE if memory else default_memory_size()
        mem_label = f"memory_size {sized / MiB:,.0f} MiB" if memory else \
            f"default memory_size ({sized / MiB:,.0f} MiB)"
        return [(f"{args.keys:,} keys, {mem_label} (data {args.keys * ENTRY / sized:.1f}x)", args.keys,
                 sized if memory else None)]
    return sized_cases(memory, args.ratios)


#: what ``python -m bench quick`` runs (a minute here: the 10x load of pagestore is most
#: of it) and ``quick --full``: page memory, data-to-memory ratios, gets, rounds
QUICK = dict(memory_size=3 * MiB, ratios=(1, 4, 10), gets=50_000, rounds=3)
FULL = dict(memory_size=64 * MiB, ratios=(1, 4, 10), gets=300_000, rounds=3)


def session_run(results_dir: str, session: str, full: bool = False, data_dir=None, say=print) -> list:
    """The scenario as ``quick`` runs it: every store at each ratio, in rounds; the summary
    rows written under ``results_dir`` with ``session``. Returns the measured dicts."""
    from bench.results import new_run_id, write_dataset
    sizes = FULL if full else QUICK
    rows = run(sized_cases(sizes["memory_size"], sizes["ratios"]), STORES, sizes["gets"], data_dir, say,
               rounds=sizes["rounds"])
    write_dataset(results_dir, "summary", summary_rows(rows, new_run_id("og"), session))
    return rows


def main(argv=None) -> int:
    """``python -m bench.outgrowth``: run the cases, print the table and its sentence."""
    from bench import outgrowth_table as ot
    p = argparse.ArgumentParser(prog="python -m bench.outgrowth", description=__doc__.split("\n\n")[0])
    p.add_argument("--memory-size", default="64",
                   help="pagestore's page memory in MiB, or 'default' (default: 64)")
    p.add_argument("--ratios", type=lambda s: [float(x) for x in s.split(",")], default=[4.0, 10.0],
                   help="data size as multiples of page memory, comma-separated (default: 4,10)")
    p.add_argument("--keys", type=int, default=0, help="load this many keys instead of --ratios")
    p.add_argument("--gets", type=int, default=300_000, help="random gets after the load")
    p.add_argument("--rounds", type=int, default=1, help="rounds, the stores' order rotating (default: 1)")
    p.add_argument("--stores", default=",".join(STORES), help="comma-separated subset of " + ", ".join(STORES))
    p.add_argument("--data-dir", default=None, help="where the stores are created (default: system temp)")
    p.add_argument("--results", default=None, help="write summary rows into this results directory")
    args = p.parse_args(argv)
    stores = [s for s in args.stores.split(",") if s]
    rows = run(cases_from(args), stores, args.gets, args.data_dir, rounds=args.rounds)
    from bench.results import new_run_id
    summary = summary_rows(rows, new_run_id("og"))
    tbl = ot.table(ot.per_round(summary))
    print()
    print(ot.markdown(tbl))
    print(ot.sentence(tbl))
    if args.results:
        from bench.results import write_dataset
        write_dataset(args.results, "summary", summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
