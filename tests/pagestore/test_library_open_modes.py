"""Open modes: create=False, foreign directories refused untouched, read_only writes nothing."""

import hashlib
import os
import sqlite3

import pytest

import pagestore

SMALL = dict(memory_size=16 << 20)


def tree_state(root) -> dict:
    """Every file and directory under `root`: content hash, size and mtime (ns)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            digest = None
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(p, root)] = (digest, st.st_size, st.st_mtime_ns)
    return out


def make_store(path, n=500):
    with pagestore.open(path, **SMALL) as db:
        db.put_many((b"k%05d" % i, b"v%05d" % i) for i in range(n))


# -- create=False ------------------------------------------------------------------------
def test_create_false_on_a_missing_store_raises_and_creates_nothing(tmp_path):
    path = tmp_path / "parent" / "store"
    with pytest.raises(pagestore.StoreNotFoundError) as e:
        pagestore.open(path, create=False, **SMALL)
    assert isinstance(e.value, pagestore.Error) and str(path) in str(e.value)
    assert not (tmp_path / "parent").exists()


def test_create_false_on_an_empty_directory_raises_and_leaves_it_empty(tmp_path):
    with pytest.raises(pagestore.StoreNotFoundError):
        pagestore.open(tmp_path, create=False, **SMALL)
    assert os.listdir(tmp_path) == []


def test_create_false_opens_an_existing_store(tmp_path):
    make_store(tmp_path / "s")
    with pagestore.open(tmp_path / "s", create=False, **SMALL) as db:
        assert db[b"k00007"] == b"v00007"


def test_create_is_the_default(tmp_path):
    with pagestore.open(tmp_path / "new", **SMALL) as db:
        db[b"a"] = b"1"
    assert (tmp_path / "new" / "pages.dat").exists()


# -- foreign directories -------------------------------------------------------------------
def _lmdb(d):
    (d / "data.mdb").write_bytes(b"\xde\xc0\xef\xbe" + os.urandom(8188))
    (d / "lock.mdb").write_bytes(os.urandom(8192))


def _leveldb(d):
    (d / "CURRENT").write_text("MANIFEST-000002\n")
    (d / "MANIFEST-000002").write_bytes(os.urandom(100))
    (d / "000003.log").write_bytes(os.urandom(300))
    (d / "LOCK").write_bytes(b"")      # the same name as a pagestore's LOCK
    (d / "LOG").write_text("leveldb log\n")


def _rocksdb(d):
    _leveldb(d)
    (d / "000010.sst").write_bytes(os.urandom(500))
    (d / "OPTIONS-000007").write_text("[DBOptions]\n")


def _sqlite(d):
    con = sqlite3.connect(d / "app.db")
    con.execute("create table t (k text)")
    con.execute("insert into t values ('x')")
    con.commit()
    con.close()


def _user_files(d):
    (d / "notes.txt").write_text("my notes\n")
    (d / "photos").mkdir()
    (d / "photos" / "cat.jpg").write_bytes(os.urandom(1000))


def _our_names_and_a_stray_file(d):
    make_store(d)
    (d / "report.csv").write_text("a,b\n")


FOREIGN = {
    "lmdb": (_lmdb, "LMDB"),
    "leveldb": (_leveldb, "LevelDB"),
    "rocksdb": (_rocksdb, "RocksDB"),
    "sqlite": (_sqlite, "SQLite"),
    "user files": (_user_files, "notes.txt"),
    "store plus a stray file": (_our_names_and_a_stray_file, "report.csv"),
}


@pytest.mark.parametrize("kind", sorted(FOREIGN))
@pytest.mark.parametrize("mode", [{}, {"create": False}, {"read_only": True}])
def test_a_foreign_directory_is_refused_naming_what_was_found_and_left_byte_for_byte(tmp_path, kind, mode):
    make, named = FOREIGN[kind]
    d = tmp_path / "d"
    d.mkdir()
    make(d)
    before = tree_state(d)
    with pytest.raises(pagestore.NotAStoreError) as e:
        pagestore.open(d, **mode, **SMALL)
    assert named in str(e.value) and e.value.found
    assert tree_state(d) == before


def test_a_file_is_not_a_store_directory(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"hello")
    with pytest.raises(pagestore.NotAStoreError):
        pagestore.open(f, **SMALL)
    assert f.read_bytes() == b"hello"


# -- read_only -------------------------------------------------------------------------------
def test_read_only_reads_and_refuses_writes_with_read_only_error_and_changes_no_file(tmp_path):
    path = tmp_path / "s"
    make_store(path)
    before = tree_state(path)
    with pagestore.open(path, read_only=True, **SMALL) as db:
        assert db[b"k00042"] == b"v00042" and len(db) == 500
        assert list(db.scan(b"k00010", b"k00013")) == [(b"k%05d" % i, b"v%05d" % i) for i in (10, 11, 12)]
        with db.snapshot() as snap:
            assert snap[b"k00001"] == b"v00001"
        assert db.stats()["read_only"] is True
        writes = [lambda: db.put(b"x", b"y"), lambda: db.delete(b"k00001"),
                  lambda: db.put_many([(b"x", b"y")]), lambda: db.update({b"x": b"y"}),
                  lambda: db.pop(b"k00001"), lambda: db.__setitem__(b"x", b"y"),
                  db.transaction, db.checkpoint, db.sync, db.compact]
        for write in writes:
            with pytest.raises(pagestore.ReadOnlyError):
                write()
        assert db[b"k00001"] == b"v00001" and db.get(b"x") is None
    assert tree_state(path) == before


def test_read_only_is_refused_while_the_store_is_open_for_writing_and_holds_writers_off(tmp_path):
    path = tmp_path / "s"
    make_store(path)
    with pagestore.open(path, **SMALL):
        with pytest.raises(pagestore.StoreLockedError):
            pagestore.open(path, read_only=True, **SMALL)
    with pagestore.open(path, read_only=True, **SMALL) as ro, pagestore.open(path, read_only=True, **SMALL) as ro2:
        assert ro[b"k00003"] == ro2[b"k00003"] == b"v00003"
        with pytest.raises(pagestore.StoreLockedError):
            pagestore.open(path, **SMALL)
    with pagestore.open(path, **SMALL) as db:          # released on close
        db[b"after"] = b"1"


def test_read_only_after_a_crash_refuses_with_recovery_needed_and_writes_nothing(tmp_path):
    path = tmp_path / "s"
    make_store(path)
    db = pagestore.open(path, **SMALL)
    db.put(b"late", b"1")
    db._abandon()                                        # as a killed process
    before = tree_state(path)
    with pytest.raises(pagestore.RecoveryNeededError) as e:
        pagestore.open(path, read_only=True, **SMALL)
    assert "without read_only" in str(e.value)
    assert tree_state(path) == before
    pagestore.open(path, **SMALL).close()                # one writable open recovers
    with pagestore.open(path, read_only=True, **SMALL) as ro:
        assert ro[b"late"] == b"1"


def test_read_only_on_a_missing_store_raises_and_creates_nothing(tmp_path):
    with pytest.raises(pagestore.StoreNotFoundError):
        pagestore.open(tmp_path / "nothing", read_only=True, **SMALL)
    assert not (tmp_path / "nothing").exists()


def test_a_wal_archive_inside_the_store_directory_is_not_foreign_to_it(tmp_path):
    path = tmp_path / "s"
    opts = dict(wal_archive=str(path / "old-wal"), **SMALL)
    with pagestore.open(path, **opts) as db:
        db[b"a"] = b"1"
    (path / "old-wal").mkdir(exist_ok=True)
    with pagestore.open(path, **opts) as db:
        assert db[b"a"] == b"1"
    with pytest.raises(pagestore.NotAStoreError) as e:       # without the option it is a stranger
        pagestore.open(path, **SMALL)
    assert e.value.found == ("old-wal",)


# -- the path ----------------------------------------------------------------------------
def test_a_store_opened_by_a_relative_path_keeps_its_directory_after_chdir(tmp_path, monkeypatch):
    """Segments, markers and recovery files are created by name long after open:
    a later chdir must not send them into another directory (or another store)."""
    here, there = tmp_path / "a", tmp_path / "b"
    here.mkdir()
    there.mkdir()
    make_store(there / "data", n=50)                 # another store at the same relative name
    theirs = tree_state(there)
    monkeypatch.chdir(here)
    with pagestore.open("data", wal_segment_size=1 << 20, **SMALL) as db:
        monkeypatch.chdir(there)
        for i in range(20_000):                       # > 1 MiB of log: new segments after the chdir
            db.put(b"a%06d" % i, b"x" * 100)
        db.checkpoint()
    assert tree_state(there) == theirs
    with pagestore.open(here / "data", create=False, wal_segment_size=1 << 20, **SMALL) as db:
        assert len(db) == 20_000 and db.verify()["keys"] == 20_000


def test_bytes_paths_open_the_same_store_and_an_empty_path_is_refused(tmp_path):
    make_store(tmp_path / "s", n=10)
    with pagestore.open(os.fsencode(tmp_path / "s"), create=False, **SMALL) as db:
        assert len(db) == 10
    before = tree_state(tmp_path)
    for empty in ("", b""):
        with pytest.raises(pagestore.ConfigError, match="empty"):
            pagestore.open(empty, **SMALL)
    assert tree_state(tmp_path) == before


def test_a_wal_archive_that_is_empty_or_a_file_is_refused_at_open_and_a_relative_one_stays_put(tmp_path, monkeypatch):
    (tmp_path / "afile").write_bytes(b"x")
    for bad in ("", str(tmp_path / "afile")):
        with pytest.raises(pagestore.ConfigError, match="wal_archive"):
            pagestore.open(tmp_path / "s", wal_archive=bad, **SMALL)
    assert not (tmp_path / "s").exists()
    monkeypatch.chdir(tmp_path)
    with pagestore.open("s", wal_archive="arch", wal_segment_size=1 << 20, **SMALL) as db:
        (tmp_path / "elsewhere").mkdir()
        monkeypatch.chdir(tmp_path / "elsewhere")
        for i in range(3):
            db.put_many((b"k%d-%06d" % (i, j), b"x" * 100) for j in range(12_000))
            db.checkpoint()                  # trims segments into the archive
    assert any((tmp_path / "arch").iterdir())
    assert not (tmp_path / "elsewhere" / "arch").exists()
    for given in (tmp_path / "arch", os.fsencode(tmp_path / "arch")):    # as the store's path is taken
        with pagestore.open(tmp_path / "s", create=False, wal_archive=given, wal_segment_size=1 << 20,
                            **SMALL) as db:
            assert len(db) == 36_000


def test_dir_of_pagestore_lists_every_public_name():
    assert set(pagestore.__all__) <= set(dir(pagestore))
