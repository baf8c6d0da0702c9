"""The power-loss damage model of the crash simulator (DESIGN.md §5).

Pure functions over plain data, kept apart from SimFS's bookkeeping so the
model itself can be read in one place and tested directly:

* a file is a durable image plus its pending operations since the last
  fsync: ("write", offset, bytes), ("truncate", size, None) and
  ("extend", size, None) (preallocation);
* a directory operation is ("create", path, inode), ("remove", path, inode)
  or ("rename", src, dst, inode), pending until its directory is fsynced.

`"keep"` (process kill) applies every pending operation in order; `"drop"`
applies none; `"random"` shuffles a file's pending operations and gives each
write one outcome: kept, dropped, cut to a prefix, torn (a random proper
subset of its 512 B or 4 KiB sectors lands) or garbage (a random non-empty
subset of its 512 B sectors is filled with random bytes, the rest lands).
Damage never reaches outside a write's own byte range, so bytes that were
durable before the crash and not rewritten since stay intact in every mode.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["CrashReport", "OUTCOMES", "MODES", "SECTOR", "crash_image", "crash_namespace", "apply_op"]

MODES = ("keep", "drop", "random")
OUTCOMES = ("kept", "dropped", "cut", "torn", "garbage")
SECTOR = 512
_TEAR_GRANULES = (512, 4096)


@dataclass
class CrashReport:
    """What one `SimFS.crash()` did; `last_crash` holds the latest."""

    mode: str
    kept: int = 0
    dropped: int = 0
    cut: int = 0
    torn: int = 0
    garbage: int = 0
    meta_kept: int = 0  # truncate / preallocate operations
    meta_dropped: int = 0
    dir_kept: int = 0
    dir_dropped: int = 0
    lost_paths: list[str] = field(default_factory=list)  # visible before, gone after

    @property
    def writes(self) -> int:
        """Pending writes the crash decided on, whatever became of each."""
        return self.kept + self.dropped + self.cut + self.torn + self.garbage


def _resize(img: bytearray, n: int) -> None:
    if n < len(img):
        del img[n:]
    elif n > len(img):
        img.extend(bytes(n - len(img)))


def _put(img: bytearray, offset: int, data) -> None:
    end = offset + len(data)
    if end > len(img):
        _resize(img, end)
    img[offset:end] = data


def apply_op(img: bytearray, op: tuple) -> None:
    """Apply one pending operation completely (fsync and "keep" semantics)."""
    kind = op[0]
    if kind == "write":
        _put(img, op[1], op[2])
    elif kind == "truncate":
        _resize(img, op[1])
    elif kind == "extend":
        if op[1] > len(img):
            _resize(img, op[1])
    else:
        raise ValueError(f"unknown pending op {kind!r}")


def _sectors(offset: int, length: int, granule: int) -> list[tuple[int, int]]:
    """The write's byte range split at absolute `granule` boundaries, relative to `offset`."""
    out = []
    pos = offset
    end = offset + length
    while pos < end:
        nxt = min(end, (pos // granule + 1) * granule)
        out.append((pos - offset, nxt - offset))
        pos = nxt
    return out


def _proper_subset(rng: random.Random, n: int) -> list[bool]:
    """A random subset of n >= 2 items that is neither empty nor everything."""
    while True:
        picks = [rng.random() < 0.5 for _ in range(n)]
        if any(picks) and not all(picks):
            return picks


def _damaged_write(img: bytearray, op: tuple, rng: random.Random, outcomes: tuple, report: CrashReport) -> None:
    _kind, offset, data = op
    outcome = rng.choice(outcomes)
    n = len(data)
    if outcome == "cut":
        granule = rng.choice(_TEAR_GRANULES)
        cuts = [s for s, _e in _sectors(offset, n, granule)[1:]]  # interior boundaries
        if cuts:
            at = rng.choice(cuts)
        elif n > 1:
            at = rng.randrange(1, n)  # no boundary inside: a byte-level prefix
        else:
            outcome, at = "dropped", 0
        if at:
            _put(img, offset, data[:at])
    elif outcome == "torn":
        pieces = _sectors(offset, n, rng.choice(_TEAR_GRANULES))
        if len(pieces) < 2:
            # A single sector cannot tear; it lands whole or not at all.
            outcome = rng.choice(("kept", "dropped"))
        else:
            # The size update is metadata and lands; unwritten sectors keep
            # their old bytes (zeros past the old end of file).
            if offset + n > len(img):
                _resize(img, offset + n)
            for (s, e), lands in zip(pieces, _proper_subset(rng, len(pieces))):
                if lands:
                    img[offset + s : offset + e] = data[s:e]
    elif outcome == "garbage":
        pieces = _sectors(offset, n, SECTOR)
        junk = [rng.random() < 0.5 for _ in pieces]
        if not any(junk):
            junk[rng.randrange(len(pieces))] = True
        buf = bytearray(data)
        for (s, e), bad in zip(pieces, junk):
            if bad:
                buf[s:e] = rng.randbytes(e - s)
        _put(img, offset, buf)
    if outcome == "kept":
        _put(img, offset, data)
    setattr(report, outcome, getattr(report, outcome) + 1)


def crash_image(durable: bytes, pending: list, mode: str, rng: random.Random,
                report: CrashReport, outcomes: tuple = OUTCOMES) -> bytearray:
    """The bytes of one file after a crash with `pending` unsynced operations."""
    img = bytearray(durable)
    if mode == "drop":
        for op in pending:
            if op[0] == "write":
                report.dropped += 1
            else:
                report.meta_dropped += 1
        return img
    if mode == "keep":
        for op in pending:
            apply_op(img, op)
            if op[0] == "write":
                report.kept += 1
            else:
                report.meta_kept += 1
        return img
    order = list(pending)
    rng.shuffle(order)  # the device may persist unsynced writes in any order
    for op in order:
        if op[0] == "write":
            _damaged_write(img, op, rng, outcomes, report)
        elif rng.random() < 0.5:
            apply_op(img, op)
            report.meta_kept += 1
        else:
            report.meta_dropped += 1
    return img


def apply_dirop(ns: dict, op: tuple) -> None:
    """Apply one directory operation to a namespace dict path -> inode."""
    kind = op[0]
    if kind == "create":
        ns[op[1]] = op[2]
    elif kind == "remove":
        if ns.get(op[1]) is op[2]:
            del ns[op[1]]
    elif kind == "rename":
        _k, src, dst, inode = op
        # Renames are atomic journal entries: the new name points at the
        # inode even when the entry that created the old name was lost.
        if ns.get(src) is inode:
            del ns[src]
        ns[dst] = inode
    else:
        raise ValueError(f"unknown directory op {kind!r}")


def crash_namespace(durable_ns: dict, dirops: list, mode: str, rng: random.Random,
                    report: CrashReport) -> dict:
    """The namespace after a crash with `dirops` not yet made durable."""
    ns = dict(durable_ns)
    for op in dirops:
        keep = mode == "keep" or (mode == "random" and rng.random() < 0.5)
        if keep:
            apply_dirop(ns, op)
            report.dir_kept += 1
        else:
            report.dir_dropped += 1
    return ns
