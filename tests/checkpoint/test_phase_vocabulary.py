"""The checkpoint's phases are named twice, once per side of a layer rule:
`pagestore.checkpoint.pool.PHASES` (the checkpointer reports them) and
`pagestore.throttling.signals.PHASES` (the policies read them). Neither layer
may import the other (DESIGN.md §2), so this test is what keeps them one
vocabulary: a phase renamed, added or reordered on one side only fails here,
before a policy silently stops recognising the phase it throttles in."""

import ast
import pathlib

from pagestore.checkpoint import pool
from pagestore.throttling import signals

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_checkpointer_and_throttle_name_the_same_phases_in_the_same_order():
    assert pool.PHASES == signals.PHASES


def test_every_phase_the_checkpointer_enters_is_in_the_vocabulary():
    # Every set_phase("...", only_from="...") in the checkpoint package names
    # a phase of the shared tuple (set_phase raises only when it leaves one).
    used = set()
    for path in (ROOT / "checkpoint").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "set_phase":
                used |= {a.value for a in [*node.args, *(k.value for k in node.keywords)]
                         if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    assert used, "no set_phase(...) call found: the check would pass vacuously"
    assert used <= set(signals.PHASES), used - set(signals.PHASES)


def test_filling_phases_are_phases():
    assert signals.FILLING_PHASES <= set(signals.PHASES)
