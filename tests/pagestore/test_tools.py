"""`python -m pagestore verify|inspect` (docs/tools.md): exit codes, faults named by file, read-only.

Crash states come from a child process SIGKILLed by `PAGESTORE_CRASH_POINT`
(docs/diskio-api.md) or by itself after writing, so the WAL and cp/ hold
exactly what a kill -9 leaves behind.
"""

import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys

import pytest

import pagestore
from pagestore import _native
from pagestore.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = 4096
OPTIONS = dict(memory_size=8 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)

CHILD = r"""
import os, signal, sys
import pagestore
path, how = sys.argv[1], sys.argv[2]
db = pagestore.open(path, memory_size=8 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)
for i in range(3000):
    db.put(b"c%06d" % i, b"z" * 200)
if how == "checkpoint":
    db.checkpoint()          # PAGESTORE_CRASH_POINT kills the process in step 5
os.kill(os.getpid(), signal.SIGKILL)
"""


def make_store(path):
    db = pagestore.open(str(path), **OPTIONS)
    for i in range(2000):
        db.put(b"k%06d" % i, b"v" * (100 + i % 50))
    for i in range(0, 2000, 7):
        db.delete(b"k%06d" % i)
    db.checkpoint()
    for i in range(300):
        db.put(b"x%06d" % i, b"w" * 60)
    db.close()
    return str(path)


def crash_child(path, how, crash_point=None):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("PAGESTORE_CRASH_POINT", None)
    if crash_point:
        env["PAGESTORE_CRASH_POINT"] = crash_point
    r = subprocess.run([sys.executable, "-c", CHILD, path, how], env=env, cwd=ROOT,
                       capture_output=True, timeout=60)
    assert r.returncode == -signal.SIGKILL, r.stderr.decode()


def run(capsys, *argv):
    status = main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


def tree_digest(path):
    out = {}
    for d, _dirs, files in os.walk(path):
        for n in files:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, path)] = (os.stat(p).st_mtime_ns, hashlib.sha256(f.read()).hexdigest())
    return out


@pytest.fixture
def healthy(tmp_path):
    return make_store(tmp_path / "store")


@pytest.fixture(scope="module")
def _states(tmp_path_factory):
    base = tmp_path_factory.mktemp("states")
    interrupted = make_store(base / "interrupted")
    crash_child(interrupted, "checkpoint", "checkpoint.page_written")
    killed = make_store(base / "killed")
    crash_child(killed, "kill")
    return {"interrupted": interrupted, "killed": killed}


@pytest.fixture
def state(_states, tmp_path):
    def copy(name):
        dst = str(tmp_path / name)
        shutil.copytree(_states[name], dst)
        return dst
    return copy


# -- verify ------------------------------------------------------------------------------
def test_verify_exits_0_on_a_healthy_store_and_modifies_nothing(healthy, capsys):
    before = tree_digest(healthy)
    status, out, _ = run(capsys, "verify", healthy)
    assert status == 0, out
    assert "result: OK" in out and "FAULT" not in out
    for check in ("markers", "recovery", "pages", "wal", "tree"):
        assert any(line.split()[:2] == [check, "OK"] for line in out.splitlines()), (check, out)
    assert tree_digest(healthy) == before


def test_verify_names_pages_dat_and_the_page_id_after_a_byte_flip(healthy, capsys):
    flip(os.path.join(healthy, "pages.dat"), 3 * PAGE + 777)
    status, out, _ = run(capsys, "verify", healthy)
    assert status == 1
    fault = [line for line in out.splitlines() if line.startswith("FAULT")]
    assert len(fault) == 1 and "pages.dat" in fault[0] and "page 3" in fault[0] \
        and f"offset {3 * PAGE}" in fault[0], out
    status, out, _ = run(capsys, "verify", healthy, "--json")
    rep = json.loads(out)
    assert status == 1 and not rep["ok"]
    assert [(f["page"], f["offset"], os.path.basename(f["file"])) for f in rep["faults"]] == \
        [(3, 3 * PAGE, "pages.dat")]


