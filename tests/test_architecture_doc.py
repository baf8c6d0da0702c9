"""docs/architecture.md and docs/native-api.md name what the code has: every
Protocol between the parts, every binding module, every C header cffi reads,
and one lock order, the same as the C header's."""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
CODE = ("pagestore", "wal", "checkpoint", "recovery", "throttling", "diskio")


def protocols() -> dict:
    """{Protocol class name: defining file} over the product's packages."""
    out = {}
    for package in CODE:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef) and any(
                        (isinstance(b, ast.Name) and b.id == "Protocol")
                        or (isinstance(b, ast.Attribute) and b.attr == "Protocol") for b in node.bases):
                    out[node.name] = path.relative_to(ROOT).as_posix()
    return out


def unnamed(names, doc_text: str) -> list:
    """The names the document does not mention as code (`Name`, or `Name`: ... in a table)."""
    return sorted(n for n in names if not re.search(rf"`{re.escape(n)}\b", doc_text))


def test_architecture_names_every_protocol_and_where_it_lives():
    found = protocols()
    assert {"PageSource", "PageSink", "WalHandle", "SegmentSource", "CommitGate", "RecoveringStore"} <= set(found)
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert unnamed(found, text) == []
    assert sorted(f for f in set(found.values()) if f"`{f}`" not in text) == []


def test_native_api_lists_every_binding_module_and_header():
    text = (ROOT / "docs" / "native-api.md").read_text()
    modules = sorted(p.name for p in (ROOT / "pagestore" / "_native").glob("*.py"))
    assert "gcommit.py" in modules
    assert unnamed(modules, text) == []
    build = ast.parse((ROOT / "pagestore" / "_build.py").read_text())
    headers = next(ast.literal_eval(n.value) for n in build.body if isinstance(n, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == "HEADERS" for t in n.targets))
    assert "ps_test.h" in headers
    assert unnamed(headers, text) == []


def test_the_lock_order_is_the_same_in_the_doc_and_the_header():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    header = (ROOT / "pagestore" / "csrc" / "ps_api.h").read_text()
    in_doc = re.search(r"^\s+(tree lock\s+->.*)$", doc, re.M).group(1)
    in_header = re.search(r"Lock order, everywhere \(C and Python\): (tree lock.*?lock)\.", header, re.S).group(1)
    words = lambda s: " ".join(s.replace("*", " ").split())  # noqa: E731
    assert words(in_doc) == words(in_header)


def test_the_checks_see_what_a_doc_leaves_out():
    assert unnamed(["CommitGate", "PageSink"], "| `PageSink`: `write_pages` |") == ["CommitGate"]
    assert unnamed(["gcommit.py"], "| `gcommit` |") == ["gcommit.py"]
