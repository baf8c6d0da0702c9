"""The README's shape: its first two commands, Known limits one line each.

The figures and reasoning behind each limit live in docs/limits.md; the README
keeps a line a reader can scan.
"""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def section(text: str, title: str) -> str:
    """The body of the `## title` section of a Markdown text."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"no section {title!r}"
    return m.group(1)


def long_limits(text: str) -> list:
    """Items of Known limits that run over one line (a continuation line, or a
    nested list, means the item belongs in docs/limits.md)."""
    bad, item = [], None
    for line in section(text, "Known limits").splitlines():
        if line.startswith("* "):
            item = line
        elif line.strip() and item is not None:
            bad.append(item[:60])
            item = None
    return bad


def test_every_known_limit_is_one_line():
    text = (ROOT / "README.md").read_text()
    assert section(text, "Known limits").count("\n* ") >= 5
    assert long_limits(text) == []
    assert "docs/limits.md" in section(text, "Known limits")
    assert (ROOT / "docs" / "limits.md").is_file()


def test_the_check_sees_a_limit_of_two_lines():
    text = "## Known limits\n\n* one line\n* two\n  lines\n* one again\n\n## Next\n"
    assert long_limits(text) == ["* two"]


def test_the_readme_starts_with_its_two_commands():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```\n(.*?)```", text, re.S).group(1).splitlines()
    assert [line.split()[:2] for line in block[:2]] == [["make", "bench"], ["make", "test"]]
