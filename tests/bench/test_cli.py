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
