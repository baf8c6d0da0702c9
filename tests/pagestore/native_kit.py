"""Helpers shared by the native-core tests."""

from pagestore import _native

BLOCK = 4096


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
