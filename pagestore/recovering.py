"""The store's side of opening: its page file and C core as a `recovery.RecoveringStore`.

recovery/opening.py runs DESIGN.md §3's sequence and calls these methods in
order; they translate between that layer's opaque pages and pagestore's page
file (`PageFile`), C core (`_native.Core`) and errors. All of them run on the
opening thread before the checkpointer or any user thread exists.
"""

from __future__ import annotations

from pagestore.checkpoint.page_header import checkpoint_id_of

from . import _native
from .errors import ConfigError, CorruptionError

__all__ = ["RecoveringStoreMixin"]


class RecoveringStoreMixin:
    """Implements `recovery.RecoveringStore` for a class holding `core`, `pages`,
    `config` and `wal` (pagestore/engine.py's `Engine`)."""

    wal_scanner = staticmethod(_native.wal_scan)
    parse_recovery_records = staticmethod(_native.parse_recovery_records)

    @property
    def page_size(self) -> int:
        """The store's page size."""
        return self.config.page_size

    @property
    def pages_path(self) -> str:
        """The page file's path."""
        return self.pages.path

    # -- restore ----------------------------------------------------------------
    def write_pages(self, page_ids, images) -> None:
        """Restored pages go in place, and stay resident in the (not yet opened)
        core (`Core.stash`): the replay then finds them in memory."""
        self.pages.write_pages(page_ids, images)
        self.core.stash(page_ids, images)

    def sync(self) -> None:
        """Make the restored pages durable."""
        self.pages.sync()

    def seal_page(self, buf, page_id: int, page_size: int) -> None:
        """Stamp page id and CRC into an image rebuilt from WAL page records."""
        _native.seal_page(buf, page_id, page_size)

    # -- the page file and the core ------------------------------------------------
    def is_new(self) -> bool:
        """The page file is empty."""
        return self.pages.is_new()

    def checkpoint_of_page_file(self) -> int:
        """The id of the checkpoint that last wrote page 0 (every checkpoint does:
        it holds the meta fields), 0 when page 0 does not read back whole."""
        ps, pages = self.page_size, self.pages
        if pages.cipher is not None:
            buf = bytearray(ps)
            try:
                pages.read_page(0, buf)
            except CorruptionError:
                return 0              # the core's own read of the meta page names it
        else:                         # the C core reads pages itself: so does this
            buf = pages.file.pread(ps, 0)
            if len(buf) != ps or not _native.check_page(buf, 0):
                return 0
        return checkpoint_id_of(buf)

    def check_header(self) -> None:
        """Page 0 is ours, with our page size (CorruptionError / ConfigError otherwise)."""
        self.pages.check_header(_native.file_header_info)

    def format_new(self) -> None:
        """An empty store in page memory."""
        self._use_direct_fd()
        self.core.format_new()

    def open_existing(self) -> None:
        """The core reads the meta page; damage is named by the page file's path."""
        self._use_direct_fd()
        try:
            self.core.open_existing(self.pages.page_count_on_disk())
        except CorruptionError as e:
            if e.path is not None:
                raise
            raise CorruptionError(f"{self.pages.path}: {e}", self.pages.path) from e

    def _use_direct_fd(self) -> None:
        fd = self.pages.direct_fd()
        if fd is not None:
            key = self.pages.page_key()
            if key is not None:                # sealed pages: the core opens them too
                self.core.set_page_key(*key)
            self.core.set_page_fd(fd)

    def page_count(self) -> int:
        """Pages in the page file."""
        return self.pages.page_count_on_disk()

    def preload(self) -> None:
        """Read the page file sequentially in 8 MiB chunks into free page memory
        (`Core.preload`); an encrypted file is opened in bulk on the way (pages
        that do not authenticate are zeroed, so they fail the core's check and a
        miss reports them). Without libcrypto encrypted pages are left to misses."""
        pages, sig = self.pages, self.core.signals
        if pages.cipher is not None and not pages.cipher.bulk:
            return
        f, ps = pages.file, pages.page_size
        step = (8 << 20) // ps
        mv = memoryview(bytearray(step * ps))
        total = pages.page_count_on_disk()
        for first in range(1, total, step):
            if sig.slots_used >= sig.slots_total:
                break
            got = f.pread_into(mv[:min(step, total - first) * ps], first * ps) // ps
            if got <= 0:
                break
            if pages.cipher is not None:
                pages.cipher.open_pages(mv[:got * ps], first, pages.path, ps, skip_bad=True)
            self.core.preload(first, mv[:got * ps])

    # -- replay and the WAL -------------------------------------------------------
    def apply_log(self, raw: bytes) -> int:
        """Apply committed raw records; ConfigError when page memory cannot hold them."""
        try:
            return self.core.apply_log(raw)
        except _native.Retry as r:
            if r.code != _native.PS_E_NOMEM:
                raise
            # Nothing is written while replaying (no checkpoint can run before
            # the log's end is known), so every page the replay dirties must fit.
            # The batch was rolled back and the files are untouched: say so.
            sig = self.core.signals
            raise ConfigError(
                f"option 'memory_size': {self.config.memory_size:,} bytes "
                f"({sig.slots_total:,} pages) cannot hold the pages that replaying "
                f"the WAL of {self.path} dirties; open it once with a larger "
                f"memory_size (the one it ran with before the crash should do), then close it",
                option="memory_size") from None

    def use_wal(self, wal) -> None:
        """The opened WAL is the store's from now on (closed with it)."""
        self.wal = wal

    def attach_wal(self) -> None:
        """Hand the WAL's write position (and record-sealing key) to the C encoder."""
        wal = self.wal
        if wal.sealer == "c":
            kid, key = self.cipher.encoder_key()
            self.core.wal_set_key(key, kid)
        elif wal.sealer == "python":           # the Python sealer seals what the encoder lays out
            self.core.wal_reserve_tags(self.cipher.key_id)
        self.core.wal_set_unmap(wal.shared_mapping)
        self.core.wal_attach(*wal.start())
