"""The harness-overhead bar pairs each noop run with a run of the store's best configuration,
interleaved, and takes the median of the pairs' ratios: a noop figure from one moment of this
shared machine against a store figure from another measured the machine, not the harness."""

import json

from bench import bars, commands


def _summary(store, tput, **cfg):
    return dict(store=store, throughput=tput, config_json=json.dumps(dict(cfg, store=store)))


def test_the_best_configuration_is_the_fastest_pagestore_run_of_the_report():
    report = dict(matrix=[_summary("pagestore", 500.0, scenario="extreme"),
                          _summary("pagestore", 700.0, scenario="full-speed", op_style="atomic")],
                  commit=dict(summaries=[_summary("lmdb", 900.0, scenario="full-speed"),
                                         _summary("pagestore", 600.0, scenario="full-speed", wal_mode="log_only")]))
    assert commands._best_config(report) == dict(store="pagestore", scenario="full-speed", op_style="atomic")
    assert commands._best_config(dict(matrix=[_summary("sqlite", 5.0)])) is None
    enc = dict(matrix=[_summary("pagestore", 9.0, encryption_key="<set>")])
    assert commands._best_config(enc) is None          # the key is not in the JSON: no rerun


def test_noop_and_store_runs_alternate_and_the_ratio_is_the_median_of_the_pairs(monkeypatch):
    order = []
    rates = {"noop": iter([8e6, 5e6, 7e6]), "pagestore": iter([8e5, 4e5, 1e6])}

    def run(cfg):
        order.append(cfg["store"])
        return dict(summary=dict(throughput=next(rates[cfg["store"]])))

    monkeypatch.setattr(commands, "run_one", run)
    ov = commands._harness_overhead(None, 1e6, best_cfg=dict(store="pagestore", scenario="full-speed",
                                                                duration=10.0))
    assert order == ["noop", "pagestore"] * 3
    assert ov["paired"] and ov["pair_ratios"] == [7.0, 10.0, 12.5]
    assert ov["ratio"] == 10.0        # the session's best (1e6) against the best noop (8e6) would say 8
    row = next(r for r in bars.issue7([], ov, None) if r["bar"].startswith("harness"))
    assert row["status"] == "PASS" and "median of 3 interleaved pairs" in row["note"]
    monkeypatch.setattr(commands, "run_one", lambda cfg: dict(summary=dict(throughput=1e6)))
    alone = commands._harness_overhead(None, 2e5)
    assert not alone["paired"] and alone["ratio"] == 5.0 and len(alone["noop_runs"]) == 5
    row = next(r for r in bars.issue7([], alone, None) if r["bar"].startswith("harness"))
    assert row["status"] == "FAIL"
