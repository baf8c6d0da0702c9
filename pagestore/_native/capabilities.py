"""What the C core could load on this machine, as one explicit object.

The fast paths that depend on a shared library found at run time (liblz4 for
the lz4 codec's C framing, libcrypto for every AES-GCM path in C) are facts
of the process, decided once at import. Code
that picks a fast path is handed `CAPABILITIES` (or an object built from it,
like `framing.RecordFramer`) instead of probing functions for attributes.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import CODEC_DISABLED, CODEC_LZ4, CODEC_SKIP_GARBAGE, lib

__all__ = ["Capabilities", "CAPABILITIES", "wal_seal_available", "lz4_available"]


def wal_seal_available() -> bool:
    """True when libcrypto is loaded for the C encoder's sealed WAL records
    (and for the bulk sealing of pages and recovery-file records)."""
    return bool(lib.ps_wal_seal_available())


def lz4_available() -> bool:
    """True when the system's liblz4.so.1 is loaded for the lz4 codec's C framing."""
    return bool(lib.ps_lz4_available())


@dataclass(frozen=True)
class Capabilities:
    """The C core's optional fast paths in this process.

    `framed_codecs`: recovery-file codecs framed and parsed in C (disabled and
    skip_garbage always, lz4's fast mode where liblz4 loads); `gcm`: libcrypto
    loaded, so WAL records, pages and recovery-file records are sealed in C
    (without it the Python fallbacks of wal/recseal.py and pagestore/cipher.py
    run)."""

    framed_codecs: tuple[int, ...]
    gcm: bool

    @classmethod
    def probe(cls) -> Capabilities:
        """The capabilities of this process (loads the libraries once)."""
        lz4, gcm = lz4_available(), wal_seal_available()
        return cls(framed_codecs=(CODEC_DISABLED, CODEC_SKIP_GARBAGE) + ((CODEC_LZ4,) if lz4 else ()),
                   gcm=gcm)


#: the capabilities of this process
CAPABILITIES = Capabilities.probe()
