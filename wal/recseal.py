"""Record-sealed WAL segments (header flag 2): the one encrypted WAL format.

Every record of an encrypted store's WAL is sealed on its own. The C encoder
(pagestore/csrc/walenc.c) seals it as it writes it when the core can load
libcrypto (`pagestore._native.wal_seal_available()`). Otherwise the encoder
only lays the record out sealed (`Core.wal_reserve_tags`: room for the tag,
plaintext payload) into memory that is not the file, and `RecordSealer` below
seals each record in place, with the same bytes, before the pwrite path
writes it (so that fallback writes through pwrite, never a shared mapping).
The file is the logical segment of wal/format.py byte for byte (segment_size
bytes; block headers and record headers in plaintext). All integers are
little-endian.

Segment header additions (block 0):
    off  size  field
    10   2     flags = 2 (SEALED_RECORDS), | 4 when marked (wal/format.py);
               the header crc at 40 covers it
    44   1     key_id the segment's records are sealed with
    45   8     salt: random, drawn when the header is written (one per segment
               incarnation)
    53   16    key check: AES-256-GCM tag of empty plaintext under the key,
               nonce salt | ff ff ff ff, associated data
               b"pagestore/walseg/v2\\0" | header bytes [0, 45)

Sealed record:
    off     size  field
    0       4     crc32c of bytes [4, len): over the ciphertext and the tag
    4       4     len = 17 + n + 16
    8       8     lsn of the record's first byte
    16      1     type
    17      n     ciphertext of the n-byte payload of wal/format.py
    17 + n  16    GCM tag
    nonce = salt | u32 offset of the record in its segment; associated data =
    bytes [4, 17) (len, lsn, type), so a record cannot be moved or retyped.

Validity rule. The header must check as in wal/format.py and its key check
must authenticate, else the segment is unreadable with this key:
EncryptionError names the file (wrong key, unknown key id, a changed header
byte; NoKeyError without a key). A record is valid iff it is valid by
wal/format.py's rule on its stored bytes (crc over the ciphertext), its tag
authenticates, and its plaintext payload (len - 33 bytes) has the shape of
its type. A record that does not authenticate is damage: replay stops there.
Readers get the record back in plaintext form (len - 16, crc recomputed).

Nonces never repeat under a key: the salt is new for every segment
incarnation (a reused slot gets a fresh header), and within one incarnation
each offset holds at most one record, since the encoder only appends and
recovery continues in a fresh segment after the stop. Copies of a store
(backups, clones) draw their own salts for every segment they write.

Segments of the block-sealed encoding of earlier versions (flag 1: every
4 KiB block sealed at publish time, files longer than segment_size) are not
read: `refuse_block_sealed` raises BlockSealedSegment naming the file, which
the facade reports as a CorruptionError (docs/encryption.md says how to
convert such a store).

In the clear: segment and block headers, and each record's length, LSN and
type (so the sizes of keys plus values, and which records are commits or
checkpoints); keys, values, transaction ids and page images are sealed.
"""

from __future__ import annotations

import os
import struct

from .format import BLOCK, BLOCK_HDR_LEN, MARKED, REC_HDR_LEN, SEG_HDR_LEN, crc32c

__all__ = ["SEALED_RECORDS", "SEALED_BLOCKS", "TAG", "NoKeyError", "BlockSealedSegment", "is_record_sealed",
           "refuse_block_sealed", "seal_header", "record_opener", "RecordSealer", "MAX_SEGMENT"]


class NoKeyError(Exception):
    """An encrypted WAL file read without a key. `path` names it; pagestore's facade
    reports it as EncryptionError (wal does not import pagestore)."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path


class BlockSealedSegment(Exception):
    """A segment in the retired block-sealed encoding (header flag 1). `path` names
    it; pagestore's facade reports it as CorruptionError."""

    def __init__(self, path: str):
        super().__init__(f"{path}: WAL segment is sealed in 4 KiB blocks (header flag 1), an "
                         "encoding this version does not read; docs/encryption.md says how to "
                         "convert the store")
        self.path = path


SEALED_RECORDS = 2
SEALED_BLOCKS = 1                   # retired: refused, never written
TAG = 16
KEY_ID_AT = SEG_HDR_LEN             # 44
SALT_AT = KEY_ID_AT + 1             # 45
CHECK_AT = SALT_AT + 8              # 53
_HEADER_AD = b"pagestore/walseg/v2\0"
_CHECK_OFFSET = b"\xff\xff\xff\xff"  # never a record offset: segments are < 4 GiB
_u32 = struct.Struct("<I")
_len_crc = struct.Struct("<II")
MAX_SEGMENT = 0xFFFFFFFF


def is_record_sealed(header) -> bool:
    """True for the header of a record-sealed segment."""
    return header is not None and header.flags == SEALED_RECORDS


def refuse_block_sealed(header, path: str) -> None:
    """Raise BlockSealedSegment naming `path` if `header` is of the retired block-sealed kind."""
    if header is not None and header.flags == SEALED_BLOCKS:
        raise BlockSealedSegment(path)


def seal_header(block0, cipher, salt: bytes | None = None) -> bytes:
    """Block 0 of a record-sealed segment from the header block `block0` (plain, or
    laid out by an encoder with reserved tags); `salt` is drawn at random unless given."""
    head = bytearray(block0[:BLOCK])
    # the written-mark bit (wal/format.py) says how block headers read: kept
    struct.pack_into("<H", head, 10, SEALED_RECORDS | (struct.unpack_from("<H", head, 10)[0] & MARKED))
    struct.pack_into("<I", head, 40, crc32c(bytes(head[:40])))
    kid = cipher.key_id
    salt = os.urandom(8) if salt is None else bytes(salt)
    head[KEY_ID_AT] = kid
    head[SALT_AT:CHECK_AT] = salt
    head[CHECK_AT:CHECK_AT + TAG] = cipher.tag(kid, salt + _CHECK_OFFSET, _HEADER_AD + bytes(head[:SALT_AT]))
    return bytes(head)