def test_verify_faults_a_store_open_refuses_for_its_last_checkpoints_markers_removed(healthy, capsys):
    cp = os.path.join(healthy, "cp")
    last = max(int(n[:16]) for n in os.listdir(cp) if n.endswith("-END.bin"))
    for n in os.listdir(cp):
        if int(n[:16]) == last:
            os.remove(os.path.join(cp, n))
    with pytest.raises(pagestore.CorruptionError, match=f"no marker of checkpoint {last}"):
        pagestore.open(healthy, **OPTIONS)
    status, out, _ = run(capsys, "verify", healthy)
    assert status == 1, out
    fault = [line for line in out.splitlines() if line.startswith("FAULT")]
    assert len(fault) == 1 and "[markers]" in fault[0] and f"no marker of checkpoint {last}" in fault[0] \
        and cp in fault[0], out


def test_verify_checks_the_tree_structure_not_only_checksums(healthy, capsys):
    path = os.path.join(healthy, "pages.dat")
    with open(path, "r+b") as f:
        meta = bytearray(f.read(PAGE))
        struct.pack_into("<Q", meta, 72, 12345)           # key count in the meta page
        _native.seal_page(meta, 0, PAGE)                  # checksum valid again
        f.seek(0)
        f.write(meta)
    status, out, _ = run(capsys, "verify", healthy)
    assert status == 1
    assert any(line.startswith("FAULT [tree]") and "12345" in line for line in out.splitlines()), out


def test_verify_reports_needs_recovery_for_start_without_end(state, capsys):
    path = state("interrupted")
    status, out, _ = run(capsys, "verify", path)
    assert "needs recovery" in out
    assert status == 0, out            # intact recovery files: opening the store restores it
    status, out, _ = run(capsys, "verify", path, "--json")
    rep = json.loads(out)
    assert rep["state"] == "needs recovery"
    assert {c["check"]: c["status"] for c in rep["checks"]}["tree"] == "skipped"
    pagestore.open(path, **OPTIONS).close()          # recovery restores, replays, checkpoints
    status, out, _ = run(capsys, "verify", path, "--json")
    rep = json.loads(out)
    assert status == 0 and rep["state"] == "consistent"
    assert {c["check"]: c["status"] for c in rep["checks"]}["tree"] == "ok"


