"""Encrypted WAL segments: the physical layout of a sealed segment file.

The writer and every reader work on the *logical* segment of wal/format.py
(segment_size S bytes, 4 KiB blocks). With an encryption key, a segment file
stores it sealed with AES-256-GCM (pagestore/cipher.py); all integers are
little-endian, B = 4096:

    file offset              size   content
    0                        B      logical block 0 (segment header block), plaintext,
                                    with header flags (offset 10, u16) = 1 (SEALED) and
                                    the header crc recomputed over it, plus:
      44                     1        key_id the segment's blocks are sealed with
      45                     12       nonce (random)
      57                     16       GCM tag over nothing: a sealed record of cipher.py
                                      (Cipher.seal(b"", context)), context b"walseg\\0" |
                                      header bytes [0, 44)
    B + (i-1) * (B + 32)     B      ciphertext of logical block i (1 <= i < S/B), complete
      + B                    1        key_id (0 in a block never written)
      + B + 1                3        u24 tail = 0
      + B + 4                12       nonce (random)
      + B + 16               16       GCM tag; associated data b"pagestore/walblock/v1\\0" |
                                      u64 seq | u32 i | trailer bytes [0, 4)
    B + (S/B - 1 + t)(B+32)  B+32   tail slot t (t = 0, 1): the partial last block i,
                                    sealed as above with u24 tail = i
    file size = B + (S/B + 1) * (B + 32)

Validity rule. The header must check as in wal/format.py; its key check
must authenticate, else the segment is unreadable with this key and
EncryptionError names the file (wrong key, unknown key id, or a changed
header byte; NoKeyError without a key). Block i opens to its plaintext iff its key_id is the
header's and its tag authenticates for (seq, i); any other block (never
written, a stale block of the slot's older incarnation, a torn or changed
write) opens to 4096 zero bytes, which the reader treats as any unwritten or
damaged block: replay stops there, and later written blocks are reported.

A block is written to its home position once, when it is complete. The
partial last block is sealed again, with a new random nonce (a
position-derived one would repeat with different plaintext), at every
publish, into a tail slot chosen so that the other one keeps its newest
durable version (BlockSealer): rewriting a durable block in place would, if
torn by power loss, destroy records already acknowledged, since one changed
byte fails the whole block. A reader takes a
block from home if it opens there, else from a tail slot naming it (of two,
the later version: it extends the earlier by at least one record header).
A segment whose header has flags 0 is plaintext (written before the store
had a key, or by an older version) and is read as it is.
"""

from __future__ import annotations

import struct

from .format import BLOCK, SEG_HDR_LEN, crc32c, decode_segment_header

__all__ = ["NoKeyError", "SEALED", "SEALED_BLOCK", "TRAILER", "physical_size", "physical_offset", "seal_header",
           "open_segment", "logical_segment", "is_sealed", "tail_offset", "HeaderSealer", "BlockSealer"]

