"""At-rest encryption: AES-256-GCM over pages and records, with key ids for rotation.

Format text and the reasoning behind it: docs/encryption.md. All integers are
little-endian; P = page size, U = P - PAGE_RESERVE.

Sealed page (same size as the plain page; the tree never uses [U, P)):

    off      size  field
    0        U     ciphertext of plain bytes [0, U)
    U + 0    1     key_id (1..255; 0 never seals, so an all-zero slot is refused)
    U + 1    3     reserved = 0
    U + 4    12    nonce (random)
    U + 16   16    GCM tag
    associated data: b"pagestore/page/v1\\0" | u16 len(page_context) |
                     page_context | u64 page_id | bytes [U, U+4) of the trailer

Sealed record (`seal`/`open`, for recovery files and the WAL), 29 bytes longer:

    off      size  field
    0        1     key_id
    1        12    nonce (random)
    13       n     ciphertext of the n plain bytes
    13 + n   16    GCM tag
    associated data: b"pagestore/record/v1\\0" | key_id | context

WAL records are sealed in place, nonce = segment salt | record offset, with
the record's length, LSN and type as associated data: wal/recseal.py has the
layout (the C encoder seals them, or, without libcrypto, `encryptor` does).

Key option: 32 raw bytes (key id 1), or the path of a key file whose lines are
`<id> <64 hex digits>` (id 1..255; blank lines and `#` comments allowed). The
last line is the current key, used for every new seal; every listed key still
opens what it sealed. A wrong key, unknown key id or any changed byte raises
EncryptionError naming the file (and page): plaintext garbage is never returned.

Nonces are 96 random bits per seal (WAL records aside: their salt is random
per segment and each offset holds one record): pages are rewritten in place, copied,
restored and re-checkpointed after crashes, so any counter or position-derived
nonce would need durable, crash-proof state to never repeat, and one repeat
under GCM leaks the XOR of two plaintexts and the authentication key. With
random nonces the collision odds stay below 2**-32 for the first 2**32 seals
under one key (NIST SP 800-38D); rotate keys long before that (16 TiB of 4 KiB
pages).
"""

from __future__ import annotations

import os
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pagestore.checkpoint.page_header import PAGE_SIZES

from . import _native
from .errors import ConfigError, EncryptionError

KEY_SIZE = 32
NONCE_SIZE = 12
TAG_SIZE = 16
PAGE_RESERVE = 32                          # key_id 1 | reserved 3 | nonce 12 | tag 16
RECORD_OVERHEAD = 1 + NONCE_SIZE + TAG_SIZE
MAX_KEY_ID = 255
# bound into every sealed page's associated data (the page file's name in format
# version 1): a format constant, DO NOT CHANGE even if the file is renamed
DEFAULT_PAGE_CONTEXT = b"pages.dat"
OPTION = "encryption_key"

_PAGE_AD = b"pagestore/page/v1\0"
_RECORD_AD = b"pagestore/record/v1\0"
_ZERO_RESERVE = bytes(PAGE_RESERVE)
_U64 = struct.Struct("<Q")


