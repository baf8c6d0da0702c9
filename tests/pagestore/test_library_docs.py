"""docs/api.md is generated from the docstrings (docs/gen_api.py): every public
name has one, and the page in the repository is what the generator writes now."""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_api", os.path.join(ROOT, "docs", "gen_api.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_public_name_has_a_docstring(gen):
    _text, missing = gen.render()
    assert missing == []


def test_docs_api_md_is_what_the_generator_writes(gen):
    text, _missing = gen.render()
    with open(os.path.join(ROOT, "docs", "api.md"), encoding="utf-8") as f:
        assert f.read() == text, "docs/api.md is stale: run python docs/gen_api.py"


def test_a_changed_docstring_makes_the_page_stale(gen, monkeypatch):
    from pagestore.cursor import Cursor
    before, _ = gen.render()
    monkeypatch.setattr(Cursor.first, "__doc__", "Go somewhere else.")
    after, _ = gen.render()
    assert after != before and "Go somewhere else." in after


def test_a_missing_docstring_is_reported_by_name(gen, monkeypatch):
    from pagestore.cursor import Cursor
    monkeypatch.setattr(Cursor.first, "__doc__", None)
    _text, missing = gen.render()
    assert "Cursor.first" in missing


def test_every_name_docs_api_md_documents_is_importable_from_pagestore():
    import re

    import pagestore
    with open(os.path.join(ROOT, "docs", "api.md"), encoding="utf-8") as f:
        text = f.read()
    names = {m.group(1) for m in re.finditer(r"^##+ `(?:pagestore\.)?(\w+)", text, re.M)}
    names = {n for n in names if n[0].isupper() or n in ("open", "run_transaction")}
    assert names >= {"Database", "Cursor", "State", "run_transaction"}
    assert sorted(n for n in names if not hasattr(pagestore, n)) == []
