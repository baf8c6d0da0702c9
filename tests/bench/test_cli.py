"""The command line: help works, bad options exit 2 with a message."""

import subprocess
import sys

import pytest

from bench.cli import main

BAD = [
    (["run", "--wal-mode", "paranoid"], "invalid choice"),
    (["run", "--store", "mongodb"], "invalid choice"),
    (["run", "--memory-size", "lots"], "not a size"),
    (["run", "--threads", "0"], "positive integer"),
    (["run", "--duration", "-3"], "must be positive"),
    (["run", "--warmup", "soon"], ">= 0"),
    (["run", "--mix", "put=1,teleport=2"], "unknown op 'teleport'"),
    (["run", "--key-size", "4"], "key_size must be at least 8"),
    (["matrix", "--compression", "gzip"], "'gzip' not in"),
    (["matrix", "--store", "lmdb"], "matrix varies pagestore options"),
    (["quick", "--skip", "everything"], "not in"),
    (["run", "--value-compressibility", "1"], "must be a number in [0, 1)"),
    (["quick", "--value-compressibility", "-0.1"], "must be a number in [0, 1)"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
]


@pytest.mark.parametrize("argv,message", BAD)
def test_bad_options_exit_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_help_lists_the_subcommands():
    out = subprocess.run([sys.executable, "-m", "bench", "--help"], capture_output=True, text=True,
                         cwd=__file__.rsplit("/tests/", 1)[0])
    assert out.returncode == 0
    for cmd in ("quick", "peers", "run", "matrix"):
        assert cmd in out.stdout


def test_run_on_a_peer_writes_results(tmp_path, capsys):
    assert main(["run", "--store", "lmdb_writemap", "--duration", "1", "--warmup", "0",
                 "--results", str(tmp_path), "--json"]) == 0
    assert '"store": "lmdb_writemap"' in capsys.readouterr().out
    assert (tmp_path / "summary").is_dir() and (tmp_path / "timeseries").is_dir()


def _imports(module_path: str) -> set:
    import ast
    tree = ast.parse(open(module_path).read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_commands_do_not_import_the_cli_back():
    root = __file__.rsplit("/tests/", 1)[0]
    assert "bench.commands" in _imports(f"{root}/bench/cli.py")
    assert not {m for m in _imports(f"{root}/bench/commands.py") if m == "bench.cli"}


def test_no_python_program_is_run_from_a_string_literal():
    root = __file__.rsplit("/tests/", 1)[0]
    out = subprocess.run(["grep", "-rnE", r"executable, \"-c\"|'-c',|\"-c\", ", "bench/", "--include=*.py"],
                         capture_output=True, text=True, cwd=root)
    assert out.stdout == ""


def test_help_names_every_peer_comparison():
    root = __file__.rsplit("/tests/", 1)[0]
    top = subprocess.run([sys.executable, "-m", "bench", "--help"], capture_output=True, text=True, cwd=root)
    peers = subprocess.run([sys.executable, "-m", "bench", "peers", "--help"], capture_output=True, text=True,
                           cwd=root)
    for what in ("durable", "txn"):
        assert what in top.stdout
        assert what in peers.stdout


def test_peers_txn_prints_the_ratios_and_keeps_them(tmp_path, capsys):
    import json
    assert main(["peers", "--what", "txn", "--n", "2000", "--rounds", "1", "--quiet",
                 "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "full scan through a snapshot / LMDB cursor" in out
    assert "transaction of 10 puts / LMDB write txn of 10" in out
    kept = json.loads((tmp_path / "peers.json").read_text())["txn"]
    assert len(kept["rounds"]) == 1 and set(kept["ratios"]) == {
        "full scan through a snapshot / LMDB cursor", "transaction of 10 puts / LMDB write txn of 10"}
