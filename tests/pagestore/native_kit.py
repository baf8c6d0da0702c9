"""Helpers shared by the native-core tests."""

import struct

from crc32c import crc32c

from pagestore import _native

BLOCK, BHDR = 4096, 24


def scan(core, lo=None, hi=None, reverse=False):
    """Every item in [lo, hi), paging through scan_batch like the facade."""
    out, lo_incl, hi_incl = [], True, False
    while True:
        items = core.scan_batch(lo, lo_incl, hi, hi_incl, reverse, 1 << 20)
        if not items:
            return out
        out += items
        if reverse:
            hi, hi_incl = items[-1][0], False
        else:
            lo, lo_incl = items[-1][0], False


PS = 4096


class Disk:
    """The read_page callback over page images held in a dict."""

    def __init__(self, pages=None):
        self.pages = dict(pages or {})

    def read_page(self, page_id, buf):
        buf[:] = self.pages[page_id]


def copy_all(core, ids):
    """{page id: its checkpoint image} of `ids`, through ckpt_copy."""
    out = bytearray(len(ids) * PS)
    core.ckpt_copy(ids, out)
    return {pid: bytes(out[i * PS:(i + 1) * PS]) for i, pid in enumerate(ids)}


def clean_core(n, seed, memory_pages, buffer_pages):
    """A core (no WAL) of `n` random 16-byte keys with 100-byte values, all
    resident and checkpointed clean, whose Disk holds their page images (so
    it can read back what a rollback drops): (core, keys, disk)."""
    import random

    from pagestore._native.batches import pack_ops
    disk = Disk()
    core = _native.Core(PS, memory_pages * PS, buffer_pages * PS, 0, read_page=disk.read_page)
    core.wal_disable()
    core.format_new()
    rnd = random.Random(seed)
    keys = [rnd.randbytes(16) for _ in range(n)]
    for i in range(0, n, 500):
        core.apply_batch(pack_ops((1, k, b"v" * 100) for k in keys[i:i + 500]))
    ids, _ = core.ckpt_begin(1)
    disk.pages.update(copy_all(core, ids))
    core.ckpt_release(ids)
    core.ckpt_end()
    assert core.signals.dirty_pages == 0
    return core, keys, disk


def load_tree(pages, memory=1024 * PS):
    """A fresh core over the given disk images: the checkpoint's consistent state."""
    c = _native.Core(PS, memory, 64 * PS, 0, read_page=Disk(pages).read_page)
    c.wal_disable()
    c.open_existing(0)
    return c


SEGMENT = 1 << 20


class Segments:
    """The wal_segment callback: a fresh bytearray per sequence number."""

    def __init__(self, limit=None):
        self.bufs = {}
        self.limit = limit

    def __call__(self, seq):
        if self.limit is not None and len(self.bufs) >= self.limit:
            return None
        self.bufs[seq] = bytearray(b"\xAB" * SEGMENT)     # garbage: the writer must not rely on zeros
        return self.bufs[seq]


def wal_core(segs, key=None, key_id=1, **kw):
    """A new 16 MiB core whose WAL starts in segs(0), sealing its records with `key` if given."""
    c = _native.Core(4096, 4096 * 4096, 1024 * 4096, 0, wal_segment=segs, **kw)
    c.format_new()
    if key is not None:
        c.wal_set_key(key, key_id)
    c.wal_attach(segs(0), SEGMENT, 0, BLOCK, 0, True)
    return c


def logical(buf, pos, n):
    """n record bytes from segment offset pos, skipping block headers; (bytes, end)."""
    out = bytearray()
    while len(out) < n:
        if pos % BLOCK == 0:
            pos += BHDR
        k = min(n - len(out), BLOCK - pos % BLOCK)
        out += buf[pos:pos + k]
        pos += k
    return bytes(out), pos


def wal_records(buf, seq, size=SEGMENT):
    """(offset, stored bytes) of the records of segment `seq`'s buffer, read by the
    format document alone; they end at the END trailer, or where a record's length,
    lsn or crc does not hold (the rest of a segment is garbage or zeros)."""
    recs, pos = [], BLOCK
    room = (size // BLOCK - 1) * (BLOCK - BHDR)          # record bytes a segment holds
    while pos < size:
        start = pos + BHDR if pos % BLOCK == 0 else pos
        if size - start < 17:
            break
        crc, length, lsn, typ = struct.unpack_from("<IIQB", logical(buf, pos, 17)[0])
        if typ == 8 or length < 17 or lsn != seq * size + start or length > room:
            break
        wire, end = logical(buf, pos, length)
        if end > size or crc32c(wire[4:]) != crc:
            break
        recs.append((start, wire))
        pos = end
    return recs
