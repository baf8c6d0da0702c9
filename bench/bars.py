"""The bars of issues 2-7, evaluated from one ``quick`` report.

``evaluate(report)`` returns one row per bar: issue, bar text, the measured
value, the ratio the bar is about (measured / threshold side, so ``>=`` bars
pass at ratio >= 1 and ``<=`` bars pass at ratio <= 1 -- each row says which)
and ``PASS`` / ``FAIL`` / ``n/a`` (not measured in this run, with the reason).
Every input may be missing: a part that was skipped gives ``n/a`` rows, never
an exception. The report is the dict ``bench.commands.quick`` builds (also
written to ``quick.json``).
"""

from __future__ import annotations

import math
from statistics import median as _median

MiB = 1 << 20
# a PUT record: 17-byte record header + txid u64 + klen u32 + vlen u32 (wal/format.py)
WAL_PUT_OVERHEAD = 17 + 16


def _ok(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _row(issue, bar, value, ratio, op, want, note=""):
    """``op`` is ">=" or "<=": the ratio must be >= want or <= want."""
    if not _ok(ratio):
        status = "n/a"
    elif op == ">=":
        status = "PASS" if ratio >= want else "FAIL"
    else:
        status = "PASS" if ratio <= want else "FAIL"
    return dict(issue=issue, bar=bar, value=value, ratio=ratio if _ok(ratio) else None,
                need=f"{op} {want:g}", status=status, note=note)


def _na(issue, bar, why):
    return dict(issue=issue, bar=bar, value="–", ratio=None, need="", status="n/a", note=why)


def _f(x, d=0):
    return f"{x:,.{d}f}" if _ok(x) else "–"


def _div(a, b):
    return a / b if _ok(a) and _ok(b) and b else float("nan")


def _by(summaries, **kw):
    return [s for s in summaries or [] if all(s.get(k) == v for k, v in kw.items())]


def _one(summaries, **kw):
    got = _by(summaries, **kw)
    return got[0] if got else None


def issue2(base) -> list:
    rows = []
    if not base or not base.get("rows"):
        return [_na(2, b, "base comparison not run") for b in
                ("gets >= 1.0x lmdb", "bulk load >= 1.0x lmdb", "bulk load >= 1.0x rocksdict",
                 "ordered scan >= 1.0x rocksdict", "RSS growth <= memory_size + 150 MiB")]
    by = {r["store"]: r for r in base["rows"]}
    ps = by.get("pagestore")
    for bar, metric, peer in (("random point gets >= 1.0x lmdb", "get_ops", "lmdb"),
                              ("bulk load >= 1.0x lmdb", "load_ops", "lmdb"),
                              ("bulk load >= 1.0x rocksdict WriteBatch", "load_ops", "rocksdict"),
                              ("full ordered scan >= 1.0x rocksdict", "scan_rows", "rocksdict")):
        p = by.get(peer)
        if not ps or not p:
            rows.append(_na(2, bar, "pagestore or peer missing"))
            continue
        rows.append(_row(2, bar, f"{_f(ps[metric])} vs {_f(p[metric])}/s", _div(ps[metric], p[metric]),
                         ">=", 1.0))
    m = base.get("memory") or {}
    if m.get("VmRSS") and m.get("memory_size"):
        growth = m["VmRSS"] - m.get("rss_before", 0)
        limit = m["memory_size"] + 150 * MiB
        rows.append(_row(2, "resident memory after the 1M-key run <= memory_size + 150 MiB",
                         f"RSS {_f(m['VmRSS'] / MiB)} MiB, growth over pre-open {_f(growth / MiB)} MiB; "
                         f"limit {_f(limit / MiB)} MiB (HWM {_f(m.get('VmHWM', 0) / MiB)} MiB)",
                         _div(growth, limit), "<=", 1.0, "mapped WAL segments count in RSS"))
    else:
        rows.append(_na(2, "resident memory <= memory_size + 150 MiB", "memory_size not given"))
    return rows


def issue3(commit) -> list:
    if not commit or not commit.get("summaries"):
        return [_na(3, "commit-per-put bars", "commit comparison not run")]
    ss = commit["summaries"]
    rows = []
    ps1 = _one(ss, store="pagestore", wal_mode="log_only", threads=1)
    peers = [s for s in ss if s["wal_mode"] == "log_only" and s["store"] != "pagestore"]
    if ps1 and peers:
        best = max(peers, key=lambda s: s["throughput"])
        rows.append(_row(3, "log_only 1 thread >= 1.0x the fastest peer",
                         f"{_f(ps1['throughput'])} vs {best['store']} {_f(best['throughput'])}/s",
                         _div(ps1["throughput"], best["throughput"]), ">=", 1.0))
        sq = _one(peers, store="sqlite")
        if sq:
            rows.append(_row(3, "log_only 1 thread >= 5x sqlite NORMAL",
                             f"{_f(ps1['throughput'])} vs {_f(sq['throughput'])}/s",
                             _div(ps1["throughput"], sq["throughput"]), ">=", 5.0))
    else:
        rows.append(_na(3, "log_only 1 thread vs peers", "pagestore log_only run missing"))
    f1 = _one(ss, store="pagestore", wal_mode="fsync", threads=1)
    bare = commit.get("bare")
    if f1 and bare:
        rows.append(_row(3, "fsync 1 thread >= 0.9x bare 4 KiB pwrite+fdatasync loop",
                         f"{_f(f1['throughput'])} vs {_f(bare['ops_per_s'])}/s",
                         _div(f1["throughput"], bare["ops_per_s"]), ">=", 0.9))
    else:
        rows.append(_na(3, "fsync 1 thread >= 0.9x bare loop", "fsync 1-thread run or bare loop missing"))
    t_max = max([s["threads"] for s in ss if s["wal_mode"] == "fsync"] or [0])
    f16 = _one(ss, store="pagestore", wal_mode="fsync", threads=t_max)
    pl16 = _one(ss, store="plyvel", wal_mode="fsync", threads=t_max)
    if f16 and pl16:
        rows.append(_row(3, f"fsync {t_max} threads >= 2x plyvel sync=True ({t_max} threads)",
                         f"{_f(f16['throughput'])} vs {_f(pl16['throughput'])}/s",
                         _div(f16["throughput"], pl16["throughput"]), ">=", 2.0,
                         "" if t_max == 16 else "bar is stated for 16 threads"))
    else:
        rows.append(_na(3, "fsync 16 threads >= 2x plyvel", "runs missing"))
    if ps1:
        cfg = {}
        try:
            import json
            cfg = json.loads(ps1.get("config_json") or "{}")
        except ValueError:
            pass
        rec = int(cfg.get("key_size", 16)) + int(cfg.get("value_size", 100)) + WAL_PUT_OVERHEAD
        rows.append(_row(3, "WAL bytes per put at full speed <= 1.3x the logical record",
                         f"{_f(ps1['wal_bytes_per_op'], 1)} B/op; record {rec} B (key+value+{WAL_PUT_OVERHEAD})",
                         _div(ps1["wal_bytes_per_op"], rec), "<=", 1.3))
    rows.append(_na(3, "kill -9 loop: 0 lost / 0 wrong over 2,000 rounds", "make torture, not the bench"))
    return rows


def issue4(ck) -> list:
    if not ck:
        return [_na(4, "checkpoint bars", "checkpoint figures not run")]
    rows = []
    lock = ck.get("lock") or {}
    if lock.get("pages"):
        rows.append(_row(4, "checkpoint write lock <= 5 ms with 100,000 dirty pages",
                         f"{_f(lock['lock_ms'], 2)} ms with {_f(lock['pages'])} pages",
                         lock["lock_ms"] / 5.0, "<=", 1.0,
                         "" if lock["pages"] >= 100_000 else "fewer than 100,000 pages: not the bar's size"))
    else:
        rows.append(_na(4, "checkpoint write lock <= 5 ms with 100,000 dirty pages",
                        lock.get("error", "not measured")))
    rate, seq = ck.get("recovery_rate") or {}, ck.get("sequential") or {}
    if _ok(rate.get("rate")) and seq.get("rate"):
        rows.append(_row(4, "recovery files written at >= 70 % of a plain sequential write",
                         f"{_f(rate['rate'] / 1e6, 1)} vs {_f(seq['rate'] / 1e6, 1)} MB/s",
                         _div(rate["rate"], seq["rate"]), ">=", 0.7,
                         f"fastest of {len(rate['rates'])} and of {len(seq['rates'])}, interleaved"
                         if rate.get("rates") and seq.get("rates") else ""))
    else:
        rows.append(_na(4, "recovery files >= 70 % of sequential write", "no checkpoint wrote recovery files"))
    crash = ck.get("crash") or {}
    if crash.get("recovery_s") is not None:
        pages = crash.get("pages_restored") or 0
        read_s = crash.get("read_recovery_files_s") or float("nan")
        restore_s = crash.get("restore_s")
        note = "" if pages >= 100_000 else f"{pages:,} pages restored: fewer than the bar's 100,000"
        if _ok(restore_s):
            rows.append(_row(4, "restore after kill -9 in step 5 <= 3x reading the recovery files",
                             f"restore {_f(restore_s, 3)} s vs read {_f(read_s, 3)} s "
                             f"({_f(pages)} pages)", _div(restore_s, 3 * read_s), "<=", 1.0, note))
        rep = crash.get("replay_rate")
        if _ok(rep) and crash.get("records_replayed"):
            rows.append(_row(4, "WAL replay >= 300,000 records/s",
                             f"{_f(crash['records_replayed'])} records in {_f(crash['replay_s'], 3)} s",
                             rep / 300_000, ">=", 1.0, "replay time = recovery - restore - final checkpoint"))
        else:
            rows.append(_na(4, "WAL replay >= 300,000 records/s", "no records replayed"))
        budget = 3 * read_s + (crash.get("records_replayed") or 0) / 300_000
        rows.append(_row(4, "whole recovery <= 3x read + records/300k/s",
                         f"{_f(crash['recovery_s'], 3)} s vs {_f(budget, 3)} s", _div(crash["recovery_s"], budget),
                         "<=", 1.0, "includes the checkpoint that ends recovery"))
        rows.append(_row(4, "kill -9 in step 5: 0 missing or wrong keys",
                         f"{crash.get('missing_or_wrong')} of {crash.get('checked', 5000):,} checked",
                         float(crash.get("missing_or_wrong") or 0), "<=", 0))
    else:
        rows.append(_na(4, "recovery after kill -9 in step 5", crash.get("error", "not run")))
    rows.append(_na(4, "crash tests over >= 100,000 crash states", "make torture, not the bench"))
    return rows


def _pairs(ms, scenario, op_style, wal_mode, **kw):
    w = _one(ms, scenario=scenario, op_style=op_style, wal_mode=wal_mode, recovery_data="wal", **kw)
    c = _one(ms, scenario=scenario, op_style=op_style, wal_mode=wal_mode, recovery_data="checkpoint", **kw)
    return w, c


def issue5(ms, enc, codecs=None) -> list:
    rows = []
    core = dict(compression="default", throttling="default")
    w, c = _pairs(ms, "extreme", "atomic", "log_only", **core)
    if w and c:
        rows.append(_row(5, "unique-page workload (extreme): WAL bytes checkpoint <= 1/5 of wal mode",
                         f"{_f(c['wal_bytes_per_op'], 1)} vs {_f(w['wal_bytes_per_op'], 1)} B/op",
                         _div(c["wal_bytes_per_op"], w["wal_bytes_per_op"]), "<=", 0.2))
    else:
        rows.append(_na(5, "unique-page WAL bytes <= 1/5", "extreme pair missing"))
    w, c = _pairs(ms, "full-speed", "atomic", "log_only", **core)
    if w and c:
        rows.append(_row(5, "hot-page workload (full-speed): WAL bytes checkpoint <= 1/1.5 of wal mode",
                         f"{_f(c['wal_bytes_per_op'], 1)} vs {_f(w['wal_bytes_per_op'], 1)} B/op",
                         _div(c["wal_bytes_per_op"], w["wal_bytes_per_op"]), "<=", 1 / 1.5))
    else:
        rows.append(_na(5, "hot-page WAL bytes <= 1/1.5", "full-speed pair missing"))
    # The interleaved same-pages experiment (bench/codecs.py) when it ran; else the
    # matrix's extreme runs, one short run per codec.
    if codecs and codecs.get("codecs"):
        comp = codecs["codecs"]
        note = f"median of {codecs['rounds']} interleaved checkpoints of the same pages"
    else:
        comp = {s["compression"]: s for s in _by(ms, scenario="extreme", recovery_data="checkpoint",
                                                     throttling="default", op_style="atomic")
                if s.get("ckpt_pages")}
        note = "noisy: one short run each"
    dis = comp.get("disabled")
    if dis:
        best = None
        for name, s in comp.items():
            if name in ("disabled", "default"):
                continue
            cut = _div(dis["recovery_bytes_per_page"], s["recovery_bytes_per_page"])
            slow = _div(s["ckpt_ms_per_kpage"], dis["ckpt_ms_per_kpage"])
            if best is None or (cut >= 2 and slow <= 1, cut) > (best[1] >= 2 and best[2] <= 1, best[1]):
                best = (name, cut, slow)
        if best:
            name, cut, slow = best
            rows.append(_row(5, "skip_garbage or a codec cuts recovery bytes >= 2x vs disabled",
                             f"{name}: {_f(comp[name]['recovery_bytes_per_page'])} vs "
                             f"{_f(dis['recovery_bytes_per_page'])} B/page", cut, ">=", 2.0))
            rows.append(_row(5, f"... without a slower checkpoint ({name} vs disabled, ms per 1,000 pages)",
                             f"{_f(comp[name]['ckpt_ms_per_kpage'], 1)} vs {_f(dis['ckpt_ms_per_kpage'], 1)} ms",
                             slow, "<=", 1.0, note))
    else:
        rows.append(_na(5, "compression cuts recovery bytes >= 2x", "compression runs missing"))
    if enc and enc.get("plain") and enc.get("encrypted"):
        e = enc["encrypted"]["throughput"]
        plains = [enc["plain"]["throughput"]] + ([enc["plain_after"]["throughput"]] if enc.get("plain_after") else [])
        p = sum(plains) / len(plains)
        note = "ratio = cost fraction" + ("; plain = mean of the runs before and after" if len(plains) > 1 else "")
        rows.append(_row(5, "encryption costs <= 25 % of put throughput at full speed",
                         f"{_f(e)} vs {_f(p)} ops/s", 1 - _div(e, p), "<=", 0.25, note))
    else:
        rows.append(_na(5, "encryption costs <= 25 %", "encryption run missing"))
    rows.append(_na(5, "crash tests green in both modes, with and without encryption", "make test, not the bench"))
    return rows


# ops a side needs for its p99 to rest on at least ten ops
P99_MIN_OPS = 1_000


def _both_sides(s) -> bool:
    """A run with a p99 inside and outside checkpoints, each over enough ops (runs
    without the counts, from older results, are taken as they are)."""
    if not s or not _ok(s.get("lat_p99_no_ckpt_us")) or not _ok(s.get("lat_p99_ckpt_us")):
        return False
    return all(s.get(k) is None or s[k] >= P99_MIN_OPS for k in ("ops_in_ckpt", "ops_out_ckpt"))


def _p99_row(d, ms):
    """In extreme the checkpoints run back to back, so (almost) no op is outside one;
    then the bar is read off the full-speed run of the default policy (checkpoints every
    few seconds), which has both, and the row says so."""
    bar = "default policy: p99 in checkpoints <= 2x outside"
    src, note = d, ""
    if not _both_sides(d):
        src = _one(ms, scenario="full-speed", op_style="atomic", wal_mode="log_only",
                   recovery_data="checkpoint", compression="default", throttling="default")
        note = f"extreme has under {P99_MIN_OPS:,} ops outside checkpoints: full-speed run"
        if not _both_sides(src):
            return _na(6, bar, "no run with ops both in and outside checkpoints")
    return _row(6, bar, f"{_f(src['lat_p99_ckpt_us'], 1)} vs {_f(src['lat_p99_no_ckpt_us'], 1)} µs",
                _div(src["lat_p99_ckpt_us"], src["lat_p99_no_ckpt_us"]), "<=", 2.0, note)


def issue6(ms) -> list:
    """The extreme runs of each policy (the quick job repeats them in interleaved
    rounds): throughput compared by median, stalls and parks by the worst run."""
    pol = {}
    for s in _by(ms, scenario="extreme", recovery_data="checkpoint", compression="default",
                 op_style="atomic", wal_mode="log_only"):
        pol.setdefault("default" if s["throttling"] == "adaptive" else s["throttling"], []).append(s)
    runs = pol.pop("default", None)
    if not runs:
        return [_na(6, "throttling bars", "extreme default-policy run missing")]
    stalls = max(r["stalls"] for r in runs)
    park = max(r["park_seconds_max"] for r in runs)
    rows = [_row(6, "default policy: 0 stalls", f"{stalls} (worst of {len(runs)} runs)", float(stalls),
                 "<=", 0),
            _row(6, "default policy: no park over 100 ms",
                 f"{_f(park * 1000, 1)} ms (worst of {len(runs)} runs)", park / 0.1, "<=", 1.0),
            _p99_row(runs[0], ms)]
    d = _median([r["throughput"] for r in runs])
    med = {k: _median([r["throughput"] for r in v]) for k, v in pol.items()}
    n = f"medians of {len(runs)} and {min(len(v) for v in pol.values())}+ runs" if pol else ""
    if med:
        k, o = max(med.items(), key=lambda kv: kv[1])
        rows.append(_row(6, "default throughput >= 1.0x every other policy (extreme)",
                         f"{_f(d)} vs best other {k} {_f(o)}/s", _div(d, o), ">=", 1.0, n))
    if "exponential_backoff" in med:
        eb = med["exponential_backoff"]
        note = n
        if "disabled" in med:
            # With all of page memory in every extreme checkpoint, what a writer can do is
            # set by the buffer and the checkpointer, not by when it parks: the policy
            # that never parks shows how little room there is (docs/throttling.md).
            note += (f"; disabled (never parks) {_f(med['disabled'])}/s = "
                     f"{_div(med['disabled'], eb):.2f}x exponential_backoff")
        rows.append(_row(6, "default throughput >= 1.5x exponential_backoff (extreme)",
                         f"{_f(d)} vs {_f(eb)}/s", _div(d, eb), ">=", 1.5, note))
    return rows


# a paced run within 2 % of its target rate held it: per-second medians jitter around it
HELD = 0.98


def target_rate(s: dict):
    """The target ops/s of a paced run (from its config_json), or None."""
    import json
    try:
        rate = json.loads(s.get("config_json") or "{}").get("rate")
    except (ValueError, AttributeError):
        return None
    return float(rate) if rate else None


def mode_ratio(c: dict, w: dict) -> float:
    """checkpoint-mode / wal-mode throughput of one pair. In a paced (fixed-rate) pair each
    throughput is capped at ``HELD`` x the target first: two runs that both hold the target
    are equal by construction (1.0), and a mode that falls short of it still shows."""
    cap = min(filter(None, (target_rate(c), target_rate(w))), default=None)
    ct, wt = c["throughput"], w["throughput"]
    if cap:
        ct, wt = min(ct, HELD * cap), min(wt, HELD * cap)
    return _div(ct, wt)


def _median_side(runs: list) -> dict:
    """One side of a pair from its runs: the first run's fields, median throughput and WAL bytes."""
    out = dict(runs[0])
    out["throughput"] = _median([r["throughput"] for r in runs])
    out["wal_bytes_per_op"] = _median([r["wal_bytes_per_op"] for r in runs])
    return out


def issue7(ms, harness, repeat) -> list:
    """checkpoint vs wal mode per (scenario, op style, WAL mode): medians of the pair's runs
    (the quick job repeats the extreme pairs in interleaved rounds)."""
    rows = []
    pairs = {}
    for s in _by(ms, compression="default", throttling="default"):
        side = pairs.setdefault((s["scenario"], s["op_style"], s["wal_mode"]), {})
        side.setdefault(s["recovery_data"], []).append(s)
    full = [(k, {rd: _median_side(v[rd]) for rd in ("wal", "checkpoint")}, min(len(v["wal"]), len(v["checkpoint"])))
            for k, v in sorted(pairs.items()) if "wal" in v and "checkpoint" in v]
    if full:
        worst_k, worst = min(((k, mode_ratio(v["checkpoint"], v["wal"])) for k, v, _n in full),
                             key=lambda kv: kv[1])
        rows.append(_row(7, "checkpoint-mode throughput >= wal mode in every scenario",
                         f"{len(full)} pairs; lowest {'/'.join(worst_k)}", worst, ">=", 1.0,
                         "fixed-rate pairs: throughput capped at 98 % of the target; medians of repeated pairs"))
        ext = [(k, v, n) for k, v, n in full if k[0] == "extreme"]
        if ext:
            k, r, n = min(((k, mode_ratio(v["checkpoint"], v["wal"]), n) for k, v, n in ext),
                          key=lambda t: t[1])
            each = ", ".join(f"{'/'.join(k2[1:])} {mode_ratio(v2['checkpoint'], v2['wal']):.2f}"
                             for k2, v2, _n in ext)
            rows.append(_row(7, "... >= 1.3x in extreme (lowest extreme pair)", f"{'/'.join(k)}; {each}", r,
                             ">=", 1.3, f"medians of {n} interleaved runs a side"))
            k, r = max(((k, _div(v["checkpoint"]["wal_bytes_per_op"], v["wal"]["wal_bytes_per_op"]))
                        for k, v, _n in ext), key=lambda kv: kv[1])
            rows.append(_row(7, "WAL bytes in extreme, checkpoint/wal <= 1/5 (highest pair)", "/".join(k), r,
                             "<=", 0.2))
    else:
        rows.append(_na(7, "checkpoint vs wal mode", "matrix not run"))
    if harness and harness.get("ratio") and harness.get("paired"):
        rows.append(_row(7, "harness alone (noop) >= 10x the store's best ops/s",
                         f"noop {'/'.join(_f(x) for x in harness['noop_runs'])} vs store's best configuration "
                         f"{'/'.join(_f(x) for x in harness['store_runs'])}/s", harness["ratio"], ">=", 10.0,
                         f"median of {len(harness['pair_ratios'])} interleaved pairs"))
    elif harness and harness.get("ratio"):
        rows.append(_row(7, "harness alone (noop) >= 10x the store's best ops/s",
                         f"{_f(harness['noop'])} vs {_f(harness['best_store'])}/s", harness["ratio"], ">=", 10.0))
    else:
        rows.append(_na(7, "harness overhead", "not run"))
    if repeat and repeat.get("a") and repeat.get("b"):
        a, b = repeat["a"], repeat["b"]
        diff = abs(a - b) / max(a, b)
        rows.append(_row(7, "two runs of one configuration agree within 15 %",
                         f"{_f(a)} vs {_f(b)} ops/s ({repeat.get('label', '')})", diff, "<=", 0.15,
                         "ratio = |a-b| / max"))
    else:
        rows.append(_na(7, "two runs agree within 15 %", "repeat not run"))
    return rows


def evaluate(report: dict) -> list:
    ms = (report or {}).get("matrix") or []
    return (issue2(report.get("base")) + issue3(report.get("commit")) + issue4(report.get("checkpoint"))
            + issue5(ms, report.get("encryption"), report.get("codecs")) + issue6(ms)
            + issue7(ms, report.get("harness"), report.get("repeat")))


def table(rows, title="Bars of issues 2-7 (this run)"):
    from rich.table import Table
    t = Table(title=title)
    for c in ("issue", "bar", "measured", "ratio", "need", "result", "note"):
        t.add_column(c, justify="right" if c in ("issue", "ratio") else "left")
    for r in rows:
        style = {"PASS": "green", "FAIL": "red"}.get(r["status"], "dim")
        t.add_row(str(r["issue"]), r["bar"], r["value"], "–" if r["ratio"] is None else f"{r['ratio']:.3g}",
                  r["need"], f"[{style}]{r['status']}[/{style}]", r["note"])
    passed = sum(r["status"] == "PASS" for r in rows)
    failed = sum(r["status"] == "FAIL" for r in rows)
    t.caption = f"{passed} PASS, {failed} FAIL, {len(rows) - passed - failed} n/a"
    return t
