"""The import rules of DESIGN.md §2, checked on the source (AST), so a
forbidden import fails CI whether or not the code path runs."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
OURS = {"pagestore", "wal", "checkpoint", "recovery", "throttling", "diskio", "bench"}
ALLOWED = {
    "diskio": set(),
    "throttling": set(),
    "wal": {"diskio"},
    "checkpoint": {"wal", "diskio"},
    "recovery": {"checkpoint", "wal", "diskio"},
    "pagestore": {"checkpoint", "recovery", "wal", "throttling", "diskio"},
    "bench": {"pagestore"},
}


def imports_of(path: pathlib.Path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def sources(package):
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_lower_layers(package):
    bad = []
    for path in sources(package):
        for line, name in imports_of(path):
            top = name.split(".")[0]
            if top in OURS and top != package and top not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


def test_bench_uses_only_the_public_pagestore_api():
    bad = [f"{p.relative_to(ROOT)}:{line} imports {name}"
           for p in sources("bench") for line, name in imports_of(p)
           if name.startswith("pagestore.")]
    assert not bad, "\n".join(bad)


def test_only_bench_spark_imports_pyspark():
    bad = []
    for package in OURS:
        for path in sources(package):
            if (ROOT / "bench" / "spark") in path.parents:
                continue
            bad += [f"{path.relative_to(ROOT)}:{line}" for line, name in imports_of(path)
                    if name.split(".")[0] == "pyspark"]
    assert not bad, "\n".join(bad)


def test_only_the_binding_imports_the_c_extension():
    bad = []
    for package in OURS:
        for path in sources(package):
            if path == ROOT / "pagestore" / "_native.py":
                continue
            text = path.read_text()
            if "_core" in text and any(name.endswith("_core") or name == "pagestore._core"
                                       for _, name in imports_of(path)):
                bad.append(str(path.relative_to(ROOT)))
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ImportFrom) and node.level >= 1 and any(
                        a.name == "_core" for a in node.names) or (
                        isinstance(node, ast.ImportFrom) and node.level >= 1
                        and node.module == "_core"):
                    bad.append(str(path.relative_to(ROOT)))
    assert not bad, "\n".join(bad)


def test_the_rule_checker_catches_a_forbidden_import(tmp_path):
    # The checker itself must be able to fail.
    p = tmp_path / "m.py"
    p.write_text("import pagestore\nfrom bench import x\n")
    names = [n for _, n in imports_of(p)]
    assert names == ["pagestore", "bench"]
    assert "pagestore" not in ALLOWED["wal"]