class NoKeyError(Exception):
    """An encrypted WAL file read without a key. `path` names it; pagestore's facade
    reports it as EncryptionError (wal does not import pagestore)."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path


SEALED = 1                          # segment header flags: blocks >= 1 are sealed
TRAILER = 32                        # key_id 1 | reserved 3 | nonce 12 | tag 16
SEALED_BLOCK = BLOCK + TRAILER
KEY_CHECK_AT = SEG_HDR_LEN          # 44: key check of the header block
KEY_CHECK_LEN = 29                  # Cipher.seal(b"") = key_id | nonce | tag

_SEG_CTX = b"walseg\0"


def physical_size(segment_size: int) -> int:
    """Bytes of a sealed segment file holding a logical segment of `segment_size`.

    Rounded up to 4 KiB: a write into a file's partial last page is several
    times slower (ext4), and tail slot 1 ends there."""
    return -(-(BLOCK + (segment_size // BLOCK + 1) * SEALED_BLOCK) // BLOCK) * BLOCK


def physical_offset(index: int) -> int:
    """File offset of logical block `index` in a sealed segment file."""
    return 0 if index == 0 else BLOCK + (index - 1) * SEALED_BLOCK


def tail_offset(segment_size: int, slot: int) -> int:
    """File offset of tail slot 0 or 1 (copies of the partial last block)."""
    return physical_offset(segment_size // BLOCK + slot)


def is_sealed(header) -> bool:
    return header is not None and bool(header.flags & SEALED)


def seal_header(cipher, block0) -> bytes:
    """The sealed file image of logical block 0 (the plaintext header block, flags 0)."""
    head = bytearray(block0[:BLOCK])
    struct.pack_into("<H", head, 10, SEALED)
    struct.pack_into("<I", head, 40, crc32c(bytes(head[:40])))
    head[KEY_CHECK_AT:KEY_CHECK_AT + KEY_CHECK_LEN] = cipher.seal(b"", _SEG_CTX + bytes(head[:SEG_HDR_LEN]))
    return bytes(head)


class BlockSealer:
    """The file writes that publish logical bytes [lo, hi) of one segment.

    Complete blocks go to their home positions, each sealed once, in one
    contiguous write from a reused staging buffer; a partial last block goes
    to a tail slot chosen so that the *other* slot's last write is durable:
    a torn write then never destroys the newest durable version of a block
    whose home copy is not durable yet (a home write and the tail write of
    its publish become durable together).

    Durability is counted in sync epochs: `sync_begins` (before an
    fdatasync of the file) returns the epoch it covers, `sync_done` marks
    every write of that epoch durable. The caller serializes `writes` plus
    the pwrites with `sync_begins` (one lock), so a write stamped with an
    epoch was issued before any fdatasync that covers it started.
    """

    def __init__(self, cipher, seq: int, segment_size: int):
        self.cipher = cipher
        self.seq = seq
        self.segment_size = segment_size
        self.header = None          # the sealed block 0, made once per segment
        self.epoch = 0              # writes now issued belong to this epoch
        self.durable = 0            # writes of epochs < this are durable
        self.written = [-1, -1]     # epoch of each tail slot's last write (-1: none)
        self.seqno = [0, 0]         # order of the tail slots' last writes
        self._n = 0
        self._stage = bytearray()

    def sync_begins(self) -> int:
        e = self.epoch
        self.epoch += 1
        return e

    def sync_done(self, epoch: int) -> None:
        self.durable = max(self.durable, epoch + 1)

    def _tail_target(self) -> int:
        durable = [w < self.durable for w in self.written]
        if durable[0] and durable[1]:
            return 0 if self.seqno[0] < self.seqno[1] else 1    # keep the newer durable one
        return 0 if not durable[0] else 1                       # rewrite the one not durable

    def writes(self, buf, lo: int, hi: int) -> list:
        """[(file offset, bytes)] to pwrite, in order."""
        first, full = lo // BLOCK, hi // BLOCK
        mv, out = memoryview(buf), []
        if full > first:
            n = (full - first) * SEALED_BLOCK + BLOCK
            if len(self._stage) < n:
                self._stage = bytearray(n)
            stage, at = self._stage, 0
            for i in range(first, full):
                if i == 0:
                    if self.header is None:
                        self.header = seal_header(self.cipher, mv[:BLOCK])
                    stage[0:BLOCK] = self.header
                    at = BLOCK
                    continue
                stage[at:at + SEALED_BLOCK] = self.cipher.seal_block(
                    mv[i * BLOCK:(i + 1) * BLOCK], self.seq, i)
                at += SEALED_BLOCK
            # Zeros up to the next 4 KiB page boundary: a write that ends inside
            # a page not in the cache makes the kernel read that page first (a
            # disk read per block). The bytes after home(full - 1) belong to
            # home(full), not written yet (blocks go home once, in order), and
            # never to a tail slot.
            start = physical_offset(first)
            end = start + at
            pad = min(-end % BLOCK, tail_offset(self.segment_size, 0) - end)
            stage[at:at + pad] = bytes(pad)
            out.append((start, memoryview(stage)[:at + pad]))
        if hi % BLOCK:
            t = self._tail_target()
            out.append((tail_offset(self.segment_size, t),
                        self.cipher.seal_block(mv[full * BLOCK:(full + 1) * BLOCK], self.seq, full,
                                               tail=True)))
            self._n += 1
            self.written[t], self.seqno[t] = self.epoch, self._n
        return out


def logical_segment(raw, cipher, path, header=None):
    """The logical segment of a segment file's bytes: decrypted if sealed, else `raw` itself."""
    h = header if header is not None else decode_segment_header(raw)
    return open_segment(raw, h.segment_size, cipher, path)[0] if is_sealed(h) else raw


def _last_nonzero(b) -> int:
    return len(bytes(b).rstrip(b"\0"))


def open_segment(raw, segment_size: int, cipher, path):
    """(logical segment bytearray, [indexes of blocks that did not open]) of a sealed file image.

    Raises NoKeyError without a key, and the cipher's EncryptionError naming
    `path` if the header's key check fails (wrong key, unknown key id);
    bytes missing past the end of a short file read as zeros.
    """
    raw = memoryview(raw)
    if cipher is None:
        raise NoKeyError(f"{path}: WAL segment is encrypted and the store was opened without "
                         "an encryption_key", path=path)
    check = raw[KEY_CHECK_AT:KEY_CHECK_AT + KEY_CHECK_LEN]
    cipher.open(check, _SEG_CTX + raw[:SEG_HDR_LEN].tobytes(), path)
    kid = check[0]
    out = bytearray(segment_size)
    out[:BLOCK] = raw[:BLOCK]
    struct.pack_into("<H", out, 10, 0)      # the logical header, as the writer made it
    struct.pack_into("<I", out, 40, crc32c(bytes(out[:40])))
    out[KEY_CHECK_AT:KEY_CHECK_AT + KEY_CHECK_LEN] = bytes(KEY_CHECK_LEN)
    seq = struct.unpack_from("<Q", raw, 24)[0]
    nblocks = segment_size // BLOCK
    bad, home = [], set()
    for i in range(1, nblocks):
        at = physical_offset(i)
        blk = raw[at:at + SEALED_BLOCK]
        if len(blk) < SEALED_BLOCK or blk[BLOCK] == 0:
            continue                        # never written
        plain = cipher.open_block(blk, seq, i) if blk[BLOCK] == kid else None
        if plain is None:
            bad.append(i)
        else:
            out[i * BLOCK:(i + 1) * BLOCK] = plain
            home.add(i)
    # A block not at home may be the partial last block, in a tail slot.
    best: dict = {}
    for t in (0, 1):
        at = tail_offset(segment_size, t)
        blk = raw[at:at + SEALED_BLOCK]
        if len(blk) < SEALED_BLOCK or blk[BLOCK] != kid:
            continue
        i = int.from_bytes(blk[BLOCK + 1:BLOCK + 4], "little")
        if not 1 <= i < nblocks or i in home:
            continue
        plain = cipher.open_block(blk, seq, i, tail=True)
        # Two versions of one block: the later holds every byte of the earlier
        # and a record more, whose header ends further on (nonzero length field).
        if plain is not None and (i not in best or _last_nonzero(plain) > _last_nonzero(best[i])):
            best[i] = plain
    for i, plain in best.items():
        out[i * BLOCK:(i + 1) * BLOCK] = plain
        if i in bad:
            bad.remove(i)
    return out, bad
