"""A removed WAL segment is noticed at reopen: wal/NEWEST names the newest
segment the writer began (wal/newest.py), so a segment removed under a
running store that was then killed is refused with a CorruptionError naming
it, never read as the log's clean end; and the file never makes an ordinary
crash, or recovery's own setting aside of slots, refuse to open.

Children run in subprocesses and end with os._exit (a kill: no close, no
checkpoint) or SIGKILL at a crash point armed through PAGESTORE_CRASH_POINT.
"""

import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import pagestore
from pagestore.diskio import CRASH_ENV, layout
from pagestore.tools import wal_slots
from pagestore.verify import verify
from pagestore.wal import WalRecoveryWarning

SEGMENT = 1 << 20
OPTS = dict(wal_segment_size=SEGMENT, memory_size=16 << 20, checkpoint_interval=3600,
            checkpoint_wal_size=1 << 30)

# Writes batches until the log has `segs` segments, optionally removes the
# newest segment's file, writes a few more, and dies without closing.
WRITER = textwrap.dedent(r"""
    import os, sys, pagestore
    from pagestore.tools import wal_slots
    path, mode, segs, remove = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    db = pagestore.open(path, wal_mode=mode, wal_segment_size=1 << 20, memory_size=16 << 20,
                        checkpoint_interval=3600, checkpoint_wal_size=1 << 30)
    b = 0
    while max((s.seq for s in wal_slots(path)[0] if s.seq is not None), default=0) < segs - 1:
        db.put_many([(b"b%04d-%03d" % (b, i), bytes([b % 251]) * 1000) for i in range(100)])
        print(b, flush=True)                          # batch b acknowledged
        b += 1
    if remove:
        live = max((s for s in wal_slots(path)[0] if s.seq is not None), key=lambda s: s.seq)
        os.remove(live.path)
        print("removed", live.path, flush=True)
        for i in range(20):
            try:
                db.put(b"after-%03d" % i, b"x" * 1000)
            except pagestore.Error:
                break
    os._exit(9)
""")


def _write(path, mode="log_only", segs=3, remove=False, env=None):
    run = subprocess.run([sys.executable, "-c", WRITER, path, mode, str(segs), "1" if remove else "0"],
                         capture_output=True, text=True, timeout=300, env=env)
    return run


def _acked(stdout):
    return [int(line) for line in stdout.split() if line.isdigit()]


def _has_all(path, acked):
    with warnings.catch_warnings():
        warnings.simplefilter("error", WalRecoveryWarning)
        with pagestore.open(path, **OPTS) as db:
            for b in acked:
                assert db.get(b"b%04d-%03d" % (b, 99)) == bytes([b % 251]) * 1000, b


@pytest.mark.parametrize("mode", ["fsync", "log_only"])
def test_a_segment_removed_under_a_store_killed_before_its_checkpoint_is_refused_at_reopen(tmp_path, mode):
    path = str(tmp_path / "s")
    run = _write(path, mode, segs=4, remove=True)
    assert run.returncode == 9, run.stderr[-2000:]
    removed = next(line.split()[1] for line in run.stdout.splitlines() if line.startswith("removed"))
    wal = os.path.join(path, layout.WAL_DIR)
    report = verify(path)
    assert not report["ok"]
    assert any(f["file"] == removed and "missing" in f["message"] for f in report["faults"]), report["faults"]
    with pytest.raises(pagestore.CorruptionError) as err:
        pagestore.open(path, wal_mode=mode, **OPTS)
    assert err.value.path == removed
    assert wal in str(err.value) and "seq" in str(err.value)
    with pytest.raises(pagestore.CorruptionError) as err:
        pagestore.open(path, read_only=True, **OPTS)          # a read-only open too
    assert err.value.path == removed
    cli = subprocess.run([sys.executable, "-m", "pagestore", "verify", path], capture_output=True,
                         text=True, timeout=300)
    assert cli.returncode != 0 and os.path.basename(removed) in cli.stdout + cli.stderr


NEWEST_POINTS = ["wal.newest_tmp_written", "wal.newest_written"]


