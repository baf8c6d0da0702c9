"""`python -m pagestore inspect` on an encrypted store without `--key-file`
shows everything but what is sealed (docs/tools.md): the meta page and the
WAL's records are named as sealed, never a traceback."""

import json

import pytest

import pagestore
from pagestore.__main__ import main
from pagestore.cipher import add_key


@pytest.fixture(scope="module")
def encrypted(tmp_path_factory) -> tuple:
    """An encrypted store with a checkpoint behind it and records after it, and its key file."""
    d = tmp_path_factory.mktemp("enc")
    keys, path = str(d / "keys"), str(d / "s")
    add_key(keys)
    with pagestore.open(path, encryption_key=keys, wal_segment_size=1 << 20) as db:
        db.put_many({b"k%05d" % i: b"secret" for i in range(2000)})
        db.checkpoint()
        db.put(b"after", b"secret")
    return path, keys


def test_inspect_without_the_key_names_the_sealed_records_and_shows_the_rest(encrypted, capsys):
    path, _ = encrypted
    assert main(["inspect", path]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "encrypted True" in out and "page 0 is sealed" in out
    assert "checkpoints  last START" in out and "pass --key-file" in out.split("wal          ")[1]
    assert main(["inspect", path, "--json"]) == 0
    wal = json.loads(capsys.readouterr().out)["wal"]
    in_use = [s for s in wal["segments"] if s["state"] != "blank"]
    assert in_use and all(s["state"] == "sealed" for s in in_use)
    assert wal["sealed_segments"] == len(in_use) and wal.get("replay") is None


def test_inspect_with_the_key_reads_the_records_it_could_not_without(encrypted, capsys):
    path, keys = encrypted
    assert main(["inspect", path, "--json", "--key-file", keys]) == 0
    wal = json.loads(capsys.readouterr().out)["wal"]
    in_use = [s for s in wal["segments"] if s["state"] != "blank"]
    assert in_use and all(s["state"] == "segment" for s in in_use)
    assert sum(s["records"] for s in in_use) > 2000 and wal["replay"]["clean"]
    assert "sealed_segments" not in wal
