"""The C core's declared surface: ps_api.h is the product API, each function
with its contract; ps_test.h holds what only tests call; the binding sets no
capability flags on functions.

Each checker is also run on a small counter-example, so it can fail.
"""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
CSRC = ROOT / "pagestore" / "csrc"
BINDING = ROOT / "pagestore" / "_native"

_BLOCKS = re.compile(r"(?:typedef\s+)?(?:struct|enum)\s*\w*\s*\{.*?\}\s*\w*\s*;", re.S)
_TOKENS = re.compile(r"/\*.*?\*/|\n[ \t]*\n|\w[\w \t\*]*?\b(ps_\w+)\s*\([^;]*\)\s*;", re.S)


def contracts(header_text: str) -> dict:
    """{function: the comment that governs its declaration, or None}. A comment
    governs the declarations that follow it up to the next blank line."""
    text = _BLOCKS.sub("", header_text)
    out, current = {}, None
    for m in _TOKENS.finditer(text):
        tok = m.group(0)
        if tok.startswith("/*"):
            current = tok
        elif m.group(1):
            out[m.group(1)] = current
        else:
            current = None
    return out


def declared(name: str) -> dict:
    return contracts((CSRC / name).read_text())


def product_headers() -> list:
    """The headers cffi binds for the library: every csrc/ps_*.h but the core's
    internal one and the tests' one."""
    return sorted(p.name for p in CSRC.glob("ps_*.h") if p.name not in ("ps_internal.h", "ps_test.h"))


def product_api() -> dict:
    out = {}
    for name in product_headers():
        out.update(declared(name))
    return out


def c_calls(paths) -> set:
    """Names of C functions called through `lib.` in these Python files."""
    names = set()
    for p in paths:
        names |= set(re.findall(r"\blib\.(ps_\w+)", p.read_text()))
    return names


def test_every_api_function_has_a_contract_naming_its_lock():
    assert "ps_api.h" in product_headers()
    api = product_api()
    assert len(api) > 50
    missing = sorted(f for f, comment in api.items() if comment is None or "LOCK" not in comment)
    assert not missing, f"product API functions without a LOCK contract: {missing}"


def test_every_test_only_function_has_a_contract_too():
    tests_only = declared("ps_test.h")
    assert tests_only
    assert not [f for f, c in tests_only.items() if c is None or "LOCK" not in c]


def test_the_lock_order_is_written_at_the_top_of_the_header():
    head = (CSRC / "ps_api.h").read_text()[:4000]
    assert "tree lock -> checkpointer condition" in head and "-> WAL segment lock" in head


def test_the_scan_batch_format_is_named_in_the_header():
    text = (CSRC / "ps_api.h").read_text()
    assert "Scan batch" in text and "PROTO 4" in text and "TUPLE2" in text


def test_the_product_binding_calls_exactly_the_api_and_nothing_test_only():
    api, tests_only = set(product_api()), set(declared("ps_test.h"))
    assert not api & tests_only
    product = c_calls(p for p in BINDING.glob("*.py") if p.name != "testing.py")
    assert not product & tests_only, "the library calls a test-only entry point"
    assert api - product == set(), f"declared for the library but never called by the binding: {sorted(api - product)}"
    assert c_calls([BINDING / "testing.py"]) <= tests_only | api


def test_the_contract_reader_sees_a_function_without_a_contract():
    text = ("/* LOCK none.  one. */\nint ps_a(void);\nint ps_b(int x);\n\n"
            "int ps_c(void);\n\n/* no lock word */\nvoid ps_d(void);\n")
    got = contracts(text)
    assert set(got) == {"ps_a", "ps_b", "ps_c", "ps_d"}
    assert "LOCK" in got["ps_a"] and got["ps_b"] == got["ps_a"]      # a group shares its comment
    assert got["ps_c"] is None and "LOCK" not in got["ps_d"]


def flags_on_functions(source: str) -> list:
    """`f.attr = ...` where f is a function defined in the same module."""
    tree = ast.parse(source)
    funcs = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return [f"{t.value.id}.{t.attr}" for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in funcs]


def test_the_binding_sets_no_capability_flags_on_functions():
    bad = [f"{p.name}: {flag}" for p in sorted(BINDING.glob("*.py")) for flag in flags_on_functions(p.read_text())]
    assert not bad, bad


def test_the_flag_checker_sees_a_flag_set_on_a_function():
    old = "def wal_scan(buf):\n    return buf\n\nwal_scan.reads_sealed = True\nx = 1\n"
    assert flags_on_functions(old) == ["wal_scan.reads_sealed"]


def test_the_fast_paths_are_explicit_objects_that_agree_with_the_capabilities():
    from pagestore import _native as N
    assert N.frame_recovery_records.codecs == N.CAPABILITIES.framed_codecs
    assert (N.CODEC_LZ4 in N.CAPABILITIES.framed_codecs) == N.lz4_available()
    assert N.CAPABILITIES.gcm == N.wal_seal_available()
    assert isinstance(N.wal_scan, N.WalScanner) and N.WalScanner.reads_sealed is True
    assert isinstance(N.frame_recovery_records, N.RecordFramer)
