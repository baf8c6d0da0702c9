"""Point gets in bulk: `get_many` over csrc/getmany.c's `ps_get_many`.

One C call looks up a batch of keys under one hold of the tree read lock
and copies the values back to back into a per-thread buffer; Python then
cuts the values out of one bytes object. A key the call could not finish
(its page is not in memory, its value does not fit what is left of the
buffer, or an error) goes through `fallback`, the single get that can load
pages and raise the typed error, and the batch goes on after it.
"""

from __future__ import annotations

import threading

from . import PS_E_CLOSED, ffi, lib
from .. import errors as _errors

__all__ = ["get_many"]

_BATCH = 1024            # keys per C call
_OUT = 1 << 20           # bytes of values per C call
_tls = threading.local()


def _buffers():
    try:
        return _tls.bufs
    except AttributeError:
        _tls.bufs = bufs = (ffi.new("char[]", _OUT), ffi.new("int64_t[]", _BATCH))
        return bufs


def get_many(core, keys: list, fallback) -> list:
    """The values of `keys` (bytes each) in order, None where absent;
    `fallback(key)` gets a key the bulk call could not."""
    out_buf, lens = _buffers()
    c, call, unpack, buffer = core.pointer, lib.ps_get_many, ffi.unpack, ffi.buffer
    result: list = []
    add = result.append
    n, start = len(keys), 0
    while start < n:
        chunk = keys[start:start + _BATCH]
        m = len(chunk)
        klens = list(map(len, chunk))
        done = call(c, b"".join(chunk), klens, m, out_buf, _OUT, lens)
        if done < 0:
            if done == PS_E_CLOSED:
                raise _errors.ClosedError("the store was closed during the operation")
            done = 0
        got = unpack(lens, done)
        raw = buffer(out_buf, sum(x for x in got if x > 0))[:]
        off = 0
        for ln in got:
            if ln < 0:
                add(None)
            else:
                add(raw[off:off + ln])
                off += ln
        if done < m:
            add(fallback(chunk[done]))
            done += 1
        start += done
    return result
