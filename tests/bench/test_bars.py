"""The bars table: every bar of issues 2-7 from a quick report, missing parts as n/a;
and the pieces it relies on (checkpoint figures in ms, the running flag, per-second marks)."""

from bench import bars
from bench.measure import checkpoint_running
from bench.runner import _mark_checkpoint_seconds, ckpt_figures

MiB = 1 << 20


def _s(**kw):
    base = dict(store="pagestore", scenario="full-speed", op_style="atomic", wal_mode="log_only",
                recovery_data="checkpoint", compression="default", throttling="default", threads=1,
                throughput=100.0, wal_bytes_per_op=150.0, stalls=0, park_seconds_max=0.01,
                lat_p99_ckpt_us=10.0, lat_p99_no_ckpt_us=8.0, config_json='{"key_size": 16, "value_size": 100}')
    base.update(kw)
    return base


def _report():
    base = dict(rows=[dict(store="pagestore", load_ops=2.0, get_ops=2.0, scan_rows=2.0),
                      dict(store="lmdb", load_ops=1.0, get_ops=4.0, scan_rows=1.0),
                      dict(store="rocksdict", load_ops=1.0, get_ops=1.0, scan_rows=1.0)],
                memory=dict(VmRSS=900 * MiB, rss_before=300 * MiB, memory_size=512 * MiB))
    commit = dict(bare=dict(ops_per_s=1000.0), summaries=[
        _s(throughput=500_000.0), _s(store="lmdb_writemap", throughput=300_000.0),
        _s(store="sqlite", throughput=20_000.0),
        _s(wal_mode="fsync", throughput=950.0), _s(wal_mode="fsync", threads=16, throughput=9000.0),
        _s(store="plyvel", wal_mode="fsync", threads=16, throughput=5000.0)])
    crash = dict(recovery_s=1.0, pages_restored=100_000, read_recovery_files_s=0.3, restore_s=0.5,
                 records_replayed=300_000, replay_s=0.5, replay_rate=600_000.0, missing_or_wrong=0)
    ck = dict(lock=dict(pages=100_000, lock_ms=2.0), recovery_rate=dict(rate=800.0),
              sequential=dict(rate=1000.0), crash=crash)
    ms = []
    for scen in ("full-speed", "extreme"):
        ms += [_s(scenario=scen, recovery_data="wal", throughput=100.0, wal_bytes_per_op=1000.0),
               _s(scenario=scen, throughput=150.0, wal_bytes_per_op=150.0)]
    ms += [_s(scenario="extreme", compression="disabled", ckpt_pages=10, recovery_bytes_per_page=4096,
              ckpt_ms_per_kpage=10.0),
           _s(scenario="extreme", compression="snappy", ckpt_pages=10, recovery_bytes_per_page=1500,
              ckpt_ms_per_kpage=9.0),
           _s(scenario="extreme", throttling="exponential_backoff", throughput=110.0)]
    return dict(base=base, commit=commit, checkpoint=ck, matrix=ms,
                encryption=dict(plain=dict(throughput=100.0), encrypted=dict(throughput=80.0)),
                harness=dict(noop=5e6, best_store=4e5, ratio=12.5), repeat=dict(a=100.0, b=110.0))


