"""The Python examples of README.md and docs/*.md run as written.

A user adopting pagestore copies these first. Every ```python block runs as
a program of its own, in a fresh temporary directory, with the pagestore of
this tree imported the way an installed application imports it: only the
name `pagestore` (the layers as `pagestore.wal`, ...); the repository's
folders `wal/`, `bench/`, `tests/` ... are not importable.

A block that cannot run alone says so on its first line, where a reader
sees it too:

    # continues the example above
        runs together with the blocks before it in the same file, back to
        the nearest block without this mark (which must be runnable);
    # not run: <why>
        signatures or a sketch with names the reader fills in; only its
        import lines run, so the names it imports exist.

Any other block must run and exit 0. `python tests/test_doc_examples.py`
lists every block with what the test does with it (and why, for those not
run). The script of a block keeps the block's line numbers of the document,
so a traceback's line is the document's line.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONTINUES = "# continues the example above"
NOT_RUN = re.compile(r"# not run: (\S.*)")
FENCE = re.compile(r"^```python\s*$")


@dataclasses.dataclass
class Block:
    """One ```python block: where it is, its lines, and its mark."""

    doc: str            # path relative to ROOT
    line: int           # 1-based line of the block's first code line
    lines: list
    continues: bool
    not_run: str | None  # the reason given, or None

    @property
    def where(self) -> str:
        """`doc:line` of the opening fence, as an editor jumps to it."""
        return f"{self.doc}:{self.line - 1}"


def documents() -> list:
    """README.md and every docs/*.md, in a fixed order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks_of(markdown: str, doc: str) -> list:
    """The ```python blocks of the Markdown text of `doc` (an unclosed one raises)."""
    text = markdown.splitlines()
    out, i = [], 0
    while i < len(text):
        if FENCE.match(text[i]):
            j = i + 1
            while j < len(text) and text[j].strip() != "```":
                j += 1
            if j == len(text):
                raise AssertionError(f"{doc}:{i + 1}: ```python block never closed")
            body = text[i + 1:j]
            first = body[0].strip() if body else ""
            m = NOT_RUN.match(first)
            out.append(Block(doc, i + 2, body, first == CONTINUES,
                             m.group(1) if m else None))
            i = j
        i += 1
    return out


def all_blocks() -> list:
    """Every ```python block of the documents."""
    return [b for path in documents() for b in blocks_of(path.read_text(), str(path.relative_to(ROOT)))]


def chains(blocks: list) -> list:
    """The programs to run: each unmarked block with the continuation blocks
    after it. A continuation with no runnable block before it is an error."""
    out, last = [], None
    for b in blocks:
        if b.continues:
            if last is None or last.doc != b.doc or last.not_run is not None:
                raise AssertionError(f"{b.where}: marked '{CONTINUES}' but the block before it "
                                     "in the same file is not run")
            out[-1].append(b)
        elif b.not_run is None:
            out.append([b])
        last = b
    return out


def script(chain: list) -> str:
    """The chain's code at its document line numbers (blank lines between)."""
    lines = []
    for b in chain:
        lines += [""] * (b.line - 1 - len(lines))
        lines += b.lines
    return "\n".join(lines) + "\n"


def import_lines(block: Block) -> list:
    """The block's top-level `import` / `from ... import` statements (one
    in parentheses over several lines included)."""
    out, open_parens = [], 0
    for ln in block.lines:
        if open_parens or re.match(r"(import|from)\s+\w", ln):
            out.append(ln)
            open_parens += ln.count("(") - ln.count(")")
    return out


def run(code: str, name: str, tmp_path: pathlib.Path) -> subprocess.CompletedProcess:
    """Run `code` as a user's program `name` in a fresh directory, with only
    `pagestore` (this tree's) importable beyond the installed packages."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "pagestore").symlink_to(ROOT / "pagestore", target_is_directory=True)
    prog = tmp_path / "prog"
    prog.mkdir()
    (prog / name).write_text(code)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PAGESTORE_CRASH_POINT")}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, str(prog / name)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


# A misplaced mark fails a test below, not the collection of the whole suite.
try:
    BLOCKS = all_blocks()
    CHAINS, MARK_ERROR = chains(BLOCKS), None
except AssertionError as e:
    BLOCKS, CHAINS, MARK_ERROR = [], [], str(e)
NOT_RUN_BLOCKS = [b for b in BLOCKS if b.not_run is not None]


def test_every_block_is_closed_and_every_continuation_follows_a_block_that_runs():
    assert MARK_ERROR is None, MARK_ERROR


def test_the_documents_hold_python_examples_and_the_readme_one_is_run():
    assert len(BLOCKS) >= 5
    assert any(c[0].doc == "README.md" for c in CHAINS)


@pytest.mark.parametrize("chain", CHAINS, ids=[c[0].where + "".join(f"+{b.line - 1}" for b in c[1:])
                                                for c in CHAINS])
def test_an_unmarked_example_runs_as_written(chain, tmp_path):
    name = pathlib.Path(chain[0].doc).name + ".py"
    out = run(script(chain), name, tmp_path)
    where = ", ".join(b.where for b in chain)
    assert out.returncode == 0, (
        f"the example at {where} exits {out.returncode} (traceback lines are the document's):\n"
        f"{out.stderr[-3000:]}")


# The ids list each block not run with its reason (`pytest -v` shows them).
@pytest.mark.parametrize("block", NOT_RUN_BLOCKS, ids=[f"{b.where} not run: {b.not_run}" for b in NOT_RUN_BLOCKS])
def test_a_block_not_run_says_why_and_its_imports_work(block, tmp_path):
    assert block.not_run.strip(), f"{block.where}: '# not run:' without a reason"
    code = "\n".join(import_lines(block)) + "\n"
    out = run(code, pathlib.Path(block.doc).name + ".py", tmp_path)
    assert out.returncode == 0, f"the imports of {block.where} fail:\n{out.stderr[-3000:]}"


def test_the_marks_are_read_as_documented():
    md = ("# t\n```python\nx = 1\n```\ntext\n```python\n# continues the example above\n"
          "assert x == 1\n```\n```python\n# not run: signatures\ndef f(a) -> int\n```\n"
          "```python\nprint(1)\n```\n")
    blocks = blocks_of(md, 'x.md')
    assert [(b.line, b.continues, b.not_run) for b in blocks] == [
        (3, False, None), (7, True, None), (11, False, "signatures"), (15, False, None)]
    assert [[b.line for b in c] for c in chains(blocks)] == [[3, 7], [15]]
    assert script(chains(blocks)[0]).splitlines()[2:8] == ["x = 1", "", "", "", "# continues the example above", "assert x == 1"]


