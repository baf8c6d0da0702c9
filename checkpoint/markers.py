"""The cp/ directory: what checkpoints it records, and marker I/O.

`scan` is the single reading of cp/ that both the checkpointer (which id
comes next, which pointer was last completed) and recovery (which row of
DESIGN.md §3's table applies) rely on, so the two can never disagree about
what "the last START" is.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from .format import (CP_DIR, END, MARKER_SIZE, START, Marker, MarkerCorrupt, marker_name,
                     pack_marker, parse_name, unpack_marker)

__all__ = ["CpDir", "cp_dir", "scan", "read_marker", "write_marker", "read_file"]


def cp_dir(store_dir: str) -> str:
    """The checkpoint directory (markers and recovery files) of a store."""
    return posixpath.join(store_dir, CP_DIR)


@dataclass
class CpDir:
    """What cp/ holds, by checkpoint id. Names only; nothing is read yet."""

    path: str
    starts: set[int] = field(default_factory=set)
    ends: set[int] = field(default_factory=set)
    recovery: dict[int, dict[int, str]] = field(default_factory=dict)  # id -> writer -> file name

    @property
    def last_start(self) -> int | None:
        """The id of the newest checkpoint with a START marker, or None."""
        return max(self.starts) if self.starts else None

    @property
    def last_complete(self) -> int | None:
        """Highest id having both markers: the checkpoint the page files match."""
        done = self.starts & self.ends
        return max(done) if done else None

    @property
    def interrupted(self) -> int | None:
        """The last START's id when it has no END (pages may be torn), else None."""
        last = self.last_start
        return last if last is not None and last not in self.ends else None

    @property
    def max_id(self) -> int:
        """Highest id any file uses, so a new checkpoint never reuses a name."""
        ids = self.starts | self.ends | set(self.recovery)
        return max(ids) if ids else 0

    def recovery_paths(self, checkpoint_id: int) -> dict[int, str]:
        """{writer: path} of the recovery files of `checkpoint_id`, by writer."""
        files = self.recovery.get(checkpoint_id, {})
        return {w: posixpath.join(self.path, n) for w, n in sorted(files.items())}


def scan(fs, path: str) -> CpDir:
    """Classify the names in cp/ (created if missing)."""
    fs.makedirs(path)
    state = CpDir(path)
    for name in fs.listdir(path):
        parsed = parse_name(name)
        if parsed is None:
            continue
        cid, kind, writer = parsed
        if kind == "START":
            state.starts.add(cid)
        elif kind == "END":
            state.ends.add(cid)
        else:
            state.recovery.setdefault(cid, {})[writer] = name
    return state


def read_file(fs, path: str) -> bytes:
    """The whole content of file `path`."""
    f = fs.open(path)
    try:
        return f.pread(f.size(), 0)
    finally:
        f.close()


def read_marker(fs, path: str, checkpoint_id: int, kind: int) -> Marker:
    """The marker of `kind` for `checkpoint_id` in directory `path`; MarkerCorrupt naming the file
    if it is not valid."""
    full = posixpath.join(path, marker_name(checkpoint_id, kind))
    data = read_file(fs, full)
    if len(data) != MARKER_SIZE:
        raise MarkerCorrupt(full, f"size {len(data)}, expected {MARKER_SIZE}")
    return unpack_marker(data, full, checkpoint_id, kind)


def write_marker(fs, path: str, marker: Marker) -> None:
    """Durable and atomic: temp file, fsync, rename, fsync cp/ (diskio.write_atomic).

    The START marker passes `checkpoint.start_tmp_written` between its durable
    temp file and the rename: a crash there leaves only a temp file, which
    `scan` does not recognise, so the checkpoint counts as never started.
    """
    full = posixpath.join(path, marker_name(marker.checkpoint_id, marker.kind))
    point = "checkpoint.start_tmp_written" if marker.kind == START else None
    fs.write_atomic(full, pack_marker(marker), crash_point=point)


def remove_quietly(fs, path: str) -> None:
    """Remove a file that is no longer needed; a crash may resurrect it harmlessly."""
    try:
        fs.remove(path)
    except FileNotFoundError:
        pass


def prune_markers(fs, cpdir: str, cid: int, history: int) -> None:
    """Keep the markers of the last `history` completed checkpoints (`cid` the one just completed).

    Removals are not made durable: a marker that reappears after a crash
    belongs to an older, completed checkpoint and changes nothing.
    """
    cp = scan(fs, cpdir)
    keep = sorted(cp.starts & cp.ends)[-history:]
    floor = keep[0] if keep else cid
    for name in fs.listdir(cpdir):
        parsed = parse_name(name)
        if parsed is not None and parsed[1] in ("START", "END") and parsed[0] < floor:
            remove_quietly(fs, f"{cpdir}/{name}")


__all__ += ["remove_quietly", "prune_markers", "START", "END"]