@pytest.mark.parametrize("hit", [1, 3])
@pytest.mark.parametrize("point", NEWEST_POINTS)
def test_kill9_around_naming_the_newest_segment_opens_with_every_acknowledged_write(tmp_path, point, hit):
    path = str(tmp_path / "s")
    env = dict(os.environ, **{CRASH_ENV: f"{point}@{hit}"})
    run = _write(path, "log_only", segs=5, env=env)
    assert run.returncode == -9, f"{point}@{hit} never fired: {run.returncode} {run.stderr[-1500:]}"
    acked = _acked(run.stdout)
    _has_all(path, acked)
    wal = os.path.join(path, layout.WAL_DIR)
    assert not [n for n in os.listdir(wal) if n.endswith(".tmp")], os.listdir(wal)
    assert verify(path)["ok"], verify(path)["faults"]
    _has_all(path, acked)


def _damage_middle_segment(path):
    """Flip bytes inside the records of the second-newest segment: replay stops
    there and the newest segment (the one NEWEST names) is set aside."""
    slots = sorted((s for s in wal_slots(path)[0] if s.seq is not None), key=lambda s: s.seq)
    newest = slots[-1]
    with open(slots[-2].path, "r+b") as f:
        f.seek(SEGMENT // 2)
        data = f.read(4096)
        f.seek(SEGMENT // 2)
        f.write(bytes(x ^ 0xFF for x in data))
    return newest


@pytest.mark.parametrize("point", [None, "wal.newest_tmp_written@1", "wal.newest_written@1",
                                   "wal.segment_tmp_created@1", "wal.newest_tmp_written@2"])
def test_a_slot_recovery_set_aside_is_never_taken_for_a_removed_one(tmp_path, point):
    """Recovery renames the slot NEWEST names aside (it lies past damage);
    killed at any step of that reopen (while NEWEST is rewritten; after the
    rename, while the fresh segment's new slot file is made; while the fresh
    segment is named), or not at all, the next opens succeed."""
    path = str(tmp_path / "s")
    run = _write(path, "log_only", segs=4)
    assert run.returncode == 9, run.stderr[-2000:]
    newest = _damage_middle_segment(path)
    opener = textwrap.dedent("""
        import sys, warnings, pagestore
        warnings.simplefilter("ignore")
        db = pagestore.open(sys.argv[1], wal_segment_size=1 << 20, memory_size=16 << 20)
        db.close()
    """)
    env = dict(os.environ, **({CRASH_ENV: point} if point else {}))
    first = subprocess.run([sys.executable, "-c", opener, path], env=env, capture_output=True,
                           text=True, timeout=300)
    assert first.returncode == (-9 if point else 0), first.stderr[-2000:]
    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", WalRecoveryWarning)
            with pagestore.open(path, **OPTS) as db:
                db.put(b"more", b"x")
    wal = os.path.join(path, layout.WAL_DIR)
    aside = os.path.basename(newest.path) + ".tail-"
    assert [n for n in os.listdir(wal) if n.startswith(aside)], os.listdir(wal)   # the case happened


def test_a_store_without_newest_opens_as_before(tmp_path):
    path = str(tmp_path / "s")
    run = _write(path, "log_only", segs=3)
    newest = os.path.join(path, layout.WAL_DIR, layout.NEWEST)
    os.remove(newest)                 # a store written before the file existed
    assert verify(path)["ok"]
    _has_all(path, _acked(run.stdout))
    assert os.path.exists(newest)     # written again by the first writer


def test_a_damaged_newest_is_refused_naming_it(tmp_path):
    path = str(tmp_path / "s")
    _write(path, "log_only", segs=2)
    newest = os.path.join(path, layout.WAL_DIR, layout.NEWEST)
    with open(newest, "r+b") as f:
        f.seek(16)
        f.write(b"\xff")
    with pytest.raises(pagestore.CorruptionError) as err:
        pagestore.open(path, **OPTS)
    assert err.value.path == newest and "damaged" in str(err.value)
    report = verify(path)
    assert any(f["file"] == newest for f in report["faults"]), report["faults"]