def test_the_imports_of_a_block_not_run_are_read_whole():
    block = blocks_of("```python\n# not run: x\nfrom a import (b,\n    c)\nf(b) -> c\nimport d\n```\n", "x.md")[0]
    assert import_lines(block) == ["from a import (b,", "    c)", "import d"]


def test_a_continuation_after_a_block_not_run_is_refused():
    md = "```python\n# not run: a sketch\nf(x)\n```\n```python\n# continues the example above\n```\n"
    with pytest.raises(AssertionError, match="is not run"):
        chains(blocks_of(md, 'x.md'))


def test_an_example_that_raises_fails_with_its_document_line(tmp_path):
    chain = chains(blocks_of("# doc\n\n```python\nimport pagestore\nraise ValueError('x')\n```\n", "doc.md"))[0]
    out = run(script(chain), "doc.md.py", tmp_path)
    assert out.returncode != 0 and 'doc.md.py", line 5' in out.stderr


def test_the_repository_layer_folders_are_not_importable_from_an_example(tmp_path):
    out = run("import pagestore.wal\nimport wal\n", "doc.md.py", tmp_path)
    assert out.returncode != 0 and "No module named 'wal'" in out.stderr, out.stderr


if __name__ == "__main__":
    # The list of every block and what the test does with it.
    runs = {id(b): c[0].where for c in CHAINS for b in c}
    for b in BLOCKS:
        if b.not_run is not None:
            how = f"not run: {b.not_run} (its imports run)"
        elif b.continues:
            how = f"run with {runs[id(b)]}"
        else:
            how = "run"
        print(f"{b.where:32} {how}")
