"""The harness-overhead figure pairs each noop run with a run of the store's best configuration,
interleaved, and takes the median of the pairs' ratios: a noop figure from one moment of this
shared machine against a store figure from another measured the machine, not the harness."""

import json

from bench import overhead


def _summary(store, tput, **cfg):
    return dict(store=store, throughput=tput, config_json=json.dumps(dict(cfg, store=store)))


def test_the_best_configuration_is_the_fastest_pagestore_run():
    rows = [_summary("pagestore", 500.0, scenario="extreme"),
            _summary("pagestore", 700.0, scenario="full-speed", op_style="atomic", experiment="iep-113", round=1),
            _summary("lmdb", 900.0, scenario="full-speed"),
            _summary("pagestore", 600.0, scenario="full-speed", wal_mode="log_only")]
    # the experiment's bookkeeping is not a store option: it is dropped from the rerun
    assert overhead.best_config(rows) == dict(store="pagestore", scenario="full-speed", op_style="atomic")
    assert overhead.best_config([_summary("sqlite", 5.0)]) is None
    assert overhead.best_config([_summary("pagestore", 9.0, encryption_key="<set>")]) is None


def test_noop_and_store_runs_alternate_and_the_ratio_is_the_median_of_the_pairs():
    order = []
    rates = {"noop": iter([8e6, 5e6, 7e6]), "pagestore": iter([8e5, 4e5, 1e6])}

    def run(cfg):
        order.append(cfg["store"])
        return dict(summary=dict(throughput=next(rates[cfg["store"]])))

    ov = overhead.harness_overhead(None, 1e6, best_cfg=dict(store="pagestore", scenario="full-speed",
                                                            duration=10.0), runner=run)
    assert order == ["noop", "pagestore"] * 3
    assert ov["paired"] and ov["pair_ratios"] == [7.0, 10.0, 12.5]
    assert ov["ratio"] == 10.0        # the session's best (1e6) against the best noop (8e6) would say 8
    assert "median 10.0× the store's best configuration over 3 interleaved pairs" in overhead.describe(ov)
    alone = overhead.harness_overhead(None, 2e5, runner=lambda cfg: dict(summary=dict(throughput=1e6)))
    assert not alone["paired"] and alone["ratio"] == 5.0 and len(alone["noop_runs"]) == 5
