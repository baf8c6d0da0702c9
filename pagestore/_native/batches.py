"""The packed-operations format of `Core.apply_batch` (ps_apply_batch).

Entries back to back: `op u8 (1 put, 2 delete) | klen u32 | vlen u32 | key |
value` (little-endian; a delete has vlen 0 and no value).
"""

from __future__ import annotations

import struct

__all__ = ["OP_PUT", "OP_DELETE", "pack_ops", "pack_puts", "unpack_ops"]

OP_PUT = 1
OP_DELETE = 2
_OP_HDR = struct.Struct("<BII")


def pack_ops(ops) -> bytes:
    """Pack (op, key, value) triples (op 1 put, 2 delete) for Core.apply_batch."""
    hdr = _OP_HDR.pack
    parts = []
    ext = parts.extend
    for op, k, v in ops:
        if op == OP_DELETE:
            ext((hdr(OP_DELETE, len(k), 0), k))
        elif op == OP_PUT:
            ext((hdr(OP_PUT, len(k), len(v)), k, v))
        else:
            raise ValueError(f"unknown op {op!r}")
    return b"".join(parts)


def pack_puts(items, key=bytes, value=bytes) -> bytes:
    """Pack (key, value) pairs as puts; `key`/`value` convert anything not bytes.

    The bulk-load path: one pass, no intermediate triples (pack_ops's format)."""
    hdr = _OP_HDR.pack
    parts = []
    ext = parts.extend
    for k, v in items:
        if type(k) is not bytes:
            k = key(k)
        if type(v) is not bytes:
            v = value(v)
        ext((hdr(OP_PUT, len(k), len(v)), k, v))
    return b"".join(parts)


def unpack_ops(data: bytes):
    """The (op, key, value) triples of a packed batch (inverse of pack_ops)."""
    mv = memoryview(data)
    off, n = 0, len(mv)
    while off < n:
        op, kl, vl = _OP_HDR.unpack_from(mv, off)
        off += _OP_HDR.size
        yield op, bytes(mv[off:off + kl]), bytes(mv[off + kl:off + kl + vl])
        off += kl + vl