def test_every_issue_has_rows_and_statuses_follow_the_ratios():
    rows = bars.evaluate(_report())
    assert {r["issue"] for r in rows} == {2, 3, 4, 5, 6, 7}
    by = {r["bar"]: r for r in rows}
    assert by["random point gets >= 1.0x lmdb"]["status"] == "FAIL"          # 2 vs 4
    assert by["bulk load >= 1.0x lmdb"]["status"] == "PASS"
    mem = next(r for r in rows if r["bar"].startswith("resident memory"))
    assert mem["status"] == "PASS" and abs(mem["ratio"] - 600 / 662) < 1e-9
    assert by["log_only 1 thread >= 5x sqlite NORMAL"]["status"] == "PASS"   # 25x
    assert by["fsync 1 thread >= 0.9x bare 4 KiB pwrite+fdatasync loop"]["status"] == "PASS"
    wal = next(r for r in rows if r["bar"].startswith("WAL bytes per put"))
    assert abs(wal["ratio"] - 150 / 149) < 1e-9 and wal["status"] == "PASS"
    assert by["checkpoint write lock <= 5 ms with 100,000 dirty pages"]["status"] == "PASS"
    assert by["recovery files written at >= 70 % of a plain sequential write"]["status"] == "PASS"
    assert by["WAL replay >= 300,000 records/s"]["status"] == "PASS"
    enc = by["encryption costs <= 25 % of put throughput at full speed"]
    assert abs(enc["ratio"] - 0.2) < 1e-9 and enc["status"] == "PASS"
    rep = by["two runs of one configuration agree within 15 %"]
    assert abs(rep["ratio"] - 10 / 110) < 1e-9 and rep["status"] == "PASS"
    assert any(r["bar"].startswith("skip_garbage or a codec") and r["status"] == "PASS" for r in rows)
    assert by["default throughput >= 1.5x exponential_backoff (extreme)"]["status"] == "FAIL"  # 150/110
    assert all(r["status"] in ("PASS", "FAIL", "n/a") for r in rows)
    bars.table(rows)  # renders


def test_an_empty_report_gives_na_rows_not_errors():
    rows = bars.evaluate({})
    assert rows and all(r["status"] == "n/a" for r in rows)


def test_checkpoint_figures_in_ms_from_seconds_or_ms():
    assert ckpt_figures(dict(lock_seconds=0.002, total_seconds=1.5))["lock_ms"] == 2.0
    f = ckpt_figures(dict(lock_ms=3.0, page_write_seconds=0.25))
    assert f["lock_ms"] == 3.0 and f["page_write_ms"] == 250.0 and f["fsync_ms"] == 0.0


def test_running_flag_and_seconds_marked_after_the_fact():
    assert checkpoint_running({"checkpoint_running": True, "ckpt_pages": 0})
    assert checkpoint_running({"ckpt_pages": 5}) and not checkpoint_running({"ckpt_pages": 0})
    ts = [dict(second=s, checkpoint_running=False) for s in range(4)]
    _mark_checkpoint_seconds(ts, [dict(t_start=1.2, total_ms=1000.0), dict(t_start=float("nan"), total_ms=5.0)])
    assert [r["checkpoint_running"] for r in ts] == [False, True, True, False]


def test_fixed_rate_pairs_that_both_hold_the_target_count_as_equal():
    paced = '{"rate": 1000}'
    held = [_s(scenario="fixed-rate", recovery_data="wal", throughput=1003.0, config_json=paced),
            _s(scenario="fixed-rate", throughput=991.0, config_json=paced)]
    row = next(r for r in bars.issue7(held, None, None) if r["bar"].startswith("checkpoint-mode"))
    assert row["ratio"] == 1.0 and row["status"] == "PASS"
    short = [held[0], _s(scenario="fixed-rate", throughput=700.0, config_json=paced)]
    row = next(r for r in bars.issue7(short, None, None) if r["bar"].startswith("checkpoint-mode"))
    assert abs(row["ratio"] - 700 / 980) < 1e-9 and row["status"] == "FAIL"
    unpaced = [_s(recovery_data="wal", throughput=1003.0), _s(throughput=991.0)]
    row = next(r for r in bars.issue7(unpaced, None, None) if r["bar"].startswith("checkpoint-mode"))
    assert row["status"] == "FAIL"  # full speed: no cap, 991 < 1003


def test_fixed_rate_in_fsync_mode_uses_a_rate_the_disk_sustains():
    from bench.scenarios import FSYNC_RATE, resolve
    assert resolve(dict(scenario="fixed-rate", wal_mode="fsync"))["rate"] == FSYNC_RATE
    assert resolve(dict(scenario="fixed-rate"))["rate"] == 20_000
    assert resolve(dict(scenario="fixed-rate", wal_mode="fsync", rate=300))["rate"] == 300


