"""`python -m pagestore verify|inspect|backup|compact` on a store it cannot read:
an exit status and one line naming the file and what failed, never a traceback."""

import os

import pytest

import pagestore
from pagestore.__main__ import main

COMMANDS = ("verify", "inspect", "backup", "compact")


def _argv(command: str, path: str, tmp_path) -> list:
    return [command, path] + ([str(tmp_path / "dest")] if command == "backup" else [])


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> str:
    """A store whose page file is a directory (the OS refuses to read it: EISDIR)."""
    path = str(tmp_path_factory.mktemp("broken") / "s")
    with pagestore.open(path) as db:
        db.put_many({b"k%d" % i: b"v" for i in range(100)})
    os.remove(os.path.join(path, "pages.dat"))
    os.mkdir(os.path.join(path, "pages.dat"))
    return path


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unreadable_page_file_is_named_with_the_os_error_not_a_traceback(command, broken, tmp_path, capsys):
    assert main(_argv(command, broken, tmp_path)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"python -m pagestore {command}: the page file {broken}/pages.dat: [Errno 21]")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_store_is_named(command, tmp_path, capsys):
    missing = str(tmp_path / "nowhere")
    assert main(_argv(command, missing, tmp_path)) == 2
    assert capsys.readouterr().err == f"python -m pagestore {command}: {missing}: no such directory\n"
    assert not os.path.exists(missing)
