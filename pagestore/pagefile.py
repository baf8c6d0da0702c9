"""The page file: page `i` at offset `i * page_size`, page 0 the meta page.

All I/O goes through a `diskio` file. On a page miss the C core preads a
plain posix file itself (`direct_fd`) and, when the store is encrypted, opens
the sealed image itself too (`page_key`); otherwise, and whenever its own read
fails a check, it calls `read_page`, which reads, opens, verifies and raises
the error naming the file. The checkpointer and recovery write page images
through `write_pages` (sealed here) and make them durable with `sync`.
"""

from __future__ import annotations

import os
import threading

from pagestore.checkpoint.page_header import HEADER_SIZE, PAGE_SIZES, page_id_of
from pagestore.diskio import DiskIOError
from pagestore.diskio.layout import PAGE_FILE
from pagestore.diskio.posix import PosixFile

from ._native import check_page, pwrite_pages
from .errors import ConfigError, CorruptionError, EncryptionError

NAME = PAGE_FILE


def looks_sealed(head: bytes) -> bool:
    """`head` (the first bytes of a page file) ends a page in a seal trailer
    (cipher.py: key id 1..255, three zero bytes) at one of the page sizes: what
    an encrypted store's meta page looks like to a reader without the key."""
    from .cipher import PAGE_RESERVE
    # A whole plaintext page (its crc32c and its own page id hold) is not
    # sealed, even where a leaf cell's bytes happen to look like a trailer:
    # such a page at offset 0 is a damaged or misdirected meta page.
    pid = page_id_of(head) if len(head) >= HEADER_SIZE else 0
    if any(s <= len(head) and check_page(head[:s], pid) for s in PAGE_SIZES):
        return False
    return any(s <= len(head) and head[s - PAGE_RESERVE] >= 1
               and head[s - PAGE_RESERVE + 1:s - PAGE_RESERVE + 4] == b"\0\0\0"
               for s in PAGE_SIZES)


class PageFile:
    """The page file of one store directory, as the C core, the checkpointer and recovery use it
    (see the module docstring)."""

    def __init__(self, fs, dirpath: str, page_size: int, cipher=None):
        self.fs = fs
        self.path = os.path.join(dirpath, NAME)
        self.page_size = page_size
        self.cipher = cipher
        self.bytes_written = 0
        self._count_lock = threading.Lock()  # writer threads add concurrently
        exists = fs.exists(self.path)
        self.file = fs.open(self.path, create=not exists)
        if not exists:
            fs.fsync_dir(dirpath)
        # The crash simulator (any non-posix file system) has no fd and must see
        # every write; sealed pages are sealed here first, then take the fd too.
        f = self.file
        self._fd = f.fileno() if isinstance(f, PosixFile) and not f.direct else None

    def page_count_on_disk(self) -> int:
        """Whole pages the file holds."""
        return self.file.size() // self.page_size

    def is_new(self) -> bool:
        """True for an empty page file (a store never checkpointed)."""
        return self.file.size() == 0

    def check_header(self, header_info) -> None:
        """Refuse a file that is not ours or has another page size, naming it."""
        head = self.file.pread(self.page_size if self.cipher else min(self.page_size, 4096), 0)
        if self.cipher is not None:
            head = self.cipher.open_header(head, self.path)
        info = header_info(head)
        if info is None and self.cipher is None and looks_sealed(self.file.pread(16384, 0)):
            raise EncryptionError(
                f"{self.path}: the page file is encrypted; open the store with its encryption_key",
                self.path)
        if info is None:
            raise CorruptionError(f"{self.path}: not a pagestore page file (bad magic)", self.path)
        if info["page_size"] != self.page_size:
            # Another page size is the caller's option only if page 0 is whole
            # at that size; otherwise the field itself is damaged.
            # (an encrypted header was authenticated above)
            ps = info["page_size"]
            if self.cipher is None and (ps not in PAGE_SIZES or not check_page(self.file.pread(ps, 0), 0)):
                raise CorruptionError(
                    f"{self.path}: page 0 (the meta page) fails its checks: it gives page_size "
                    f"{ps}, and is not a whole page of that size", self.path)
            raise ConfigError(
                f"option 'page_size': {self.path} was created with page_size="
                f"{info['page_size']}, not {self.page_size}", option="page_size")
        if self.file.size() % self.page_size:
            raise CorruptionError(
                f"{self.path}: size {self.file.size()} is not a multiple of the page size", self.path)

    def direct_fd(self) -> int | None:
        """The fd the C core may read pages through itself, or None when every page
        must pass through this class (the crash simulator, O_DIRECT, or sealed pages
        without libcrypto for the core to open them with: `page_key`)."""
        return self._fd if self.cipher is None or self.cipher.bulk else None

    def page_key(self):
        """What the C core opens this file's sealed pages with on a miss
        (`Core.set_page_key`'s arguments), or None for a plain page file."""
        return None if self.cipher is None else self.cipher.page_opener()

    def read_page(self, page_id: int, buf) -> None:
        """Fill `buf` with page `page_id` as the C core expects it (plaintext).

        The core's page-miss callback (`ps_py_read_page`): runs under the tree
        write lock. It may read and decrypt the page file; it must not call
        into the core, take the checkpointer's condition or wait for anything
        else (docs/architecture.md, lock order)."""
        ps = self.page_size
        if self.cipher is None:
            n = self.file.pread_into(buf, page_id * ps)
        else:
            n = self.file.pread_into(buf, page_id * ps)
            if n == ps:
                self.cipher.open_pages(buf, page_id, self.path, ps)
        if n != ps:
            raise CorruptionError(
                f"{self.path}: page {page_id} is beyond the end of the file ({n} of {ps} bytes)",
                self.path)
        # The core checks too; checking here names the file (invariant 5).
        if not check_page(buf, page_id):
            raise CorruptionError(
                f"{self.path}: page {page_id} (offset {page_id * ps}) failed its checksum "
                f"or page-id check", self.path)

    def missing(self) -> str | None:
        """This file's path if it was removed under the running store, else None
        (its descriptor still writes, into a file no reopen will find)."""
        return None if self.fs.exists(self.path) else self.path

    def write_pages(self, page_ids, images) -> None:
        """Write sealed page images in place; runs of adjacent ids become one write."""
        ps = self.page_size
        if self.cipher is not None:
            sealed = bytearray(len(page_ids) * ps)
            self.cipher.seal_pages(page_ids, images, sealed, ps)
            images = sealed
        if self._fd is not None:   # posix: one C call, adjacent runs coalesced, no GIL
            try:
                n = pwrite_pages(self._fd, page_ids, images, ps, self.path)
            except OSError as e:
                raise DiskIOError(e.errno, e.strerror, self.path) from e
            with self._count_lock:
                self.bytes_written += n
            return
        mv = memoryview(images)
        n = len(page_ids)
        i = 0
        while i < n:
            j = i + 1
            while j < n and page_ids[j] == page_ids[j - 1] + 1:
                j += 1
            data = mv[i * ps:j * ps]
            self.file.pwrite(data, page_ids[i] * ps)
            with self._count_lock:
                self.bytes_written += len(data)
            i = j

    def sync(self) -> None:
        """Make every page written so far durable (fdatasync): checkpoint step 5's end."""
        self.file.fdatasync()

    def close(self) -> None:
        """Close the file; no sync."""
        self.file.close()