def test_p99_bar_falls_back_to_the_full_speed_run_when_extreme_has_no_outside():
    nan = float("nan")
    ms = [_s(scenario="extreme", lat_p99_ckpt_us=150.0, lat_p99_no_ckpt_us=nan),
          _s(scenario="full-speed", lat_p99_ckpt_us=30.0, lat_p99_no_ckpt_us=2.0)]
    row = next(r for r in bars.issue6(ms) if "p99" in r["bar"])
    assert row["status"] == "FAIL" and abs(row["ratio"] - 15.0) < 1e-9 and "full-speed" in row["note"]
    ms[1]["lat_p99_ckpt_us"] = 3.0
    row = next(r for r in bars.issue6(ms) if "p99" in r["bar"])
    assert row["status"] == "PASS"
    row = next(r for r in bars.issue6(ms[:1]) if "p99" in r["bar"])
    assert row["status"] == "n/a"


def test_p99_bar_ignores_an_outside_side_of_a_few_ops():
    # back-to-back checkpoints leave a few dozen ops between them: no p99 to compare
    ms = [_s(scenario="extreme", lat_p99_ckpt_us=26.0, lat_p99_no_ckpt_us=8.0, ops_in_ckpt=244_913,
             ops_out_ckpt=43),
          _s(scenario="full-speed", lat_p99_ckpt_us=3.0, lat_p99_no_ckpt_us=2.0, ops_in_ckpt=60_000,
             ops_out_ckpt=2_000_000)]
    row = next(r for r in bars.issue6(ms) if "p99" in r["bar"])
    assert abs(row["ratio"] - 1.5) < 1e-9 and "full-speed" in row["note"]
    ms[0]["ops_out_ckpt"] = bars.P99_MIN_OPS
    row = next(r for r in bars.issue6(ms) if "p99" in r["bar"])
    assert abs(row["ratio"] - 26.0 / 8.0) < 1e-9 and row["note"] == ""
    ms[1]["ops_in_ckpt"] = 10
    ms[0]["ops_out_ckpt"] = 43
    row = next(r for r in bars.issue6(ms) if "p99" in r["bar"])
    assert row["status"] == "n/a"


def test_codec_bar_reads_the_interleaved_experiment_and_picks_the_codec_that_passes():
    rep = _report()
    rep["codecs"] = dict(rounds=5, codecs=dict(
        disabled=dict(recovery_bytes_per_page=4096, ckpt_ms_per_kpage=10.0),
        zstd=dict(recovery_bytes_per_page=1400, ckpt_ms_per_kpage=30.0),     # cuts most, slower
        lz4=dict(recovery_bytes_per_page=1700, ckpt_ms_per_kpage=9.5)))
    rows = [r for r in bars.evaluate(rep) if r["issue"] == 5]
    cut = next(r for r in rows if r["bar"].startswith("skip_garbage or a codec"))
    slow = next(r for r in rows if r["bar"].startswith("... without a slower checkpoint"))
    assert "lz4" in cut["value"] and "lz4" in slow["bar"] and slow["status"] == "PASS"
    assert abs(slow["ratio"] - 0.95) < 1e-9 and "interleaved" in slow["note"]
    rep["codecs"]["codecs"]["lz4"]["ckpt_ms_per_kpage"] = 12.0             # now none passes both
    slow = next(r for r in bars.evaluate(rep) if r["bar"].startswith("... without a slower"))
    assert slow["status"] == "FAIL" and "zstd" in slow["bar"]


def test_encryption_cost_is_read_against_the_mean_of_the_plain_runs_around_it():
    from bench import bars
    enc = dict(plain=dict(throughput=100.0), encrypted=dict(throughput=75.0), plain_after=dict(throughput=80.0))
    row = next(r for r in bars.issue5([], enc, None) if r["bar"].startswith("encryption costs"))
    assert abs(row["ratio"] - (1 - 75.0 / 90.0)) < 1e-9 and row["status"] == "PASS"
    enc["plain_after"] = dict(throughput=120.0)          # mean 110: cost 31.8 %
    row = next(r for r in bars.issue5([], enc, None) if r["bar"].startswith("encryption costs"))
    assert row["status"] == "FAIL"


