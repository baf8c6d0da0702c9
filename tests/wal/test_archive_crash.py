"""Crash safety of compaction: a power loss at every I/O of a compaction run never loses or
duplicates an archived record, and the next run completes the work."""

from __future__ import annotations

import os
import sys

import pytest

from pagestore.diskio import SimFS, SimulatedCrash
from pagestore.wal import iter_archive
from pagestore.wal.compact import compact, list_archive

sys.path.insert(0, os.path.dirname(__file__))
from test_archive_kit import SEG, as_tuples, kinds, make_archive  # noqa: E402

A = "/arch"
BUDGET = 3 * SEG // 2          # about three segments of logical records per round


@pytest.fixture(scope="module")
def base():
    fs = SimFS()
    log = make_archive(fs, A, 9)
    expected = log.logical(hi=9 * SEG)
    snap = fs.snapshot()
    probe = snap.clone()
    before = probe.io_count
    st = compact(A, BUDGET, fs=probe)
    assert st["rounds"] >= 3
    return snap, expected, probe.io_count - before


def read(fs, expected):
    report = {}
    got = as_tuples(iter_archive(fs, A, 0, report=report))
    assert got == expected, f"{len(got)} records read, {len(expected)} archived; stop {report['stop']}"
    assert report["stop"] == "end"


@pytest.mark.parametrize("mode", ["random", "drop", "keep"])
def test_a_crash_at_every_io_of_a_compaction_keeps_every_record_once(base, mode):
    snap, expected, nops = base
    assert nops > 20
    for n in range(1, nops + 1):
        fs = snap.clone()
        fs.arm_io(n)
        with pytest.raises(SimulatedCrash):
            compact(A, BUDGET, fs=fs)
        fs.crash(n, mode)
        read(fs, expected)                              # what survived reads the same records
        st = compact(A, BUDGET, fs=fs)                  # the next run finishes the work
        read(fs, expected)
        assert set(kinds(fs, A)) == {"walc"}, (n, kinds(fs, A), st)
        assert not [x for x in fs.listdir(A) if x.endswith(".tmp")]


def test_a_crash_after_publishing_leaves_both_copies_and_the_reader_takes_each_record_once(base):
    snap, expected, _n = base
    fs = snap.clone()
    fs.arm_io(_first_remove(snap) + 1)                   # crash at the first source removal
    with pytest.raises(SimulatedCrash):
        compact(A, BUDGET, fs=fs)
    fs.crash(1, "keep")
    ks = kinds(fs, A)
    assert "walc" in ks and "wal" in ks
    first, last, _k, _p = next(p for p in list_archive(fs, A) if p[2] == "walc")
    assert {p[0] for p in list_archive(fs, A) if p[2] == "wal"} >= set(range(first, last + 1))
    read(fs, expected)


def _first_remove(snap) -> int:
    """The number of I/O operations a compaction does before it removes its first source."""
    fs = snap.clone()
    before = fs.io_count

    def remove(path):
        raise _Found(fs.io_count - before)

    fs.remove = remove
    with pytest.raises(_Found) as found:
        compact(A, BUDGET, fs=fs)
    return found.value.args[0]


class _Found(Exception):
    pass
