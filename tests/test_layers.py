"""The import rules of DESIGN.md §2, checked on the source (AST), so a
forbidden import fails CI whether or not the code path runs.

The layers live in their own folders (wal/, checkpoint/, ...) but are imported
only as `pagestore.wal`, `pagestore.checkpoint`, ...: that is the name a wheel
installs them under, so a bare `import wal` would break in an application."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
OURS = {"pagestore", "wal", "checkpoint", "recovery", "throttling", "diskio", "bench"}
LAYERS = {"wal", "checkpoint", "recovery", "throttling", "diskio"}
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
            if node.module == "pagestore" and all(a.name in LAYERS for a in node.names):
                for alias in node.names:      # from pagestore import wal
                    yield node.lineno, f"pagestore.{alias.name}"
            else:
                yield node.lineno, node.module


def sources(package):
    return sorted((ROOT / package).rglob("*.py"))


def layer_of(name: str) -> str | None:
    """The package of ours a dotted import name belongs to, or None."""
    parts = name.split(".")
    if parts[0] == "pagestore":
        return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "pagestore"
    return parts[0] if parts[0] == "bench" else None


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_lower_layers(package):
    bad = []
    for path in sources(package):
        for line, name in imports_of(path):
            top = layer_of(name)
            if top is not None and top != package and top not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


def test_no_layer_is_imported_under_its_bare_folder_name():
    # `import wal` works only in a checkout; installed, the layer is pagestore.wal
    bad = [f"{p.relative_to(ROOT)}:{line} imports {name}"
           for package in sorted(OURS | {"tests"}) for p in sources(package)
           for line, name in imports_of(p) if name.split(".")[0] in LAYERS]
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
    p.write_text("import pagestore\nfrom bench import x\nfrom pagestore.checkpoint import y\n")
    names = [n for _, n in imports_of(p)]
    assert names == ["pagestore", "bench", "pagestore.checkpoint"]
    assert [layer_of(n) for n in names] == ["pagestore", "bench", "checkpoint"]
    assert "pagestore" not in ALLOWED["wal"] and "checkpoint" not in ALLOWED["wal"]
