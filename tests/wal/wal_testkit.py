"""Shared helpers of the WAL tests: a Wal driven by the Python StreamWriter.

`Harness` plays the part of the C core: it owns a StreamWriter attached to
the segment `Wal.start` returns and reports the writer's end LSN to the Wal,
exactly the way `pagestore` wires the C encoder. With a cipher it plays a
core without libcrypto: the writer reserves each record's tag and the Wal
seals the records in Python (sealer="python", wal/recseal.py).
"""

from __future__ import annotations

import struct
import warnings

from crc32c import crc32c

from pagestore.wal import StreamWriter, Wal
from pagestore.wal.format import BLOCK, MARKED, decode_block_header

SMALL = 64 * 1024  # 16 blocks: small segments make switches and reuse cheap to reach


class Harness:
    def __init__(self, fs, dirpath: str = "/db/wal", *, mode: str = "fsync", segment_size: int = SMALL, **kw):
        self.fs = fs
        self.segment_size = segment_size
        self.writer = None
        if kw.get("cipher") is not None:
            kw.setdefault("sealer", "python")       # the StreamWriter cannot seal: the Wal does
        self.wal = Wal(fs, dirpath, mode=mode, segment_size=segment_size, end_lsn=self.end_lsn, **kw)

    def end_lsn(self) -> int:
        return self.writer.end_lsn

    def recover(self, from_lsn: int = 0, *, quiet: bool = True):
        with warnings.catch_warnings():
            if quiet:
                warnings.simplefilter("ignore")
            return list(self.wal.recover(from_lsn))

    def start(self):
        report = self.wal.recovery_report
        stop = report.stop_lsn if report is not None else 0
        buf, size, seq, off, prev, write_header = self.wal.start(stop)
        assert size == self.segment_size and write_header is False
        self.writer = StreamWriter(size, buf, seq, off, prev, self.wal.segment_for, write_header=False,
                                   reserve_tags=self.wal.sealer == "python")
        return self

    def put(self, key: bytes, value: bytes, txid: int = 0, commit: bool = True) -> int:
        _lsn, end = self.writer.put(key, value, txid)
        if commit:
            self.wal.commit(end)
        return end


def open_fresh(fs, **kw) -> Harness:
    """A new WAL, recovered (empty) and started."""
    h = Harness(fs, **kw)
    h.recover(0)
    return h.start()


def reopen(fs, **kw) -> tuple[Harness, list]:
    """Recover an existing WAL from LSN 0 and start writing after it: (harness, records)."""
    h = Harness(fs, **kw)
    recs = h.recover(0)
    h.start()
    return h, recs


def kv(records) -> list:
    return [(r.key, r.value) for r in records]


def unmark(fs, path: str) -> None:
    """Rewrite the segment file `path` as versions before the written mark wrote it:
    flag bit 4 off, every valid block header's mark field 0 (crcs made to match)."""
    f = fs.open(path)
    data = bytearray(f.pread(f.size(), 0))
    flags = struct.unpack_from("<H", data, 10)[0]
    struct.pack_into("<H", data, 10, flags & ~MARKED)
    struct.pack_into("<I", data, 40, crc32c(bytes(data[:40])))
    for nb in range(BLOCK, len(data) - BLOCK + 1, BLOCK):
        if decode_block_header(data, nb) is not None:
            struct.pack_into("<I", data, nb + 16, 0)
            struct.pack_into("<I", data, nb + 20, crc32c(bytes(data[nb:nb + 20])))
    f.pwrite(bytes(data), 0)
    f.fsync()
    f.close()
