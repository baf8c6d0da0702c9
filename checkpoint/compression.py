"""Page codecs for recovery data: disabled, skip_garbage, snappy, zstd, lz4.

These run in the checkpoint writer threads on every page of every checkpoint,
so they must cost a few microseconds per page (reference/machine.md: snappy
2-3 us, zstd-1 6-7 us per half-empty 4 KiB page). cramjam releases the GIL
while it compresses, which is what lets the writer pool overlap them.

skip_garbage. Every page starts with the common header (page_header.py);
its free_lo and free_hi fields bound the page's free gap [free_lo, free_hi), which the
tree never reads. Dropping the gap is the cheapest compression there is, but
the page carries a CRC over *all* its bytes, gap included, and restore writes
the gap back as zeros. So the gap is dropped only when it is all zeros
already (then the rebuilt page is byte-identical, CRC included); a page with
a non-zero gap, or whose header does not describe a plausible gap (the meta
page, a foreign page type), is stored whole. Nothing is ever guessed: restore
rebuilds exactly the bytes that were copied, or the record is not compacted.
The C core should zero the gap when it frees space so this path always
applies (counted as `gap_fallbacks` by the writer when it does not).

The general codecs compress the compacted page when the gap can be dropped
(less input, less work) and fall back to the raw form when the compressed
form is not smaller, so a record is never bigger than page + header.
"""

from __future__ import annotations

import functools

import cramjam

from .format import GAP_SKIPPED
from .page_header import HEADER_SIZE as PAGE_HEADER_SIZE, free_gap

__all__ = [
    "DISABLED", "SKIP_GARBAGE", "SNAPPY", "ZSTD", "LZ4", "CODECS", "CODEC_NAMES",
    "PageCodec", "compact_page", "expand_page",
]

# DO NOT CHANGE THESE VALUES: they are embedded in recovery-file records and
# in PAGE_SNAPSHOT WAL records.
DISABLED, SKIP_GARBAGE, SNAPPY, ZSTD, LZ4 = 0, 1, 2, 3, 4
CODECS = {"disabled": DISABLED, "skip_garbage": SKIP_GARBAGE, "snappy": SNAPPY, "zstd": ZSTD, "lz4": LZ4}
CODEC_NAMES = {v: k for k, v in CODECS.items()}

# Default levels follow Ignite: zstd 3, lz4 0 (the fast block mode). lz4's
# levels below 0 are its fast mode with acceleration 1 - level (the lz4
# tool's --fast=N): the compressor skips ahead faster through bytes that do
# not match, for a slightly larger block that every LZ4 decoder reads.
_LEVELS = {ZSTD: (3, -131072, 22), LZ4: (0, -65534, 17)}


_ZEROS = bytes(1 << 16)          # free_hi is a u16: no gap is longer


def compact_page(page, page_size: int):
    """The page without its free gap, or None when the gap cannot be dropped.

    The gap is droppable when the header describes a plausible one and it
    is all zeros; `_ZEROS.startswith(gap)` is that test at memcmp speed
    (about 0.3 us for a 2 KiB gap, ten times a Python-level check).
    """
    lo, hi = free_gap(page)
    if not PAGE_HEADER_SIZE <= lo < hi <= page_size:
        return None
    view = memoryview(page)
    if not _ZEROS.startswith(view[lo:hi]):
        return None
    return b"".join((view[:lo], view[hi:page_size]))


def expand_page(data, page_size: int) -> bytes:
    """Rebuild a page from `compact_page` output; ValueError if inconsistent."""
    if len(data) < PAGE_HEADER_SIZE:
        raise ValueError(f"compacted page of {len(data)} bytes is shorter than the page header")
    lo, hi = free_gap(data)
    if not PAGE_HEADER_SIZE <= lo < hi <= page_size or len(data) != page_size - (hi - lo):
        raise ValueError(f"compacted page length {len(data)} does not match its gap [{lo}, {hi})")
    return bytes(data[:lo]) + bytes(hi - lo) + bytes(data[lo:])


