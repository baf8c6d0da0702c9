"""The bare pwrite+fdatasync loop brackets pagestore's one-thread fsync run
(bench/peers.py commit_compare): the bar divides by the mean of the loop run
just before and just after it, not by one loop a dozen seconds away."""

from bench import peers


def _fake(monkeypatch, stores=("pagestore", "sqlite")):
    order = []
    rates = iter([1000.0, 3000.0, 99.0, 99.0])

    def run(cfg):
        order.append((cfg["store"], cfg["wal_mode"], cfg["threads"]))
        return dict(summary=dict(store=cfg["store"], throughput=1.0))

    def loop(seconds, data_dir=None):
        order.append("bare")
        r = next(rates)
        return dict(ops=10, ops_per_s=r, p50_us=1.0, p99_us=2.0)

    monkeypatch.setattr(peers, "run", run)
    monkeypatch.setattr(peers, "fdatasync_loop", loop)
    monkeypatch.setattr(peers, "available", lambda names: ([n for n in names if n in stores], []))
    return order


def test_the_bare_loop_runs_just_before_and_after_the_one_thread_pagestore_fsync_run(monkeypatch):
    order = _fake(monkeypatch)
    out = peers.commit_compare(seconds=0.1, threads=(1, 4))
    i = order.index(("pagestore", "fsync", 1))
    assert order[i - 1] == "bare" and order[i + 1] == "bare"
    assert order.count("bare") == 2                   # not again for 4 threads
    assert out["bare"]["ops_per_s"] == 2000.0          # the mean of before and after
    assert (out["bare"]["before"], out["bare"]["after"]) == (1000.0, 3000.0)


def test_without_pagestore_one_bare_loop_still_runs(monkeypatch):
    order = _fake(monkeypatch, stores=("sqlite",))
    out = peers.commit_compare(seconds=0.1, threads=(1,))
    assert order.count("bare") == 1
    assert out["bare"]["ops_per_s"] == 1000.0


def test_commit_runs_use_the_stores_checkpoint_interval_not_the_full_speed_presets(monkeypatch):
    import dataclasses

    from bench.scenarios import resolve
    from pagestore.config import Config

    seen = []
    monkeypatch.setattr(peers, "run", lambda cfg: seen.append(resolve(cfg)) or dict(summary=dict(throughput=1.0)))
    monkeypatch.setattr(peers, "fdatasync_loop", lambda seconds, data_dir=None: dict(
        ops=1, ops_per_s=1.0, p50_us=1.0, p99_us=1.0))
    monkeypatch.setattr(peers, "available", lambda names: (["pagestore"], []))
    peers.commit_compare(seconds=0.1, threads=(1,))
    default = next(f.default for f in dataclasses.fields(Config) if f.name == "checkpoint_interval")
    assert seen and all(c["checkpoint_interval"] == default for c in seen)
    assert resolve(dict(scenario="full-speed"))["checkpoint_interval"] != default   # the preset differs