class Cipher:
    """AES-256-GCM sealing with one reused AESGCM object per key; thread-safe."""

    page_reserve = PAGE_RESERVE
    overhead = RECORD_OVERHEAD

    def __init__(self, keys: dict, current: int, page_context: bytes = DEFAULT_PAGE_CONTEXT):
        if current not in keys:
            raise ValueError(f"current key id {current} is not among the keys")
        for kid, key in keys.items():
            if not 1 <= kid <= MAX_KEY_ID or len(key) != KEY_SIZE:
                raise ValueError(f"key id {kid}: ids are 1..255 and keys {KEY_SIZE} bytes")
        self._aes = {kid: AESGCM(bytes(key)) for kid, key in keys.items()}
        self._keys = {kid: bytes(key) for kid, key in keys.items()}  # for the C WAL encoder and scanner
        self.key_id = current
        self._page_ad = _PAGE_AD + struct.pack("<H", len(page_context)) + bytes(page_context)
        # the C core seals chunks of pages and records without the GIL when the
        # system's libcrypto loads; this module's per-item sealing is the reference
        self.bulk = _native.wal_seal_available()
        # ps_open_pages' key table: 256 slots of 32 bytes, then 256 "held" flags
        tab = bytearray(256 * KEY_SIZE + 256)
        for kid, key in self._keys.items():
            tab[kid * KEY_SIZE:(kid + 1) * KEY_SIZE] = key
            tab[256 * KEY_SIZE + kid] = 1
        self._keytab = bytes(tab)

    @classmethod
    def from_option(cls, value, page_context: bytes = DEFAULT_PAGE_CONTEXT) -> "Cipher":
        """The `encryption_key` option: 32 raw bytes (key id 1) or a key file path."""
        if isinstance(value, (bytes, bytearray, memoryview)):
            if len(value) != KEY_SIZE:
                raise ConfigError(f"option {OPTION!r}: a raw key must be {KEY_SIZE} bytes, "
                                  f"got {len(value)}", option=OPTION)
            return cls({1: bytes(value)}, 1, page_context)
        if isinstance(value, (str, os.PathLike)):
            keys, current = load_key_file(value)
            return cls(keys, current, page_context)
        raise ConfigError(f"option {OPTION!r}: must be {KEY_SIZE} bytes or the path of a key "
                          f"file, got {type(value).__name__}", option=OPTION)

    @property
    def key_ids(self) -> list:
        """The key ids this cipher can open, ascending."""
        return sorted(self._aes)

    def __repr__(self) -> str:                      # never shows key material
        return f"Cipher(AES-256-GCM, key ids {self.key_ids}, sealing with {self.key_id})"

    # -- pages -----------------------------------------------------------------
    def seal_page(self, plain, page_id: int) -> bytes:
        """The on-disk image of plain page `page_id` (same length as `plain`)."""
        mv = memoryview(plain)
        u = len(mv) - PAGE_RESERVE
        if mv[u:].tobytes() != _ZERO_RESERVE:
            raise ValueError(f"page {page_id}: the last {PAGE_RESERVE} bytes of a plain page "
                             "must be zero (they are not encrypted)")
        kid = self.key_id
        head = bytes((kid, 0, 0, 0))
        nonce = os.urandom(NONCE_SIZE)
        ad = self._page_ad + _U64.pack(page_id) + head
        ct = memoryview(self._aes[kid].encrypt(nonce, mv[:u], ad))
        return b"".join((ct[:u], head, nonce, ct[u:]))

    def seal_pages(self, page_ids, images, out, ps: int) -> None:
        """`seal_page` of every page of `images` (page_ids[i] at i * ps) into `out`;
        in one GIL-free C call when `bulk`."""
        if self.bulk:
            _native.seal_pages(self._keys[self.key_id], self.key_id, self._page_ad, page_ids,
                               images, out, ps)
            return
        mv, dst = memoryview(images), memoryview(out)
        for i, pid in enumerate(page_ids):
            dst[i * ps:(i + 1) * ps] = self.seal_page(mv[i * ps:(i + 1) * ps], pid)

    def seal_records(self, buf, start: int, end: int, checkpoint_id: int, writer: int,
                     offset: int) -> int:
        """Seal the plain recovery-file records in buf[start:end] in place (C, needs
        `bulk`); the new end. The per-record reference is checkpoint/recovery_file.py's."""
        kid = self.key_id
        return _native.seal_records(self._keys[kid], kid, checkpoint_id, writer, offset, buf,
                                    start, end)

    def open_pages(self, buf, first_id: int, path, ps: int, *, skip_bad: bool = False) -> int:
        """Open the sealed pages first_id.. of writable `buf` in place (C when `bulk`,
        else `open_page` each). A page that does not authenticate raises `open_page`'s
        EncryptionError, or with `skip_bad` is zeroed (it then fails its page check and
        a later read reports it). Returns the number of pages opened."""
        mv = memoryview(buf)
        n = len(mv) // ps
        if self.bulk:
            got, bad = _native.open_pages(self._keytab, self._page_ad, first_id, mv[:n * ps], ps,
                                          skip_bad)
            if bad is None:
                return got
            # the reference names the failure (the page's bytes are still as read)
            raw = bytes(mv[bad * ps:(bad + 1) * ps])
            self.open_page(raw, first_id + bad, path)
            raise EncryptionError(f"{path}: page {first_id + bad}: did not open in C but opens "
                                  "in Python: report this", path=path)
        opened = 0
        for i in range(n):
            page = mv[i * ps:(i + 1) * ps]
            try:
                page[:] = self.open_page(page, first_id + i, path)
                opened += 1
            except EncryptionError:
                if not skip_bad:
                    raise
                page[:] = bytes(ps)
        return opened

    def page_opener(self) -> tuple:
        """(key table, associated-data prefix) with which the C core opens sealed
        pages on a page miss (`ps_set_page_key`; the table is `open_pages`')."""
        return self._keytab, self._page_ad

    def open_page(self, raw, page_id: int, path) -> bytes:
        """The plain page from its on-disk image; EncryptionError if it does not authenticate."""
        raw = memoryview(raw)
        u = len(raw) - PAGE_RESERVE
        if u <= 0:
            raise EncryptionError(f"{path}: page {page_id}: {len(raw)} bytes is too short for "
                                  "a sealed page", path=path)
        kid = raw[u]
        aes = self._aes.get(kid) or self._no_key(kid, raw, f"{path}: page {page_id}", path)
        try:
            plain = aes.decrypt(raw[u + 4:u + 16], b"".join((raw[:u], raw[u + 16:])),
                                self._page_ad + _U64.pack(page_id) + raw[u:u + 4].tobytes())
        except InvalidTag:
            raise EncryptionError(
                f"{path}: page {page_id}: authentication failed (sealed with key id {kid}): wrong "
                "key, a changed byte, or a page moved from another position or file",
                path=path) from None
        return plain + _ZERO_RESERVE

    def open_header(self, raw_first_page, path) -> bytes:
        """Open page 0 (the file header). If it fails as a whole, a shorter standard page
        size that authenticates is the file's real page size: its plaintext is returned so
        the caller can report the page_size mismatch; otherwise the first error is raised."""
        raw = memoryview(raw_first_page)
        try:
            return self.open_page(raw, 0, path)
        except EncryptionError as first:
            for size in PAGE_SIZES:
                if size < len(raw):
                    try:
                        return self.open_page(raw[:size], 0, path)
                    except EncryptionError:
                        pass
            raise EncryptionError(f"{first} (is this the store's key and page_size?)",
                                  path=path) from None

    # -- sealed WAL records (wal/recseal.py; the C encoder seals them) ------------
    def encoder_key(self) -> tuple:
        """(key id, key bytes) of the current key, for the C encoder's AES-GCM context."""
        return self.key_id, self._keys[self.key_id]

    def key_bytes(self, kid: int) -> bytes:
        """Key `kid` for the C scanner of sealed WAL records (KeyError if not held)."""
        return self._keys[kid]

    def tag(self, kid: int, nonce: bytes, ad: bytes) -> bytes:
        """The GCM tag of empty plaintext under key `kid` (a segment's key check)."""
        return self._aes[kid].encrypt(nonce, b"", ad)

    def check_tag(self, kid: int, nonce: bytes, tag, ad: bytes, where: str, path) -> None:
        """EncryptionError naming `path` unless `tag` authenticates under key `kid`."""
        aes = self._aes.get(kid) or self._no_key(kid, memoryview(bytes((kid,))), where, path)
        try:
            aes.decrypt(nonce, bytes(tag), ad)
        except InvalidTag:
            raise EncryptionError(f"{where}: key check failed (sealed with key id {kid}): wrong key "
                                  "or a changed byte", path=path) from None

    def encryptor(self, kid: int):
        """f(nonce, plaintext, ad) -> ciphertext+tag under key `kid` (the Python sealer
        of WAL records, wal/recseal.py, when the C encoder cannot seal)."""
        return self._aes[kid].encrypt

    def decryptor(self, kid: int):
        """f(nonce, ciphertext+tag, ad) -> plaintext, or None if it does not authenticate."""
        decrypt = self._aes[kid].decrypt

        def open_(nonce, data, ad):
            try:
                return decrypt(nonce, data, ad)
            except InvalidTag:
                return None
        return open_

    # -- records ---------------------------------------------------------------
    def seal(self, data, context: bytes) -> bytes:
        """key_id | nonce | ciphertext | tag, bound to `context` (e.g. file kind and position)."""
        kid = self.key_id
        nonce = os.urandom(NONCE_SIZE)
        ad = _RECORD_AD + bytes((kid,)) + bytes(context)
        return b"".join((bytes((kid,)), nonce, self._aes[kid].encrypt(nonce, data, ad)))

    def open(self, sealed, context: bytes, path) -> bytes:
        """The plain bytes of a sealed record; EncryptionError if it does not authenticate."""
        raw = memoryview(sealed)
        if len(raw) < RECORD_OVERHEAD:
            raise EncryptionError(f"{_rec(path, context)}: {len(raw)} bytes is shorter than the "
                                  f"{RECORD_OVERHEAD}-byte seal overhead", path=path)
        kid = raw[0]
        aes = self._aes.get(kid) or self._no_key(kid, raw, _rec(path, context), path)
        try:
            return aes.decrypt(raw[1:1 + NONCE_SIZE], raw[1 + NONCE_SIZE:],
                               _RECORD_AD + bytes((kid,)) + bytes(context))
        except InvalidTag:
            raise EncryptionError(
                f"{_rec(path, context)}: authentication failed (sealed with key id {kid}): wrong "
                "key, a changed byte, or a record moved from another position or file",
                path=path) from None

    def _no_key(self, kid: int, raw, where: str, path):
        if kid == 0:
            if raw.tobytes() == bytes(len(raw)):
                raise EncryptionError(f"{where}: all zero bytes, never sealed (a slot the file "
                                      "has but no write reached)", path=path)
            raise EncryptionError(f"{where}: key id 0 is never used to seal: not a sealed "
                                  "image, or a changed byte", path=path)
        raise EncryptionError(f"{where}: sealed with key id {kid}, which the key option does "
                              f"not hold (it has {self.key_ids})", path=path)


