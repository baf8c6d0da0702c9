"""Writing and reading one recovery file (format in checkpoint/format.py).

A writer thread owns one `RecoveryFileWriter` for the whole recovery phase:
it appends chunks of page images with one pwrite per chunk (the records of
a chunk are built in one reused buffer, so the file sees large sequential
writes), then `sync` fsyncs it and `close` closes it. The reader streams a file in large
blocks and yields verified page images, raising `RecoveryFileCorrupt` at the
first byte that breaks the validity rule.
"""

from __future__ import annotations

import ctypes
import struct
from array import array

from crc32c import crc32c

from .compression import _ZEROS, DISABLED, LZ4, SKIP_GARBAGE, PageCodec
from .format import (_RECORD_CRC_SPAN, ENCRYPTED, FILE_HEADER_SIZE, GAP_SKIPPED, MAX_PAYLOAD_OVER_PAGE,
                     RECORD_HEADER, RECORD_HEADER_SIZE, RecoveryFileCorrupt, pack_file_header,
                     record_context, record_crc, unpack_file_header)
from .page_header import FREE_LO_AT, HEADER_SIZE as PAGE_HEADER_SIZE

__all__ = ["RecoveryFileWriter", "read_recovery_file", "read_recovery_batches", "check_recovery_file_header"]

_READ_BLOCK = 4 << 20
_HEAD14 = struct.Struct("<QBBI")     # the record header's first 14 bytes (RECORD_HEADER without crc)
_CRC = struct.Struct("<I")
_GAP = struct.Struct("<HH")          # free_lo, free_hi of the page header, read at FREE_LO_AT
assert _HEAD14.size == _RECORD_CRC_SPAN


