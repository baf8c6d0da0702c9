"""Crash point registry and arming, on both file systems and in a child process."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from pagestore.diskio import CRASH_ENV, CRASH_POINTS, PosixFS, SimFS, SimulatedCrash

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REQUIRED = [
    "wal.before_fsync", "wal.after_fsync", "wal.segment_created",
    "checkpoint.after_lock", "checkpoint.after_wal_fsync", "checkpoint.recovery_file_written",
    "checkpoint.after_recovery_fsync", "checkpoint.start_tmp_written", "checkpoint.after_start_marker",
    "checkpoint.page_written", "checkpoint.before_page_fsync", "checkpoint.after_page_fsync",
    "checkpoint.after_end_marker", "checkpoint.after_wal_trim",
    "recovery.after_restore", "recovery.after_replay",
]


def test_every_required_crash_point_is_registered_with_a_description():
    for name in REQUIRED:
        assert name in CRASH_POINTS
        assert CRASH_POINTS[name].strip()


@pytest.mark.parametrize("fs", [PosixFS(), SimFS()], ids=["posix", "sim"])
def test_unknown_crash_point_raises_valueerror(fs):
    with pytest.raises(ValueError):
        fs.crash_point("checkpoint.no_such_gap")
    with pytest.raises(ValueError):
        fs.arm("checkpoint.no_such_gap")
    fs.crash_point("checkpoint.after_lock")  # unarmed: a no-op
    assert fs.crash_point_hits["checkpoint.after_lock"] == 1


def test_sim_armed_point_raises_at_the_given_hit_and_then_everything_raises():
    sim = SimFS()
    f = sim.open("a", create=True)
    sim.arm("checkpoint.page_written", hit=3)
    sim.crash_point("checkpoint.page_written")
    sim.crash_point("checkpoint.page_written")
    f.pwrite(b"x", 0)
    with pytest.raises(SimulatedCrash):
        sim.crash_point("checkpoint.page_written")
    assert sim.crashed
    for op in (lambda: f.pwrite(b"y", 0), lambda: f.pread(1, 0), lambda: sim.exists("a"),
               lambda: sim.crash_point("wal.after_fsync"), lambda: sim.open("b", create=True)):
        with pytest.raises(SimulatedCrash):
            op()
    f.close()  # closing is not I/O and never raises
    sim.crash(0, "keep")
    assert not sim.crashed
    assert sim.open("a").pread(1, 0) == b"x"  # a process kill keeps written data
    sim.crash_point("checkpoint.page_written")  # one-shot: fired arms are gone


def test_posix_arm_raise_action_fires_at_hit():
    fs = PosixFS()
    fs.arm("wal.after_fsync", action="raise", hit=2)
    fs.crash_point("wal.after_fsync")
    with pytest.raises(SimulatedCrash):
        fs.crash_point("wal.after_fsync")
    fs.crash_point("wal.after_fsync")
    with pytest.raises(ValueError):
        fs.arm("wal.after_fsync", action="explode")


def _child(env_value):
    code = textwrap.dedent("""
        import sys, diskio
        fs = diskio.PosixFS()
        for i in range(3):
            print("before", i, flush=True)
            fs.crash_point("checkpoint.after_start_marker")
        print("survived", flush=True)
    """)
    env = dict(os.environ, **{CRASH_ENV: env_value})
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)


def test_child_armed_by_environment_dies_by_sigkill_at_the_point():
    res = _child("checkpoint.after_start_marker")
    assert res.returncode == -signal.SIGKILL
    assert res.stdout.split("\n")[:-1] == ["before 0"]
    res = _child("checkpoint.after_start_marker@2")
    assert res.returncode == -signal.SIGKILL
    assert res.stdout.split("\n")[:-1] == ["before 0", "before 1"]


def test_child_armed_elsewhere_or_with_a_bad_name():
    res = _child("checkpoint.after_end_marker")  # armed, never passed: runs to the end
    assert res.returncode == 0 and "survived" in res.stdout
    res = _child("checkpoint.typo")
    assert res.returncode == 1 and "ValueError" in res.stderr
