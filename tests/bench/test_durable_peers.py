"""bench.durable_peers' asyncio floor: every await it starts is completed, by a
round begun after the await was registered; a floor that drops a future or
whose round fails raises instead of hanging or passing; its p99 ratio stands
beside the aio one."""

import pytest

from bench import durable_peers

# Generous: a correct floor completes its last round milliseconds after the
# run's end; a dropped future is only seen as a task that never finishes.
STALL = 30.0


def _every_await_completed_by_a_round(r: dict) -> None:
    assert r["ops"] > 0
    assert r["registered"] == r["completed"] == r["ops"]
    # a task's awaits follow one another and each needs a round begun after it
    # was registered: no task completes more awaits than there were rounds
    assert 1 <= r["most_per_task"] <= r["rounds"]


@pytest.mark.parametrize("disk", [True, False], ids=["fdatasync", "no_io"])
def test_floor_completes_every_future_it_registers(tmp_path, disk):
    r = durable_peers.asyncio_floor(256, 0.3, tmp_path, disk=disk, stall=STALL)
    _every_await_completed_by_a_round(r)
    assert r["p50_us"] <= r["p99_us"]
    assert r["loop_cpu_us_per_op"] > 0
    assert list(tmp_path.iterdir()) == []       # its file and directory are removed


def test_floor_raises_a_failed_round_instead_of_hanging(tmp_path, monkeypatch):
    def failing(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(durable_peers.os, "fdatasync", failing)
    with pytest.raises(OSError, match="Input/output error"):
        durable_peers.asyncio_floor(16, 0.3, tmp_path, stall=STALL)
    assert list(tmp_path.iterdir()) == []


def test_floor_ratios_stand_beside_the_aio_p99_ratio(tmp_path, monkeypatch, capsys):
    def fixed(p99):
        return lambda *args: dict(ops=100, ops_per_s=1000.0, p50_us=p99 / 2, p99_us=p99, cpu_us_per_op=1.0)

    # the store runs are not what this checks: fixed figures in their place
    monkeypatch.setattr(durable_peers, "fdatasync_loop", fixed(200.0))
    monkeypatch.setattr(durable_peers, "pagestore_threads", fixed(300.0))
    monkeypatch.setattr(durable_peers, "plyvel_threads", fixed(300.0))
    monkeypatch.setattr(durable_peers, "pagestore_aio", fixed(4000.0))
    res = durable_peers.durable_compare(rounds=1, seconds=0.2, tasks=8, keys=0, data_dir=tmp_path,
                                        progress=lambda s: None)
    row = res["rounds"][0]
    for name in ("asyncio_floor_8", "asyncio_no_io_8"):
        _every_await_completed_by_a_round(row[name])
    ratios = res["ratios"]
    assert ratios["aio 8 tasks p99 / fdatasync p99"]["median"] == pytest.approx(20.0)
    assert ratios["asyncio floor 8 tasks p99 / fdatasync p99"]["median"] == \
        pytest.approx(row["asyncio_floor_8"]["p99_us"] / 200.0)
    assert ratios["asyncio no I/O 8 tasks p99 / fdatasync p99"]["median"] == \
        pytest.approx(row["asyncio_no_io_8"]["p99_us"] / 200.0)
    durable_peers.show(res)
    out = capsys.readouterr().out
    for line in ("aio 8 tasks p99 / fdatasync p99", "asyncio floor 8 tasks p99 / fdatasync p99",
                 "asyncio_floor_8", "asyncio_no_io_8"):
        assert line in out