def record_opener(header, buf, cipher, path):
    """None for a segment that is not record-sealed; else f(offset, stored record bytes)
    -> the record in plaintext form, or None if it does not authenticate; its
    `scan_args` (key, salt) are for a bulk scanner that reads sealed segments.

    Checks the segment's key check first: NoKeyError without a cipher, the
    cipher's EncryptionError naming `path` if it fails.
    """
    if not is_record_sealed(header):
        return None
    if cipher is None:
        raise NoKeyError(f"{path}: WAL segment is encrypted and the store was opened without "
                         "an encryption_key", path=path)
    head = bytes(buf[:CHECK_AT + TAG])
    kid, salt = head[KEY_ID_AT], head[SALT_AT:CHECK_AT]
    cipher.check_tag(kid, salt + _CHECK_OFFSET, head[CHECK_AT:CHECK_AT + TAG],
                     _HEADER_AD + head[:SALT_AT], f"{path}: WAL segment header", path)
    decrypt = cipher.decryptor(kid)

    def open_record(offset: int, raw):
        n = len(raw) - TAG
        if n < 17:
            return None
        mv = memoryview(raw)
        plain = decrypt(salt + _u32.pack(offset), mv[17:], mv[4:17])
        if plain is None:
            return None
        head = bytearray(mv[:17])
        _len_crc.pack_into(head, 0, 0, n)
        crc = crc32c(plain, crc32c(bytes(head[4:17])))
        _u32.pack_into(head, 0, crc)
        return bytes(head) + plain
    # what a bulk scanner that reads sealed segments needs (pagestore._native.wal_scan)
    open_record.scan_args = dict(key=cipher.key_bytes(kid), salt=salt)
    return open_record


class RecordSealer:
    """Seals, in place, the records of one segment buffer that an encoder with
    reserved tags (`Core.wal_reserve_tags`) laid out: the same bytes the C
    encoder writes when it seals (nonce salt | u32 offset, associated data the
    record's bytes [4, 17), crc over the ciphertext and tag).

    `seal_to(buf, end)` seals every record that ends at or before offset
    `end` (a record boundary: the encoder's end of log, or the segment's data
    end) that is not sealed yet; the first call seals the header block, with
    `salt` or a random one. The caller serialises calls per segment and
    writes bytes only below `end` after the call. Records never span
    segments; a record may span blocks, whose headers it skips.
    """

    __slots__ = ("cipher", "salt", "pos", "_encrypt")

    def __init__(self, cipher, salt: bytes | None = None):
        self.cipher = cipher
        self.salt = salt
        self.pos = 0                 # offset up to which the segment is sealed (0: header not yet)
        self._encrypt = cipher.encryptor(cipher.key_id)

    def seal_to(self, buf, end: int) -> None:
        """Seal in place every record of `buf` ending at or before `end` not sealed yet (see the
        class docstring)."""
        if self.pos == 0:
            if self.salt is None and any(buf[SALT_AT:CHECK_AT + TAG]):
                self.salt = bytes(buf[SALT_AT:CHECK_AT])      # a header sealed already (Wal.start)
            buf[0:BLOCK] = seal_header(buf[:BLOCK], self.cipher, self.salt)
            self.salt = bytes(buf[SALT_AT:CHECK_AT])
            self.pos = BLOCK
        pos, salt, encrypt = self.pos, self.salt, self._encrypt
        mv = memoryview(buf)
        while pos < end:
            if pos % BLOCK == 0:
                pos += BLOCK_HDR_LEN
                if pos >= end:
                    break
            room = BLOCK - pos % BLOCK
            if room >= REC_HDR_LEN:
                length = _u32.unpack_from(buf, pos + 4)[0]
                if REC_HDR_LEN + TAG <= length <= room:
                    # the common case, a record inside one block: sealed where it lies
                    top = pos + length
                    buf[pos + REC_HDR_LEN:top] = encrypt(salt + _u32.pack(pos), mv[pos + REC_HDR_LEN:top - TAG],
                                                         mv[pos + 4:pos + REC_HDR_LEN])
                    _u32.pack_into(buf, pos, crc32c(mv[pos + 4:top]))
                    pos = top
                    continue
            spans = _spans(pos, REC_HDR_LEN)
            head = b"".join(bytes(buf[a:b]) for a, b in spans)
            length = _u32.unpack_from(head, 4)[0]
            if length < REC_HDR_LEN + TAG:
                raise ValueError(f"record at offset {pos}: length {length} is not a sealed record's")
            spans = _spans(pos, length)
            raw = b"".join(bytes(buf[a:b]) for a, b in spans)
            sealed = encrypt(salt + _u32.pack(pos), raw[REC_HDR_LEN:length - TAG], raw[4:REC_HDR_LEN])
            out = bytearray(raw[:REC_HDR_LEN]) + sealed
            _u32.pack_into(out, 0, crc32c(bytes(out[4:])))
            at = 0
            for a, b in spans:
                buf[a:b] = out[at:at + b - a]
                at += b - a
            pos = spans[-1][1]
        self.pos = max(pos, self.pos)


def _spans(pos: int, n: int) -> list:
    """[(start, stop)] offsets holding n logical bytes from `pos`, block headers skipped."""
    out = []
    while n:
        if pos % BLOCK == 0:
            pos += BLOCK_HDR_LEN
        take = min(n, BLOCK - pos % BLOCK)
        out.append((pos, pos + take))
        pos += take
        n -= take
    return out

