"""The CLI parses every command, the session finds Java, and only bench/spark imports pyspark."""

import ast
import os
import subprocess
import sys

from bench.spark.__main__ import build_parser
from bench.spark.session import PROJECT_ROOT, find_java_home

SKIP = {".venv", ".git", "build", "__pycache__", "node_modules"}


def test_help_of_every_command():
    for cmd, option in (("generate", "--dist"), ("run", "--nodes"), ("report", "--baseline")):
        out = subprocess.run([sys.executable, "-m", "bench.spark", cmd, "--help"], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and option in out.stdout, out.stderr


def test_parser_reads_generate_options():
    a = build_parser().parse_args(["generate", "o", "--ops", "10", "--dist", "zipf", "--theta", "0.8",
                                   "--mix", "put=1", "--value-size", "uniform:5-9", "--tx-size", "3"])
    assert (a.ops, a.dist, a.theta, a.tx_size, a.value_size) == (10, "zipf", 0.8, 3, "uniform:5-9")


def test_java_home_has_a_java():
    assert os.access(os.path.join(find_java_home(), "bin", "java"), os.X_OK)


def _imports(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def test_only_bench_spark_imports_pyspark():
    spark_dir = os.path.join(PROJECT_ROOT, "bench", "spark")
    offenders, seen = [], 0
    for root, dirs, files in os.walk(PROJECT_ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP and not d.startswith(".")]
        for f in files:
            if not f.endswith(".py") or root.startswith(os.path.join(PROJECT_ROOT, "tests")):
                continue
            path = os.path.join(root, f)
            uses = any(m.split(".")[0] == "pyspark" for m in _imports(path))
            seen += uses
            if uses and not path.startswith(spark_dir + os.sep):
                offenders.append(os.path.relpath(path, PROJECT_ROOT))
    assert offenders == []
    assert seen >= 1                                   # the scan does see bench/spark's import