def test_policy_bars_compare_medians_of_the_rounds_and_take_the_worst_stalls():
    ext = dict(scenario="extreme")
    ms = [_s(**ext, throughput=64.0), _s(**ext, throughput=80.0), _s(**ext, throughput=79.0, stalls=2),
          _s(**ext, throttling="disabled", throughput=76.0), _s(**ext, throttling="disabled", throughput=70.0),
          _s(**ext, throttling="exponential_backoff", throughput=68.0),
          _s(**ext, throttling="exponential_backoff", throughput=40.0)]
    rows = {r["bar"]: r for r in bars.issue6(ms)}
    other = rows["default throughput >= 1.0x every other policy (extreme)"]
    assert abs(other["ratio"] - 79.0 / 73.0) < 1e-9 and other["status"] == "PASS"   # median 79, not 64
    eb = rows["default throughput >= 1.5x exponential_backoff (extreme)"]
    assert abs(eb["ratio"] - 79.0 / 54.0) < 1e-9 and eb["status"] == "FAIL"
    assert rows["default policy: 0 stalls"]["status"] == "FAIL"          # one run of three stalled
    one = bars.issue6(ms[:1] + ms[3:4])
    assert next(r for r in one if "every other" in r["bar"])["status"] == "FAIL"   # 64 < 76


def test_quick_job_runs_every_policy_in_interleaved_rounds():
    from bench.matrix import POLICY_ROUNDS, quick_configs
    ext = [c.get("throttling") for c in quick_configs({}) if c.get("scenario") == "extreme"
           and c.get("recovery_data") == "checkpoint" and not c.get("recovery_compression")
           and c.get("throttling")]
    assert ext == ["disabled", "exponential_backoff", "fill_rate", "speed_based", "adaptive"] * POLICY_ROUNDS


def test_quick_job_repeats_each_extreme_pair_in_rounds_of_alternating_order():
    from bench.matrix import EXTREME_ROUNDS, quick_configs
    cfgs = quick_configs({})
    pairs = [(c["op_style"], c["wal_mode"], c["recovery_data"]) for c in cfgs
             if c.get("scenario") == "extreme" and "op_style" in c]
    assert len(pairs) == EXTREME_ROUNDS * 6
    fs = [c["recovery_data"] for c in cfgs if c.get("scenario") == "full-speed" and c.get("wal_mode") == "fsync"]
    assert fs == ["wal", "checkpoint", "checkpoint", "wal", "wal", "checkpoint"][:2 * EXTREME_ROUNDS]
    for style, wal in (("atomic", "log_only"), ("implicit-tx", "log_only"), ("implicit-tx", "fsync")):
        order = [rd for s, w, rd in pairs if (s, w) == (style, wal)]
        assert order[:4] == ["wal", "checkpoint", "checkpoint", "wal"]   # drift cancels out
    # the repeated pairs sit between the policy rounds, not in one block at the end
    idx = [i for i, c in enumerate(cfgs) if c.get("scenario") == "extreme" and "op_style" in c]
    assert idx[6] > min(i for i, c in enumerate(cfgs) if c.get("throttling"))


def test_extreme_pair_bars_compare_medians_so_one_slow_run_does_not_decide():
    ext = dict(scenario="extreme")
    ms = [_s(**ext, recovery_data="wal", throughput=t) for t in (50.0, 55.0, 82.0)]
    ms += [_s(**ext, throughput=t) for t in (75.0, 90.0, 70.0)]
    rows = {r["bar"]: r for r in bars.issue7(ms, None, None)}
    r = rows["... >= 1.3x in extreme (lowest extreme pair)"]
    assert abs(r["ratio"] - 75.0 / 55.0) < 1e-9 and r["status"] == "PASS"   # the last pair alone: 70/82
    assert "medians of 3" in r["note"]
    ms[0]["throughput"] = ms[1]["throughput"] = 62.0   # wal median 62: 75/62 = 1.21 fails
    r = {r["bar"]: r for r in bars.issue7(ms, None, None)}["... >= 1.3x in extreme (lowest extreme pair)"]
    assert abs(r["ratio"] - 75.0 / 62.0) < 1e-9 and r["status"] == "FAIL"
    # the policy rounds' runs (throttling "adaptive") are not pair runs
    ms.append(_s(**ext, throttling="adaptive", throughput=1.0))
    r2 = {r["bar"]: r for r in bars.issue7(ms, None, None)}["... >= 1.3x in extreme (lowest extreme pair)"]
    assert r2["ratio"] == r["ratio"]