def _rec(path, context) -> str:
    return f"{path}: sealed record (context {bytes(context)[:64]!r})"


# -- key files -------------------------------------------------------------------
def load_key_file(path) -> tuple:
    """({key_id: 32-byte key}, current key id) from a key file; ConfigError if malformed.
    Messages name the file and line, never key material."""
    def bad(msg):
        raise ConfigError(f"option {OPTION!r}: key file {os.fspath(path)!r}: {msg}", option=OPTION)
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as e:
        bad(f"cannot be read ({e.strerror})")
    try:
        lines = text.decode("ascii").splitlines()
    except UnicodeDecodeError:
        bad("is not ASCII text")
    keys, current = {}, None
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 2:
            bad(f"line {n}: expected '<id> <64 hex digits>', got {len(fields)} fields")
        sid, shex = fields
        if not sid.isdigit() or not 1 <= int(sid) <= MAX_KEY_ID:
            bad(f"line {n}: key id must be an integer 1..{MAX_KEY_ID}")
        kid = int(sid)
        if kid in keys:
            bad(f"line {n}: key id {kid} appears twice")
        if len(shex) != 2 * KEY_SIZE or any(c not in "0123456789abcdefABCDEF" for c in shex):
            bad(f"line {n}: key {kid} must be exactly {2 * KEY_SIZE} hex digits")
        keys[kid] = bytes.fromhex(shex)
        current = kid
    if current is None:
        bad("holds no key")
    return keys, current


def add_key(path, key: bytes | None = None) -> int:
    """Append a key (random unless given) under the next free id, making it the current
    key; creates the file with mode 0600 if missing. Returns the new key id."""
    keys = load_key_file(path)[0] if os.path.exists(path) else {}
    kid = max(keys, default=0) + 1
    if kid > MAX_KEY_ID:
        raise ConfigError(f"option {OPTION!r}: key file {os.fspath(path)!r} already uses "
                          f"key id {MAX_KEY_ID}", option=OPTION)
    key = os.urandom(KEY_SIZE) if key is None else bytes(key)
    if len(key) != KEY_SIZE:
        raise ValueError(f"a key is {KEY_SIZE} bytes, got {len(key)}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        if os.fstat(fd).st_size and not _ends_with_newline(path):
            os.write(fd, b"\n")
        os.write(fd, f"{kid} {key.hex()}\n".encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return kid


def _ends_with_newline(path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"