class PageCodec:
    """One configured codec: `encode` in the writers, `decode` in recovery.

    `decode` is static in effect: it follows the codec byte of each record,
    not the configuration, so files written under another setting restore.
    """

    def __init__(self, name: str = "skip_garbage", level: int | None = None, page_size: int = 4096):
        if name not in CODECS:
            raise ValueError(f"unknown compression {name!r}; one of {sorted(CODECS)}")
        self.name, self.id, self.page_size = name, CODECS[name], page_size
        if self.id in _LEVELS:
            default, lowest, highest = _LEVELS[self.id]
            self.level = default if level is None else int(level)
            if not lowest <= self.level <= highest:
                raise ValueError(f"{name} level {self.level} outside [{lowest}, {highest}]")
        elif level is not None:
            raise ValueError(f"{name} takes no level")
        else:
            self.level = None
        # LZ4's acceleration in the fast mode (levels <= 0), else None. Only the
        # C framing (liblz4) applies it; cramjam's block compressor has none, so
        # the Python codec writes the fast mode's default-acceleration block.
        self.acceleration = 1 - self.level if self.id == LZ4 and self.level <= 0 else None
        # compress_into(data, out) -> n: the codec's compressed form of data into
        # out (bound(len(data)) bytes), bound once here so the writers' per-page
        # call is the codec's own (None for the non-compressing codecs)
        self.compress_into = None
        if self.id == SNAPPY:
            self.compress_into = cramjam.snappy.compress_raw_into
        elif self.id == ZSTD:
            self.compress_into = functools.partial(cramjam.zstd.compress_into, level=self.level)
        elif self.id == LZ4:
            self.compress_into = (functools.partial(cramjam.lz4.compress_block_into, mode="high_compression",
                                                    compression=self.level)
                                  if self.level > 0 else cramjam.lz4.compress_block_into)

    def encode(self, page) -> tuple[int, int, bytes]:
        """(codec applied, flags, payload) for one page image."""
        if self.id == DISABLED:
            return DISABLED, 0, bytes(page)
        compact = compact_page(page, self.page_size)
        base, flags = (bytes(page), 0) if compact is None else (compact, GAP_SKIPPED)
        raw_codec = SKIP_GARBAGE if flags else DISABLED
        if self.id == SKIP_GARBAGE:
            return raw_codec, flags, base
        packed = self._compress(base)
        if len(packed) >= len(base):
            return raw_codec, flags, base
        return self.id, flags, packed

    @property
    def frame_code(self) -> int:
        """The codec argument of the C framing: the id, with LZ4's acceleration
        in bits 8-23 when it is above 1 (recframe.c)."""
        accel = self.acceleration or 1
        return self.id | (accel << 8 if accel > 1 else 0)

    def bound(self, size: int) -> int:
        """Bytes `compress_into` may need for `size` input bytes (snappy's bound is the largest)."""
        return 32 + size + size // 6 + 64

    def encode_into(self, page, out, at: int, scratch) -> tuple[int, int, int]:
        """`encode` without intermediate objects: (codec applied, flags, n).

        The payload is written to out[at:at + n], n <= page size. `scratch` is
        the caller's (bytearray(page_size), bytearray(bound(page_size))) pair,
        one per thread: it holds the compacted page and the codec's output.
        The payload is byte-identical to `encode`'s.
        """
        ps = self.page_size
        if self.id == DISABLED:
            out[at:at + ps] = page
            return DISABLED, 0, ps
        lo, hi = free_gap(page)
        if PAGE_HEADER_SIZE <= lo < hi <= ps and _ZEROS.startswith(page[lo:hi]):
            n, flags, raw_codec = ps - (hi - lo), GAP_SKIPPED, SKIP_GARBAGE
            if self.id == SKIP_GARBAGE:
                out[at:at + lo] = page[:lo]
                out[at + lo:at + n] = page[hi:ps]
                return SKIP_GARBAGE, GAP_SKIPPED, n
            compact = memoryview(scratch[0])
            compact[:lo] = page[:lo]
            compact[lo:n] = page[hi:ps]
            src = compact[:n]
        else:
            n, flags, raw_codec, src = ps, 0, DISABLED, page
            if self.id == SKIP_GARBAGE:
                out[at:at + ps] = page
                return DISABLED, 0, ps
        packed = scratch[1]
        k = self.compress_into(src, packed)
        if k >= n:
            out[at:at + n] = src
            return raw_codec, flags, n
        out[at:at + k] = memoryview(packed)[:k]
        return self.id, flags, k

    def _compress(self, data: bytes) -> bytes:
        if self.id == SNAPPY:
            return bytes(cramjam.snappy.compress_raw(data))
        if self.id == ZSTD:
            return bytes(cramjam.zstd.compress(data, level=self.level))
        if self.level > 0:
            return bytes(cramjam.lz4.compress_block(data, mode="high_compression", compression=self.level))
        return bytes(cramjam.lz4.compress_block(data))

    @staticmethod
    def decode(codec: int, flags: int, payload, page_size: int) -> bytes:
        """The page image; ValueError on any inconsistency (caller names the file)."""
        if flags & ~GAP_SKIPPED:
            raise ValueError(f"reserved flag bits set: {flags:#x}")
        if codec in (DISABLED, SKIP_GARBAGE):
            if (codec == SKIP_GARBAGE) != bool(flags & GAP_SKIPPED):
                raise ValueError(f"codec {codec} with flags {flags:#x}")
            data = bytes(payload)
        else:
            try:
                if codec == SNAPPY:
                    data = bytes(cramjam.snappy.decompress_raw(bytes(payload)))
                elif codec == ZSTD:
                    data = bytes(cramjam.zstd.decompress(bytes(payload)))
                elif codec == LZ4:
                    data = bytes(cramjam.lz4.decompress_block(bytes(payload)))
                else:
                    raise ValueError(f"unknown codec {codec}")
            except ValueError:
                raise
            except Exception as exc:  # cramjam raises its own DecompressionError
                raise ValueError(f"{CODEC_NAMES[codec]} payload does not decompress: {exc}") from None
        if flags & GAP_SKIPPED:
            data = expand_page(data, page_size)
        if len(data) != page_size:
            raise ValueError(f"payload decodes to {len(data)} bytes, page size is {page_size}")
        return data
