"""Helpers shared by the native-core tests."""


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
