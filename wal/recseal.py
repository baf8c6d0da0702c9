"""Record-sealed WAL segments (header flag 2): the encoder seals each record.

An encrypted store's WAL is written this way when the C core can load
libcrypto (`pagestore._native.wal_seal_available()`); otherwise it falls back
to sealing whole blocks at publish time (wal/sealed.py, flag 1). The file is
the logical segment of wal/format.py byte for byte (segment_size bytes; block
headers and record headers in plaintext), so it is written through a shared
mapping (log_only, background) or pwrite (fsync) exactly like a plaintext
one. All integers are little-endian; the C encoder (pagestore/csrc/walenc.c)
writes the same bytes.

Segment header additions (block 0):
    off  size  field
    10   2     flags = 2 (SEALED_RECORDS); the header crc at 40 covers it
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

In the clear: segment and block headers, and each record's length, LSN and
type (so the sizes of keys plus values, and which records are commits or
checkpoints); keys, values, transaction ids and page images are sealed.
"""

from __future__ import annotations

import os
import struct

from .format import BLOCK, SEG_HDR_LEN, crc32c
from .sealed import NoKeyError

__all__ = ["SEALED_RECORDS", "TAG", "is_record_sealed", "seal_header", "record_opener"]

SEALED_RECORDS = 2
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
    return header is not None and header.flags == SEALED_RECORDS


def seal_header(block0, cipher) -> bytes:
    """Block 0 of a record-sealed segment from the plaintext header block `block0`."""
    head = bytearray(block0[:BLOCK])
    struct.pack_into("<H", head, 10, SEALED_RECORDS)
    struct.pack_into("<I", head, 40, crc32c(bytes(head[:40])))
    kid = cipher.key_id
    salt = os.urandom(8)
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
