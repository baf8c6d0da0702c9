"""db.backup(dest) / `python -m pagestore backup`: hot, one moment of the store, opens and verifies."""

import errno
import os
import subprocess
import sys
import threading

import pytest

import pagestore

SMALL = dict(memory_size=32 << 20)
KEYS = 400


def verify_cli(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pagestore", "verify", str(path)],
                          capture_output=True, text=True, timeout=120)


def op(i):
    """The writer's i-th operation: puts over a small key space, a delete every 7th."""
    if i % 7 == 6:
        return ("delete", b"k%04d" % ((i * 3) % KEYS), None)
    return ("put", b"k%04d" % (i % KEYS), b"%08d" % i)


def states_from(ops_done_before: int, total: int):
    """(m, the store after the writer's first m operations) for m >= ops_done_before."""
    state = {}
    for i in range(total + 1):
        if i >= ops_done_before:
            yield i, state
        if i == total:
            return
        kind, k, v = op(i)
        if kind == "put":
            state[k] = v
        else:
            state.pop(k, None)


def test_a_backup_taken_while_a_writer_runs_is_one_prefix_of_its_sequence_and_holds_every_acked_op(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "backup"
    db = pagestore.open(src, wal_mode="log_only", **SMALL)
    done, stop = [0], threading.Event()

    def writer():
        i = 0
        while not stop.is_set() or i < 3000:
            kind, k, v = op(i)
            db.put(k, v) if kind == "put" else db.delete(k)
            i += 1
            done[0] = i                      # acknowledged: the call returned
    t = threading.Thread(target=writer)
    t.start()
    while done[0] < 1500:
        pass
    acked = done[0]
    info = db.backup(dest)
    stop.set()
    t.join()
    total = done[0]
    db.close()
    assert total > acked
    with pagestore.open(dest, create=False, **SMALL) as copy:
        got = dict(copy.scan())
    assert info["keys"] == len(got)
    prefixes = [m for m, state in states_from(acked, total) if state == got]
    assert prefixes, f"the backup is no prefix of the writer's sequence from op {acked} on ({total} ops)"
    r = verify_cli(dest)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_backup_command_copies_a_closed_store_and_the_copy_verifies(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "copy"
    with pagestore.open(src, **SMALL) as db:
        db.put_many((b"k%05d" % i, b"v" * 300) for i in range(3000))
        for i in range(0, 3000, 2):
            del db[b"k%05d" % i]
    r = subprocess.run([sys.executable, "-m", "pagestore", "backup", str(src), str(dest)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert verify_cli(dest).returncode == 0
    with pagestore.open(dest, read_only=True, **SMALL) as copy, pagestore.open(src, read_only=True, **SMALL) as orig:
        assert list(copy.scan()) == list(orig.scan()) and len(copy) == 1500


def test_a_backup_refuses_a_destination_that_is_not_empty_and_leaves_it_as_it_was(tmp_path):
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "mine.txt").write_text("keep me")
    with pagestore.open(tmp_path / "src", **SMALL) as db:
        db[b"a"] = b"1"
        with pytest.raises(pagestore.Error):
            db.backup(tmp_path / "dest")
        with pytest.raises(pagestore.Error):
            db.backup(tmp_path / "src" / "inside")
    assert os.listdir(tmp_path / "dest") == ["mine.txt"]
    assert not (tmp_path / "src" / "inside").exists()


def test_a_backup_of_an_encrypted_store_needs_its_key(tmp_path):
    key = bytes(range(32))
    with pagestore.open(tmp_path / "src", encryption_key=key, **SMALL) as db:
        db.put_many((b"k%03d" % i, b"secret") for i in range(100))
        db.backup(tmp_path / "copy")
    with pagestore.open(tmp_path / "copy", encryption_key=key, **SMALL) as copy:
        assert copy[b"k042"] == b"secret"
    with pytest.raises(pagestore.EncryptionError):
        pagestore.open(tmp_path / "copy", **SMALL)


# -- every failure of backup() is a pagestore.Error naming the destination ----------------------
def test_a_backup_to_a_path_that_is_a_file_raises_not_a_store_error_naming_it(tmp_path):
    (tmp_path / "afile").write_text("keep me")
    with pagestore.open(tmp_path / "src", **SMALL) as db:
        db[b"a"] = b"1"
        with pytest.raises(pagestore.NotAStoreError) as e:
            db.backup(tmp_path / "afile")
    assert e.value.path == str(tmp_path / "afile") and str(tmp_path / "afile") in str(e.value)
    assert (tmp_path / "afile").read_text() == "keep me"


def test_a_backup_to_an_empty_path_raises_config_error_and_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pagestore.open(tmp_path / "src", **SMALL) as db:
        db[b"a"] = b"1"
        for empty in ("", b""):
            with pytest.raises(pagestore.ConfigError, match="empty"):
                db.backup(empty)
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_a_backup_takes_a_bytes_destination(tmp_path):
    with pagestore.open(tmp_path / "src", **SMALL) as db:
        db[b"a"] = b"1"
        info = db.backup(os.fsencode(tmp_path / "copy"))
    assert info["path"] == str(tmp_path / "copy")
    with pagestore.open(tmp_path / "copy", create=False, **SMALL) as copy:
        assert copy[b"a"] == b"1"


def test_a_backup_whose_last_sync_fails_raises_a_pagestore_error_and_removes_the_copy(tmp_path):
    from pagestore.diskio import errors as diskio_errors
    with pagestore.open(tmp_path / "src", **SMALL) as db:
        db[b"a"] = b"1"
        fs, real = db.fs, db.fs.fsync_dir

        def failing(path):
            if path == str(tmp_path):       # the copy's parent: the backup's own last step
                raise diskio_errors.make_error(errno.EIO, "Input/output error", path)
            return real(path)
        fs.fsync_dir = failing
        try:
            with pytest.raises(pagestore.DiskIOError) as e:
                db.backup(tmp_path / "copy")
        finally:
            del fs.fsync_dir
    assert e.value.operation == "backup" and e.value.path == str(tmp_path) and str(tmp_path) in str(e.value)
    assert not (tmp_path / "copy").exists()


def test_a_backup_through_a_symlink_into_the_store_is_refused_and_the_store_still_opens(tmp_path):
    with pagestore.open(tmp_path / "src", **SMALL) as db:
        db.put(b"k", b"v")
        os.symlink(tmp_path / "src", tmp_path / "link")
        with pytest.raises(pagestore.Error, match="inside the store"):
            db.backup(tmp_path / "link" / "bk")
    assert not (tmp_path / "src" / "bk").exists()
    with pagestore.open(tmp_path / "src", create=False, **SMALL) as db:
        assert db.get(b"k") == b"v"


def test_a_backup_to_a_symlink_that_points_nowhere_raises_not_a_store_error_naming_it_and_creates_nothing(tmp_path):
    link, target = tmp_path / "bk", tmp_path / "nowhere" / "x"
    os.symlink(target, link)
    with pagestore.open(tmp_path / "src", **SMALL) as db:
        db[b"a"] = b"1"
        with pytest.raises(pagestore.NotAStoreError) as e:
            db.backup(link)
    assert e.value.path == str(link)
    assert f"backup destination {link} is a symbolic link to {target}, which does not exist" in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["bk", "src"] and os.readlink(link) == str(target)


def test_a_backup_below_a_symlink_that_points_nowhere_raises_not_a_store_error_naming_the_link(tmp_path):
    link, target = tmp_path / "mnt", tmp_path / "unmounted"
    os.symlink(target, link)
    with pagestore.open(tmp_path / "src", **SMALL) as db:
        db[b"a"] = b"1"
        with pytest.raises(pagestore.NotAStoreError) as e:
            db.backup(link / "bk")
    assert f"{link / 'bk'}: {link} above it is a symbolic link to {target}, which does not exist" in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["mnt", "src"]


def test_a_backup_through_a_symlink_to_an_empty_directory_writes_the_copy_there(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "bk")
    with pagestore.open(tmp_path / "src", **SMALL) as db:
        db[b"a"] = b"1"
        db.backup(tmp_path / "bk")
    with pagestore.open(tmp_path / "real", create=False, **SMALL) as copy:
        assert copy[b"a"] == b"1"