def _load_sync_file_range():
    """libc's sync_file_range(2) through ctypes (the os module has none), or None off Linux."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _load_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2          # linux/fs.h: start write-out, do not wait


def _writeback_fd(f):
    """The descriptor whose write-back `_start_writeback` may start, or None
    (no sync_file_range here, a simulated file, an O_DIRECT file)."""
    if _SYNC_FILE_RANGE is None or getattr(f, "direct", True):
        return None
    fileno = getattr(f, "fileno", None)
    return fileno() if fileno is not None else None


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing [offset, offset + length) to the device, without waiting.
    Only a hint: a failure here is ignored, `sync` reports what really failed."""
    _SYNC_FILE_RANGE(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


class RecoveryFileWriter:
    """Appends page records to a new recovery file.

    Records are built in one preallocated buffer and leave in pwrites of at
    least `FLUSH_BYTES` (the last one, by `sync`, may be shorter), so the
    file sees large sequential writes whatever the chunk size. `offset` is
    the logical end of the file (buffered bytes included).

    Plain records (disabled / skip_garbage) are framed by `framer` when one
    is given: the C core's `frame_recovery_records`, one GIL-free call per
    chunk, which is what lets the writer threads overlap. A cipher with
    `bulk` (libcrypto loaded) then seals the chunk's records in place, in C
    too. Without a framer (or for a compressing codec, or a cipher without
    `bulk`) the Python framing below runs; it is the reference the C
    framing and sealing are tested against. The
    Python writer threads hold the GIL for every Python step, so the
    per-page work there is kept to a handful of C calls: headers by
    `pack_into`, payloads by slice assignment or a codec's `*_into`, CRCs
    over memoryviews, no per-page bytes object unless the store is encrypted.

    A compressing codec without a cipher uses `compactor` when given (the C
    core's `compact_pages` and `frame_record_heads`): the gap removal of a
    whole chunk and every header and CRC in two calls, so per page only the
    compressor call and a copy stay in Python (7.7 -> ~3 us a page with lz4).

    Each flush also starts the kernel's write-back of the bytes it wrote
    (`sync_file_range` WRITE, where the file has a descriptor): the device
    then writes while the threads frame the next chunks, and the fsync at
    the end waits only for the tail. Without it the whole file sat in the
    page cache until that fsync, so the phase took framing time *plus*
    device time instead of the larger of the two. It is a hint: durability
    still comes from `sync`, and a simulated file system has no descriptor.
    The file may exist already (a completed checkpoint's, renamed by
    steps.py): overwriting allocated blocks spares ext4 the block allocation
    and journal work of a new file (measured: 2.0 against 1.1 GiB/s for
    200 MiB in four files, 3.0 with the write-back hint).
    """

    FLUSH_BYTES = 1 << 20

    def __init__(self, fs, path: str, checkpoint_id: int, writer: int, page_size: int, codec: PageCodec,
                 cipher=None, framer=None, compactor=None):
        self.path, self.page_size, self.codec, self.cipher = path, page_size, codec, cipher
        self.checkpoint_id, self.writer = checkpoint_id, writer
        # the C framer takes disabled, skip_garbage and (where the system has
        # liblz4) lz4's fast mode: `framer.codecs` says which
        framed = framer.codecs if framer is not None else ()
        # a cipher with `bulk` seals whole chunks of plain records in C (no GIL):
        # the records are framed as without a cipher, then sealed in place
        self._bulk_seal = cipher is not None and cipher.bulk
        self._plain = cipher is None or self._bulk_seal     # records framed without a cipher
        self._seal_room = cipher.overhead if self._bulk_seal else 0
        self._framer = (framer if self._plain and codec.id in framed
                        and not (codec.id == LZ4 and codec.level > 0) else None)
        self._compactor = (compactor if self._plain and self._framer is None
                           and codec.id not in (DISABLED, SKIP_GARBAGE) else None)
        # Not truncated: the file may be a completed checkpoint's, renamed to
        # this name (steps.py) so its blocks are overwritten rather than
        # allocated anew; `sync` cuts what is left of it past our end.
        self._file = fs.open(path, create=True)
        self._fd = _writeback_fd(self._file)
        header = pack_file_header(checkpoint_id, writer, page_size, codec.id)
        try:
            self._file.pwrite(header, 0)
        except BaseException:
            # no caller holds this writer yet to close it: a failed header
            # write (a full disk) would leave the file open past close()
            self._file.close()
            raise
        self._written = len(header)   # file offset of the buffer's first byte
        self._fill = 0                # bytes waiting in the buffer
        self.offset = len(header)
        self.pages = 0
        self.gap_fallbacks = 0   # skip_garbage pages stored whole (their gap was not zero)
        self._out = bytearray()
        self._scratch = None     # compact page and codec output, compressing codecs only

    def _buffer(self, pages: int, per_page: int) -> memoryview:
        """The buffer, with room for `pages` records of up to `per_page` bytes after `_fill`."""
        need = self._fill + pages * (per_page + self._seal_room)
        if len(self._out) < need:
            grown = bytearray(max(need, self.FLUSH_BYTES + pages * per_page))
            grown[:self._fill] = memoryview(self._out)[:self._fill]
            self._out = grown
        return memoryview(self._out)

    def append(self, page_ids, images) -> int:
        """Encode `len(page_ids)` pages from `images` and queue them; bytes appended."""
        start = self._fill
        if self._framer is not None:
            out = self._buffer(len(page_ids), self.page_size + RECORD_HEADER_SIZE)
            n, fallbacks = self._framer(page_ids, images, self.page_size, self.codec.frame_code, out[start:])
            out.release()
            self.gap_fallbacks += fallbacks
            end = start + n
        elif self._plain and self.codec.id in (DISABLED, SKIP_GARBAGE):
            end = self._append_plain(page_ids, images, start)
        elif self._compactor is not None:
            end = self._append_compacted(page_ids, images, start)
        else:
            end = self._append_encoded(page_ids, images, start)
        return self._queued(start, end, len(page_ids))

    def _queued(self, start: int, end: int, pages: int) -> int:
        """Records of `pages` pages now fill [start, end) of the buffer; flush past FLUSH_BYTES."""
        if self._bulk_seal:            # room reserved by `_buffer`
            end = self.cipher.seal_records(self._out, start, end, self.checkpoint_id, self.writer,
                                           self._written + start)
        self._fill = end
        self.offset += end - start
        self.pages += pages
        if end >= self.FLUSH_BYTES:
            self.flush()
        return end - start

    @property
    def fuses(self) -> bool:
        """Plain records framed in C: `append_copied` may take pages straight from the source."""
        return self._framer is not None

    def append_copied(self, page_ids, copy_frame) -> int:
        """Like `append`, with `copy_frame(ids, code, out)` (code: the codec's
        `frame_code`) copying and framing the
        pages in one pass (the store's C core) instead of an images buffer in between."""
        start = self._fill
        out = self._buffer(len(page_ids), self.page_size + RECORD_HEADER_SIZE)
        try:
            n, fallbacks = copy_frame(page_ids, self.codec.frame_code, out[start:])
        finally:
            out.release()
        self.gap_fallbacks += fallbacks
        return self._queued(start, start + n, len(page_ids))

    def flush(self) -> None:
        """pwrite the buffered records (not synced)."""
        if self._fill:
            with memoryview(self._out) as view:
                self._file.pwrite(view[:self._fill], self._written)
            if self._fd is not None:
                _start_writeback(self._fd, self._written, self._fill)
            self._written += self._fill
            self._fill = 0

    def _append_plain(self, page_ids, images, start: int) -> int:
        """disabled / skip_garbage without a cipher: copies and CRCs only (the reference framing)."""
        ps = self.page_size
        out = self._buffer(len(page_ids), ps + RECORD_HEADER_SIZE)
        buf = self._out
        pack_head, pack_crc, unpack_gap = _HEAD14.pack_into, _CRC.pack_into, _GAP.unpack_from
        skip = self.codec.id == SKIP_GARBAGE
        zeros, low = _ZEROS.startswith, PAGE_HEADER_SIZE
        pos, base = start, 0
        for pid in page_ids:
            top = base + ps
            data = pos + RECORD_HEADER_SIZE
            if skip:
                lo, hi = unpack_gap(images, base + FREE_LO_AT)
                if low <= lo < hi <= ps and zeros(images[base + lo:base + hi]):
                    n = ps - (hi - lo)
                    pack_head(buf, pos, pid, SKIP_GARBAGE, GAP_SKIPPED, n)
                    out[data:data + lo] = images[base:base + lo]
                    out[data + lo:data + n] = images[base + hi:top]
                else:
                    self.gap_fallbacks += 1
                    n = ps
                    pack_head(buf, pos, pid, DISABLED, 0, n)
                    out[data:data + n] = images[base:top]
            else:
                n = ps
                pack_head(buf, pos, pid, DISABLED, 0, n)
                out[data:data + n] = images[base:top]
            pack_crc(buf, pos + _RECORD_CRC_SPAN, crc32c(out[data:data + n], crc32c(out[pos:pos + _RECORD_CRC_SPAN])))
            pos = data + n
            base = top
        out.release()
        return pos

    def _append_encoded(self, page_ids, images, start: int) -> int:
        """A compressing codec and/or a cipher: the payload is encoded into the buffer."""
        ps, codec, cipher = self.page_size, self.codec, self.cipher
        # room per record: a sealed payload adds the cipher's nonce and tag
        # (28 bytes) to at most a page, well inside the format's 64 of slack
        room = ps + MAX_PAYLOAD_OVER_PAGE
        out = self._buffer(len(page_ids), RECORD_HEADER_SIZE + room)
        buf = self._out
        if self._scratch is None:
            self._scratch = (bytearray(ps), bytearray(codec.bound(ps)))
        scratch = self._scratch
        want_gap = codec.id != DISABLED
        pos, at, base = start, self._written, 0
        for pid in page_ids:
            data = pos + RECORD_HEADER_SIZE
            cid, flags, n = codec.encode_into(images[base:base + ps], out, data, scratch)
            if want_gap and not flags & GAP_SKIPPED:
                self.gap_fallbacks += 1
            if cipher is not None and not self._bulk_seal:
                flags |= ENCRYPTED
                sealed = cipher.seal(out[data:data + n], record_context(self.checkpoint_id, self.writer,
                                                                        at + pos, pid, cid, flags))
                n = len(sealed)
                if n > room:
                    raise ValueError(f"sealed payload of {n} bytes exceeds the record limit {room}")
                out[data:data + n] = sealed
            _HEAD14.pack_into(buf, pos, pid, cid, flags, n)
            _CRC.pack_into(buf, pos + _RECORD_CRC_SPAN,
                           crc32c(out[data:data + n], crc32c(out[pos:pos + _RECORD_CRC_SPAN])))
            pos = data + n
            base += ps
        out.release()
        return pos

    def _append_compacted(self, page_ids, images, start: int) -> int:
        """A compressing codec, no cipher: `_append_encoded`'s records, byte for byte,
        with the gap removal, headers and CRCs done by the compactor in bulk."""
        ps, codec, n = self.page_size, self.codec, len(page_ids)
        # room for the codec's worst case after each record: it compresses
        # straight into the buffer (no copy); a result no smaller than the
        # input is overwritten by the input
        bound = codec.bound(ps)
        out = self._buffer(n, RECORD_HEADER_SIZE + bound)
        if self._scratch is None or len(self._scratch[0]) < n * ps:
            self._scratch = (bytearray(n * ps), array("I", bytes(4 * n)), bytearray(n), bytearray(n))
        compact, lens, flags, codecs = self._scratch
        self.gap_fallbacks += self._compactor.compact_pages(images, n, ps, compact, lens, flags)
        compress, cid = codec.compress_into, codec.id
        src_all = memoryview(compact)
        pos = start
        for i in range(n):
            ln = lens[i]
            data = pos + RECORD_HEADER_SIZE
            src = src_all[i * ps:i * ps + ln]
            k = compress(src, out[data:data + bound])
            if k < ln:
                codecs[i], lens[i] = cid, k
                pos = data + k
            else:                      # stored as skip_garbage / whole, like encode_into
                out[data:data + ln] = src
                codecs[i] = SKIP_GARBAGE if flags[i] else DISABLED
                pos = data + ln
        self._compactor.frame_heads(out[start:pos], page_ids, codecs, flags, lens)
        out.release()
        return pos

    def sync(self) -> None:
        """Write what is buffered, cut the file to its records (a reused file may
        be longer), then fsync it: data and length durable together."""
        self.flush()
        if self._file.size() > self._written:
            self._file.truncate(self._written)
        self._file.fsync()

    def close(self) -> None:
        """Close without writing the buffer: after a failure nothing more may reach the file."""
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


def _decode_record(path, rh, payload, at, checkpoint_id, writer, page_size, cipher):
    """One whole record (header `rh`, `payload`) at file offset `at`: (page id, image) or raise."""
    pid, codec, flags, length, crc = RECORD_HEADER.unpack(rh)
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
    return pid, image


def read_recovery_file(fs, path: str, *, checkpoint_id: int, writer: int, page_size: int, cipher=None):
    """Yield (page_id, image) for every record of the file, each one verified.

    Raises RecoveryFileCorrupt (naming `path`) for a bad header, a header that
    does not match the file's name or the store, a short record, a CRC
    mismatch or a payload that does not decode to exactly one page, or an
    encrypted record without a `cipher` (and a plain one with it). A sealed
    payload that fails authentication raises the cipher's own error, which
    names the file too. This is the reference reader; `read_recovery_batches`
    is the same rule in bulk.
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
            length = RECORD_HEADER.unpack(rh)[3]
            if length > limit:
                raise RecoveryFileCorrupt(path, f"record length {length} exceeds {limit}", at)
            payload = stream.take(length)
            if payload is None:
                raise RecoveryFileCorrupt(path, f"short record payload ({length} bytes announced, "
                                                f"{size - at - RECORD_HEADER_SIZE} left)", at)
            yield _decode_record(path, rh, payload, at, checkpoint_id, writer, page_size, cipher)
    finally:
        f.close()


def read_recovery_batches(fs, path: str, *, checkpoint_id: int, writer: int, page_size: int, cipher=None,
                          parser=None, batch_pages: int = 256):
    """Yield (page_ids, images) batches of the file's pages: `read_recovery_file` in bulk.

    Same validity rule and errors. `images` is a memoryview of
    len(page_ids) * page_size bytes, reused by the next batch: use it before
    asking for more. With `parser` (the C core's `parse_recovery_records`,
    GIL-free) the plain records of a block are decoded in one call; any
    record it does not take (compressed, encrypted, short, damaged) goes
    through the Python decoder, which raises the reference error.
    """
    ps = page_size
    limit = ps + MAX_PAYLOAD_OVER_PAGE
    if cipher is not None:
        parser = None                  # every record is sealed: nothing for the C path
    images = bytearray(batch_pages * ps)
    ids = array("Q", bytes(8 * batch_pages))
    img_view, id_view = memoryview(images), memoryview(ids)
    f = fs.open(path)
    try:
        size = f.size()
        head = f.pread(FILE_HEADER_SIZE, 0)
        _check_header(head if len(head) == FILE_HEADER_SIZE else f.pread(size, 0), path, checkpoint_id,
                      writer, page_size)
        buf = bytearray(_READ_BLOCK + RECORD_HEADER_SIZE + limit)
        view = memoryview(buf)
        base = FILE_HEADER_SIZE        # file offset of buf[0]
        fill = bpos = count = 0
        while True:
            if parser is not None and count < batch_pages and fill - bpos >= RECORD_HEADER_SIZE:
                n, used = parser(view[bpos:fill], ps, img_view[count * ps:], id_view[count:])
                count += n
                bpos += used
            if count == batch_pages:
                yield ids[:count], img_view[:count * ps]
                count = 0
                continue
            left, at = fill - bpos, base + bpos
            if left >= RECORD_HEADER_SIZE:
                length = RECORD_HEADER.unpack_from(buf, bpos)[3]
                if length > limit:
                    raise RecoveryFileCorrupt(path, f"record length {length} exceeds {limit}", at)
                if left >= RECORD_HEADER_SIZE + length:
                    rh = bytes(view[bpos:bpos + RECORD_HEADER_SIZE])
                    payload = bytes(view[bpos + RECORD_HEADER_SIZE:bpos + RECORD_HEADER_SIZE + length])
                    pid, image = _decode_record(path, rh, payload, at, checkpoint_id, writer, ps, cipher)
                    img_view[count * ps:(count + 1) * ps] = image
                    ids[count] = pid
                    count += 1
                    bpos += RECORD_HEADER_SIZE + length
                    continue
            if base + fill >= size:    # the file ends inside this record
                if left == 0:
                    break
                if left < RECORD_HEADER_SIZE:
                    raise RecoveryFileCorrupt(path, f"short record header ({left} bytes left)", at)
                raise RecoveryFileCorrupt(path, f"short record payload ({length} bytes announced, "
                                                f"{left - RECORD_HEADER_SIZE} left)", at)
            view[:left] = view[bpos:fill]
            base, fill, bpos = at, left, 0
            want = min(len(buf) - fill, size - (base + fill))
            got = f.pread_into(view[fill:fill + want], base + fill)
            if got <= 0:
                raise RecoveryFileCorrupt(path, f"file shrank to {base + fill} bytes while read", base + fill)
            fill += got
        if count:
            yield ids[:count], img_view[:count * ps]
    finally:
        f.close()
