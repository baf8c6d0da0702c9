"""The WAL archive: copies of trimmed segments, bounded in total size.

Option `wal_archive` (docs/options.md) names a directory that receives each
segment a checkpoint trims, before its slot is reused: `seg-<seq, 16
digits>.wal`, the slot file's bytes as they were. The archive is bounded by
`archive_size`; the oldest copies (lowest seq) are removed first, but the
newest copy is always kept. Copies are durable (file fsync, then directory
fsync) before the slot is handed back for reuse. The archive is a record for
inspection and point-in-time tools; recovery never reads it.
"""

from __future__ import annotations

import posixpath
import re

__all__ = ["Archive"]

_NAME = re.compile(r"^seg-(\d{16})\.wal$")
_CHUNK = 1 << 20


class Archive:
    def __init__(self, fs, dirpath: str, max_bytes: int):
        self.fs = fs
        self.dir = dirpath
        self.max_bytes = max_bytes
        if not fs.exists(dirpath):
            fs.makedirs(dirpath)
        self.archived = 0

    def path_of(self, seq: int) -> str:
        return posixpath.join(self.dir, f"seg-{seq:016d}.wal")

    def add(self, seq: int, src_path: str) -> str:
        """Copy the slot file `src_path`, which holds segment `seq`, into the archive."""
        fs, dst = self.fs, self.path_of(seq)
        src = fs.open(src_path)
        out = fs.open(dst + ".tmp", create=True, truncate=True)
        try:
            size = src.size()
            for at in range(0, size, _CHUNK):
                out.pwrite(src.pread(min(_CHUNK, size - at), at), at)
            out.fsync()
        finally:
            out.close()
            src.close()
        fs.rename(dst + ".tmp", dst)
        fs.fsync_dir(self.dir)
        self.archived += 1
        self._bound()
        return dst

    def _bound(self) -> None:
        fs = self.fs
        held = sorted((int(m.group(1)), posixpath.join(self.dir, n))
                      for n in fs.listdir(self.dir) if (m := _NAME.match(n)))
        sizes = [fs.size(p) for _s, p in held]
        total = sum(sizes)
        removed = False
        for (_seq, path), size in zip(held[:-1], sizes[:-1]):
            if total <= self.max_bytes:
                break
            fs.remove(path)
            total -= size
            removed = True
        if removed:
            fs.fsync_dir(self.dir)
