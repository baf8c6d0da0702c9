"""Helpers of the archive tests: archived segments written by the Python StreamWriter.

`make_archive` writes a log of mixed logical and physical records with
`StreamWriter` (the twin of the C encoder), copies its full segments into an
archive directory as `seg-<seq>.wal` (durable: fsync and directory fsync) and
returns the logical records they hold, which the archive must give back.
"""

from __future__ import annotations

import random
import struct

from pagestore.wal.compact import KEPT, list_archive
from pagestore.wal.format import BLOCK, CHECKPOINT, PAGE_DELTA, PAGE_SNAPSHOT, StreamWriter, encode_record, \
    payload_checkpoint, payload_commit, payload_delete, payload_put, payload_rollback
from pagestore.wal.format import COMMIT, DELETE, PUT, ROLLBACK
from pagestore.diskio import layout

SEG = 64 * 1024


class Log:
    """A log held in memory as segment buffers (seq -> bytearray), written by a StreamWriter."""

    def __init__(self, segment_size: int = SEG):
        self.S = segment_size
        self.segs = {0: bytearray(segment_size)}
        self.w = StreamWriter(segment_size, self.segs[0], 0, BLOCK, 0, self._next)
        self.records = []          # (lsn, end_lsn, type, raw) of everything written
        self.txid = 0

    def _next(self, seq: int):
        self.segs[seq] = bytearray(self.S)
        return self.segs[seq]

    def append(self, rtype: int, payload: bytes) -> None:
        lsn, end = self.w.append(rtype, payload)
        self.records.append((lsn, end, rtype, encode_record(rtype, lsn, payload)))

    def random_ops(self, rng: random.Random, until_seq: int, value_size: int = 60) -> None:
        """Append a random mix until the writer has entered segment `until_seq`."""
        i = 0
        while self.w.seq < until_seq:
            i += 1
            x = rng.random()
            key = b"key-%05d" % rng.randrange(2000)
            value = (b"value-%d-" % i) * (value_size // 12 + 1)
            if x < 0.45:
                self.append(PUT, payload_put(key, value[:value_size]))
            elif x < 0.55:
                self.append(DELETE, payload_delete(key))
            elif x < 0.65:
                self.txid += 1
                n = rng.randrange(1, 4)
                for j in range(n):
                    self.append(PUT, payload_put(key + b"-%d" % j, value[:value_size], self.txid))
                self.append(COMMIT, payload_commit(self.txid, n))
            elif x < 0.68:
                self.txid += 1
                self.append(PUT, payload_put(key, b"rolled back", self.txid))
                self.append(ROLLBACK, payload_rollback(self.txid))
            elif x < 0.88:
                ranges = b"".join(struct.pack("<HH", o, 8) + rng.randbytes(8) for o in (64, 512))
                self.append(PAGE_DELTA, struct.pack("<QH", rng.randrange(100), 2) + ranges)
            elif x < 0.97:
                image = rng.randbytes(1024)
                self.append(PAGE_SNAPSHOT, struct.pack("<QBI", rng.randrange(100), 0, len(image)) + image)
            else:
                self.append(CHECKPOINT, payload_checkpoint(i, b"cp"))

    def logical(self, lo: int = 0, hi: int | None = None):
        return [r for r in self.records if r[2] in KEPT and r[0] >= lo and (hi is None or r[0] < hi)]


def write_file(fs, path: str, data: bytes) -> None:
    f = fs.open(path, create=True, truncate=True)
    try:
        f.pwrite(bytes(data), 0)
        f.fsync()
    finally:
        f.close()


def make_archive(fs, archive_dir: str, nseg: int, *, seed: int = 1, segment_size: int = SEG,
                 value_size: int = 60, skip=()):
    """Archive segments 0..nseg-1 of a random log (except `skip`); returns the Log."""
    log = Log(segment_size)
    log.random_ops(random.Random(seed), nseg, value_size)
    fs.makedirs(archive_dir)
    for seq in range(nseg):
        if seq not in skip:
            write_file(fs, f"{archive_dir}/{layout.archive_name(seq)}", log.segs[seq])
    fs.fsync_dir(archive_dir)
    return log


def as_tuples(records):
    return [(r.lsn, r.end_lsn, r.type, bytes(r.raw)) for r in records]


def kinds(fs, archive_dir: str):
    return [k for _f, _l, k, _p in list_archive(fs, archive_dir)]
