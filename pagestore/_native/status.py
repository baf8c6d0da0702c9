"""The two exceptions of the binding that are not in `pagestore.errors`.

Every other C status becomes an error of `pagestore.errors` in
`Core._raise` (core.py); these two carry the status itself.
"""

from __future__ import annotations

from .. import errors as _errors
from . import PS_E_CKPT_FULL, PS_E_NOMEM, PS_E_WAL_FULL

__all__ = ["NativeError", "Retry"]


class NativeError(_errors.Error):
    """A C core status that is not one of the typed errors. `code` is the status."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class Retry(_errors.Error):
    """A write the core rolled back completely (page memory full, checkpoint
    buffer full, or no WAL segment). `code` is the status; `page` the page id
    that could not be copied into the checkpoint buffer (PS_E_CKPT_FULL);
    `need` (PS_E_NOMEM) the pages of page memory the write has proven it
    needs at once, a lower bound (csrc/batchneed.c; 0 when unknown)."""

    def __init__(self, code: int, page: int = 0, need: int = 0):
        names = {PS_E_NOMEM: "page memory is full of dirty or in-checkpoint pages",
                 PS_E_CKPT_FULL: f"checkpoint buffer full (page {page})",
                 PS_E_WAL_FULL: "no WAL segment could be had"}
        super().__init__(names.get(code, f"status {code}"))
        self.code = code
        self.page = page
        self.need = need