def test_verify_names_the_recovery_file_after_corrupting_one(state, capsys):
    path = state("interrupted")
    cp = os.path.join(path, "cp")
    files = sorted((os.path.getsize(os.path.join(cp, n)), n) for n in os.listdir(cp) if "RECOVERY" in n)
    size, name = files[-1]
    assert size > 1000
    flip(os.path.join(cp, name), size // 2)
    status, out, _ = run(capsys, "verify", path)
    assert status == 1
    assert any(line.startswith("FAULT [recovery]") and name in line for line in out.splitlines()), out


def test_verify_reports_wal_damage_with_file_and_offset(state, capsys):
    path = state("killed")
    status, out, _ = run(capsys, "verify", path, "--json")
    wal = {c["check"]: c for c in json.loads(out)["checks"]}["wal"]
    assert status == 0 and wal["clean"] and wal["records"] > 1000
    mid = (wal["from_lsn"] + wal["stop_lsn"]) // 2
    seg = json.loads(run(capsys, "inspect", path, "--json")[1])["wal"]["segments"]
    slot = next(s for s in seg if s.get("seq") == mid // (1 << 20))
    offset = mid % (1 << 20)
    flip(slot["file"], offset)
    status, out, _ = run(capsys, "verify", path)
    assert status == 1
    faults = [line for line in out.splitlines() if line.startswith("FAULT [wal]")]
    name = os.path.basename(slot["file"])
    assert faults and name in faults[0] and "damage" in faults[0], out
    at = int(faults[0].split(" offset ")[1].split(":")[0])
    assert offset - 4096 < at <= offset


def test_verify_says_when_the_store_is_open_in_another_process(healthy):
    db = pagestore.open(healthy, **OPTIONS)
    try:
        r = subprocess.run([sys.executable, "-m", "pagestore", "verify", healthy], cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=60)
    finally:
        db.close()
    assert f"open in another process (pid {os.getpid()})" in r.stdout, r.stdout + r.stderr


# -- inspect -------------------------------------------------------------------------------
def test_inspect_shows_checkpoint_ids_and_wal_range_and_json_parses(state, capsys):
    path = state("interrupted")
    status, out, _ = run(capsys, "inspect", path, "--json")
    assert status == 0
    rep = json.loads(out)
    names = os.listdir(os.path.join(path, "cp"))
    ids = sorted({int(n[:16]) for n in names if n.endswith(".bin")})
    assert [c["id"] for c in rep["checkpoints"]] == ids
    last = rep["checkpoints"][-1]
    assert last["start"] and not last["end"] and rep["interrupted"] == last["id"]
    assert last["wal_lsn"] > 0 and last["pages"] > 0
    assert len(rep["recovery_files"]) == last["recovery_files_present"] > 0
    assert sum(f["records"] for f in rep["recovery_files"]) == last["pages"]
    segs = [s for s in rep["wal"]["segments"] if s["state"] == "segment"]
    assert segs and all(s["first_lsn"] <= s["last_lsn"] < s["end_lsn"] for s in segs)
    assert rep["wal"]["replay"]["stop_lsn"] == max(s["end_lsn"] for s in segs)
    assert rep["options"]["page_size"] == PAGE and rep["options"]["wal_segment_size"] == 1 << 20
    assert rep["pages"]["page_count"] > 0 and rep["pages"]["pages_on_disk"] > 0
    status, text, _ = run(capsys, "inspect", path)
    assert status == 0
    assert f"INTERRUPTED {last['id']}" in text and "replay from lsn" in text
    for cid in ids:
        assert any(line.split()[:1] == [str(cid)] for line in text.splitlines()), text


def test_inspect_counts_free_pages_from_the_meta_page(healthy, capsys):
    rep = json.loads(run(capsys, "inspect", healthy, "--json")[1])
    db = pagestore.open(healthy, **OPTIONS)
    try:
        v = db.verify()
    finally:
        db.close()
    assert (rep["pages"]["freelist_pages"], rep["pages"]["free_pages"]) == (v["freelist_pages"], v["free_ids"])


# -- command line ----------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_help_works_for_both_commands(command):
    r = subprocess.run([sys.executable, "-m", "pagestore", command, "--help"], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--json" in r.stdout and "PATH" in r.stdout.upper()


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_bad_path_exits_2_with_a_message(command, tmp_path, capsys):
    missing = str(tmp_path / "nope")
    status, _out, err = run(capsys, command, missing)
    assert status == 2 and "nope" in err and "no such directory" in err
    status, _out, err = run(capsys, command, str(tmp_path))
    assert status == 2 and "not a pagestore store" in err


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["verify"])
    assert e.value.code == 2


def test_inspect_lists_the_wal_archive(tmp_path, capsys):
    path = str(tmp_path / "store")
    db = pagestore.open(path, wal_archive=os.path.join(path, "archive"), **OPTIONS)
    for rnd in range(4):
        for i in range(3000):
            db.put(b"k%06d" % i, b"%d" % rnd * 200)
        db.checkpoint()
    db.close()
    status, out, _ = run(capsys, "inspect", path, "--json")
    archive = json.loads(out)["archive"]
    assert status == 0 and archive["copies"] >= 1 and archive["bytes"] > 0
    assert all(f["first_seq"] <= f["last_seq"] for f in archive["files"])
    live = [s["seq"] for s in json.loads(out)["wal"]["segments"] if s["state"] == "segment"]
    assert archive["first_seq"] < max(live)
    status, out, _ = run(capsys, "inspect", path, "--archive", str(tmp_path / "missing"))
    assert status == 2


def test_the_top_level_help_does_not_call_the_tools_read_only_when_backup_and_compact_write():
    r = subprocess.run([sys.executable, "-m", "pagestore", "--help"], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=60)
    text = " ".join(r.stdout.split())
    assert r.returncode == 0 and "(read-only)" not in text
    assert "backup writes a copy" in text and "compact rewrites the store" in text
