"""What `python -m pagestore backup|compact` print: one figure a line, as
docs/tools.md shows them (durations to the hundredth of a second in text;
`--json` keeps every digit)."""

import json
import re

import pagestore
from pagestore.__main__ import main


def _store(path: str) -> None:
    with pagestore.open(path, wal_segment_size=1 << 20) as db:
        db.put_many({b"k%05d" % i: b"v" * 100 for i in range(3000)})
        for i in range(0, 3000, 2):
            del db[b"k%05d" % i]


def test_backup_and_compact_print_their_seconds_to_the_hundredth(tmp_path, capsys):
    src = str(tmp_path / "s")
    _store(src)
    assert main(["backup", src, str(tmp_path / "copy")]) == 0
    backup = _figures(capsys.readouterr().out)
    assert backup["keys"] == "1500" and backup["path"] == str(tmp_path / "copy")
    assert re.fullmatch(r"\d+\.\d\d", backup["seconds"]), backup["seconds"]
    assert main(["compact", src]) == 0
    compact = _figures(capsys.readouterr().out)
    for name in ("seconds", "paused_seconds"):
        assert re.fullmatch(r"\d+\.\d\d", compact[name]), (name, compact[name])
    assert int(compact["disk_bytes_after"]) < int(compact["disk_bytes_before"])


def _figures(out: str) -> dict:
    return dict(line.split(None, 1) for line in out.splitlines())


def test_backup_json_keeps_the_figures_unrounded(tmp_path, capsys):
    src = str(tmp_path / "s")
    _store(src)
    assert main(["backup", src, str(tmp_path / "copy"), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["keys"] == 1500 and isinstance(rep["seconds"], float)
