"""The log as it stands on disk, read without changing it.

`Wal.recover` reads the log once, at open, and cuts it where it stops
(torn tail set aside, off-chain segments renamed). Recovery of a "wal"-mode
checkpoint (recovery/physical.py) must read the page records logged since
the checkpoint before that, *before* the replay cuts anything: `LogHistory`
does that read, through the same reader, touching no file.
"""

from __future__ import annotations

from .reader import RecoveryReport, scan
from .segments import Segments, SegmentSizeMismatch

__all__ = ["LogHistory", "SegmentSizeMismatch"]


class LogHistory:
    """Read-only view of the WAL in `dirpath` (segments of `segment_size`).

    `records(from_lsn)` yields every record (`wal.Record`: `lsn`, `type`,
    `payload`) from `from_lsn` until the first invalid one; `report` (a
    `RecoveryReport`) then names where and why the read stopped on damage.
    Raises `SegmentSizeMismatch` for segment files of another size.
    """

    def __init__(self, fs, dirpath: str, segment_size: int, *, cipher=None):
        self.fs, self.dir, self.segment_size, self.cipher = fs, dirpath, segment_size, cipher
        self.report: RecoveryReport | None = None

    def records(self, from_lsn: int):
        """The records from `from_lsn` on, in log order; nothing is cut or renamed."""
        segs = Segments(self.fs, self.dir, self.segment_size, cipher=self.cipher)
        try:
            segs.scan()
            self.report = RecoveryReport(from_lsn)
            yield from scan(segs, from_lsn, self.report)
        finally:
            segs.close_readers()

    def damage(self) -> tuple:
        """(file, offset, reason) of the first damage or gap the last read met,
        or (the WAL directory, None, None) when it met none."""
        hit = (self.report.damage + self.report.gaps) if self.report is not None else []
        if not hit:
            return self.dir, None, None
        return hit[0]["file"], hit[0]["offset"], hit[0]["reason"]
