"""Writing and reading one recovery file (format in checkpoint/format.py).

A writer thread owns one `RecoveryFileWriter` for the whole recovery phase:
it appends chunks of page images with one pwrite per chunk (the records of
a chunk are joined in memory first, so the file sees large sequential
writes), then `sync_and_close` fsyncs it. The reader streams a file in large
blocks and yields verified page images, raising `RecoveryFileCorrupt` at the
first byte that breaks the validity rule.
"""

from __future__ import annotations

from .compression import PageCodec
from .format import (ENCRYPTED, FILE_HEADER_SIZE, GAP_SKIPPED, MAX_PAYLOAD_OVER_PAGE, RECORD_HEADER,
                     RECORD_HEADER_SIZE, RecoveryFileCorrupt, pack_file_header,
                     pack_record_header, record_context, record_crc, unpack_file_header)

__all__ = ["RecoveryFileWriter", "read_recovery_file", "check_recovery_file_header"]

_READ_BLOCK = 4 << 20


class RecoveryFileWriter:
    """Appends page records to a new recovery file."""

    def __init__(self, fs, path: str, checkpoint_id: int, writer: int, page_size: int, codec: PageCodec,
                 cipher=None):
        self.path, self.page_size, self.codec, self.cipher = path, page_size, codec, cipher
        self.checkpoint_id, self.writer = checkpoint_id, writer
        self._file = fs.open(path, create=True, truncate=True)
        header = pack_file_header(checkpoint_id, writer, page_size, codec.id)
        self._file.pwrite(header, 0)
        self.offset = len(header)
        self.pages = 0
        self.gap_fallbacks = 0   # skip_garbage pages stored whole (their gap was not zero)

    def append(self, page_ids, images) -> int:
        """Encode and write `len(page_ids)` pages from `images`; bytes written."""
        ps, parts, at = self.page_size, [], self.offset
        want_gap = self.codec.id != 0
        for i, pid in enumerate(page_ids):
            codec, flags, payload = self.codec.encode(images[i * ps:(i + 1) * ps])
            if want_gap and not flags & GAP_SKIPPED:
                self.gap_fallbacks += 1
            if self.cipher is not None:
                flags |= ENCRYPTED
                payload = self.cipher.seal(payload, record_context(self.checkpoint_id, self.writer, at,
                                                                   pid, codec, flags))
            head = pack_record_header(pid, codec, flags, payload)
            parts.append(head)
            parts.append(payload)
            at += len(head) + len(payload)
        data = b"".join(parts)
        self._file.pwrite(data, self.offset)
        self.offset += len(data)
        self.pages += len(page_ids)
        return len(data)

    def sync(self) -> None:
        self._file.fsync()

    def close(self) -> None:
        self._file.close()


class _Stream:
    """Sequential reads of a file in large blocks, with exact-length takes."""

    def __init__(self, f, size: int):
        self.f, self.size, self.pos = f, size, 0
        self.buf, self.bpos = b"", 0

    def take(self, n: int):
        """Exactly n bytes, or None if the file ends first. `pos` is the file
        offset of the next byte to be taken."""
        avail = len(self.buf) - self.bpos
        if avail < n:
            if self.pos + n > self.size:
                return None
            more = self.f.pread(max(_READ_BLOCK, n - avail), self.pos + avail)
            self.buf, self.bpos = self.buf[self.bpos:] + more, 0
            if len(self.buf) < n:
                return None
        out = self.buf[self.bpos:self.bpos + n]
        self.bpos += n
        self.pos += n
        return out


def _check_header(head, path: str, checkpoint_id: int, writer: int, page_size: int) -> None:
    header = unpack_file_header(head, path)
    if header.checkpoint_id != checkpoint_id or header.writer != writer:
        raise RecoveryFileCorrupt(path, f"header names checkpoint {header.checkpoint_id} writer "
                                        f"{header.writer}, file name says {checkpoint_id} writer {writer}", 0)
    if header.page_size != page_size:
        raise RecoveryFileCorrupt(path, f"page size {header.page_size}, store uses {page_size}", 0)


def check_recovery_file_header(fs, path: str, *, checkpoint_id: int, writer: int, page_size: int) -> None:
    """Raise RecoveryFileCorrupt unless the file's header is valid and matches its name."""
    f = fs.open(path)
    try:
        _check_header(f.pread(FILE_HEADER_SIZE, 0), path, checkpoint_id, writer, page_size)
    finally:
        f.close()


def read_recovery_file(fs, path: str, *, checkpoint_id: int, writer: int, page_size: int, cipher=None):
    """Yield (page_id, image) for every record of the file, each one verified.

    Raises RecoveryFileCorrupt (naming `path`) for a bad header, a header that
    does not match the file's name or the store, a short record, a CRC
    mismatch or a payload that does not decode to exactly one page, or an
    encrypted record without a `cipher` (and a plain one with it). A sealed
    payload that fails authentication raises the cipher's own error, which
    names the file too.
    """
    f = fs.open(path)
    try:
        size = f.size()
        stream = _Stream(f, size)
        head = stream.take(FILE_HEADER_SIZE)
        _check_header(head if head is not None else f.pread(size, 0), path, checkpoint_id, writer, page_size)
        limit = page_size + MAX_PAYLOAD_OVER_PAGE
        while stream.pos < size:
            at = stream.pos
            rh = stream.take(RECORD_HEADER_SIZE)
            if rh is None:
                raise RecoveryFileCorrupt(path, f"short record header ({size - at} bytes left)", at)
            pid, codec, flags, length, crc = RECORD_HEADER.unpack(rh)
            if length > limit:
                raise RecoveryFileCorrupt(path, f"record length {length} exceeds {limit}", at)
            payload = stream.take(length)
            if payload is None:
                raise RecoveryFileCorrupt(path, f"short record payload ({length} bytes announced, "
                                                f"{size - at - RECORD_HEADER_SIZE} left)", at)
            if record_crc(rh[:14], payload) != crc:
                raise RecoveryFileCorrupt(path, f"record crc mismatch (page {pid})", at)
            if bool(flags & ENCRYPTED) != (cipher is not None):
                raise RecoveryFileCorrupt(path, f"page {pid}: record is {'' if flags & ENCRYPTED else 'not '}"
                                                f"encrypted, the store is {'' if cipher else 'not '}encrypted", at)
            if cipher is not None:
                payload = cipher.open(payload, record_context(checkpoint_id, writer, at, pid, codec, flags), path)
            try:
                image = PageCodec.decode(codec, flags & ~ENCRYPTED, payload, page_size)
            except ValueError as exc:
                raise RecoveryFileCorrupt(path, f"page {pid}: {exc}", at) from None
            yield pid, image
    finally:
        f.close()
