"""`make bench-cluster`'s path: a standalone master and two workers on loopback, the three verbs
against it with --master spark://..., and every JVM gone afterwards. Slow (JVM starts): make torture."""

import os
import subprocess
import sys

import pyarrow.dataset as ds
import pytest

from bench.spark import cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _verb(*args):
    p = subprocess.run([sys.executable, "-m", "bench.spark", *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


@pytest.mark.slow
def test_generate_run_and_report_on_a_two_worker_cluster_then_every_jvm_is_stopped(tmp_path):
    work = str(tmp_path / "cluster")
    url = cluster.start(work, workers=2)
    with open(os.path.join(work, "pids")) as f:
        pids = [int(x) for x in f.read().split()]
    try:
        assert url.startswith("spark://127.0.0.1:") and len(pids) == 3
        _verb("generate", str(tmp_path / "wl"), "--ops", "20000", "--partitions", "2", "--master", url)
        _verb("run", str(tmp_path / "wl"), str(tmp_path / "res"), "--nodes", "2", "--master", url,
              "--set", "duration=2", "--set", "checkpoint_interval=0.5")
        _verb("report", str(tmp_path / "res"), "--out", str(tmp_path / "res" / "report"), "--master", url)
    finally:
        stopped = cluster.stop(work)
    summary = ds.dataset(str(tmp_path / "res" / "summary"), format="parquet",
                         partitioning=ds.partitioning(flavor="hive")).to_table().to_pandas()
    assert sorted(summary["node"]) == [0, 1]
    assert os.path.exists(tmp_path / "res" / "report" / "report.html")
    assert sorted(stopped) == sorted(pids)
    assert not any(cluster._running(p) for p in pids)
