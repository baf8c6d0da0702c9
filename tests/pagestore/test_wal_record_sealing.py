"""Record-sealed WAL segments (wal/recseal.py), the one encrypted WAL format:
an encrypted store's encoder (or, without libcrypto, the Python sealer) seals
every record, the file keeps the plaintext layout, and nothing is readable or
changeable without the key."""

import os
import random
import signal
import struct
import subprocess
import sys
import warnings

import pytest
from crc32c import crc32c

from pagestore.diskio import SimFS
import pagestore
from pagestore import _native
from pagestore.wal.format import BLOCK, decode_segment_header
from pagestore.wal.reader import WalRecoveryWarning
from pagestore.wal.recseal import CHECK_AT, SALT_AT, SEALED_RECORDS

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from native_kit import wal_records  # noqa: E402

pytestmark = pytest.mark.skipif(not _native.wal_seal_available(),
                                reason="the C core cannot load libcrypto: only the Python sealer runs")

KEY = bytes(range(32))
OPTS = dict(memory_size=8 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)


def segments(path):
    wal = path / "wal"
    return sorted(wal / n for n in os.listdir(wal) if n.endswith(".wal"))


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_and_kill(path, body, **options):
    """Run `body` (code using `db`) in a child process with the store open, then
    SIGKILL it: what the files hold is what a kill -9 leaves."""
    code = (f"import os, signal, sys\nsys.path.insert(0, {ROOT!r})\nimport pagestore\n"
            f"db = pagestore.open({str(path)!r}, encryption_key={KEY!r}, **{dict(OPTS, **options)!r})\n"
            f"{body}\nos.kill(os.getpid(), signal.SIGKILL)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr.decode()[-2000:]


def records(raw):
    """(offset, stored bytes) of the records of a segment file, by the block structure."""
    return wal_records(raw, struct.unpack_from("<Q", raw, 24)[0], len(raw))


@pytest.mark.parametrize("mode", ["log_only", "fsync"])
def test_encrypted_store_seals_each_record_and_replays_after_a_kill(tmp_path, mode):
    path = tmp_path / "s"
    with pagestore.open(path, encryption_key=KEY, wal_mode=mode, **OPTS) as db:
        st = db.stats()
        assert st["wal_sealer"] == "c"
        assert st["wal_write_path"] == ("mmap" if mode == "log_only" else "pwrite")
    write_and_kill(path, """
for i in range(2000):
    db.put(b"key-%05d" % i, b"secret-value-%05d" % i)
with db.transaction() as tx:
    tx.put(b"tx-key", b"secret-tx-value")
""", wal_mode=mode)
    for seg in segments(path):
        raw = seg.read_bytes()
        h = decode_segment_header(raw)
        if h is None:
            continue
        assert h.flags == SEALED_RECORDS
        assert b"secret" not in raw and b"key-0" not in raw, seg
    with pagestore.open(path, encryption_key=KEY, wal_mode=mode, **OPTS) as db:
        assert db.recovery["records_replayed"] >= 2001
        assert db[b"key-01999"] == b"secret-value-01999"
        assert db[b"tx-key"] == b"secret-tx-value"
        assert len(db) == 2001


def test_sealed_records_open_with_the_documented_nonce_and_associated_data(tmp_path):
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    path = tmp_path / "s"
    write_and_kill(path, 'db.put(b"k1", b"v" * 6000)\ndb.put(b"k2", b"small")')   # k1 spans blocks
    raw = max(segments(path), key=lambda p: p.stat().st_mtime).read_bytes()
    head = raw[:BLOCK]
    salt = head[SALT_AT:CHECK_AT]
    aes = AESGCM(KEY)
    aes.decrypt(salt + b"\xff" * 4, head[CHECK_AT:CHECK_AT + 16], b"pagestore/walseg/v2\0" + head[:SALT_AT])
    puts = []
    for off, rec in records(raw):
        assert crc32c(rec[4:]) == struct.unpack_from("<I", rec)[0]
        plain = aes.decrypt(salt + struct.pack("<I", off), rec[17:], rec[4:17])
        assert len(plain) == len(rec) - 33
        if rec[16] == 1:                 # PUT: txid, klen, vlen, key, value
            _txid, kl, vl = struct.unpack_from("<QII", plain)
            puts.append((plain[16:16 + kl], plain[16 + kl:16 + kl + vl]))
    assert (b"k1", b"v" * 6000) in puts and (b"k2", b"small") in puts


def test_every_segment_gets_its_own_salt(tmp_path):
    path = tmp_path / "s"
    write_and_kill(path, 'for i in range(20000):\n    db.put(b"key-%06d" % i, b"x" * 100)')  # 3+ segments
    salts = [p.read_bytes()[SALT_AT:CHECK_AT] for p in segments(path)]
    assert len(salts) >= 3 and len(set(salts)) == len(salts)


def test_a_changed_ciphertext_byte_stops_replay_there_naming_file_and_offset(tmp_path):
    path = tmp_path / "s"
    write_and_kill(path, 'for i in range(100):\n    db.put(b"key-%03d" % i, b"secret-value-%03d" % i)')
    seg = max(segments(path), key=lambda p: p.stat().st_mtime)
    raw = bytearray(seg.read_bytes())
    recs = records(bytes(raw))
    off, rec = recs[60]
    # flip a ciphertext byte and make the crc agree: only the tag can tell
    at = off + 20
    raw[at] ^= 0x40
    fixed = bytes(raw[off:off + len(rec)])
    struct.pack_into("<I", raw, off, crc32c(fixed[4:]))
    seg.write_bytes(bytes(raw))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pagestore.open(path, encryption_key=KEY, **OPTS) as db:
            present = sum(db.get(b"key-%03d" % i) == b"secret-value-%03d" % i for i in range(100))
    text = " ".join(str(w.message) for w in caught if issubclass(w.category, WalRecoveryWarning))
    assert seg.name in text and str(off) in text, text
    assert present == 60 - sum(1 for o, r in recs[:60] if r[16] != 1)


def test_a_wrong_key_or_no_key_names_the_wal_file(tmp_path):
    path = tmp_path / "s"
    write_and_kill(path, 'db.put(b"k", b"v")')
    from pagestore.diskio import PosixFS
    from pagestore.cipher import Cipher
    from pagestore.wal.reader import RecoveryReport, scan
    from pagestore.wal.recseal import NoKeyError
    from pagestore.wal.segments import Segments
    for cipher, error in ((Cipher.from_option(bytes(32)), pagestore.EncryptionError), (None, NoKeyError)):
        segs = Segments(PosixFS(), str(path / "wal"), 1 << 20, cipher=cipher)
        segs.scan()
        try:
            with pytest.raises(error) as e:
                list(scan(segs, 0, RecoveryReport(0)))
        finally:
            segs.close_readers()
        assert "seg-" in str(e.value) and ".wal" in str(e.value), e.value
    with pagestore.open(path, encryption_key=KEY, **OPTS) as db:        # the right key still opens it
        assert db[b"k"] == b"v"


def test_archive_compaction_and_inspect_read_record_sealed_segments(tmp_path):
    path = tmp_path / "s"
    arch = tmp_path / "archive"
    with pagestore.open(path, encryption_key=KEY, wal_archive=str(arch), **OPTS) as db:
        for i in range(20000):
            db.put(b"key-%06d" % i, b"secret-%06d" % i)
            if i % 5000 == 4999:
                db.checkpoint()
    archived = [n for n in os.listdir(arch) if n.endswith(".wal")]
    assert archived
    for n in archived:
        assert b"secret-" not in (arch / n).read_bytes()
    from pagestore.__main__ import inspect_store
    from pagestore.cipher import Cipher
    from pagestore.wal.archive import iter_archive
    from pagestore.wal.compact import compact
    cipher = Cipher.from_option(KEY)
    wal = inspect_store(str(path), archive=str(arch), cipher=cipher)["wal"]
    assert sum(s["records"] for s in wal["segments"] if s["state"] == "segment") > 0
    assert wal["replay"]["clean"], wal["replay"]
    from pagestore.diskio import PosixFS
    before = [r.raw for r in iter_archive(PosixFS(), str(arch), 0, cipher=cipher)]
    st = compact(str(arch), cipher=cipher)
    assert st["records_in"] > 0 and any(n.endswith(".walc") for n in os.listdir(arch))
    for n in os.listdir(arch):
        assert b"secret-" not in (arch / n).read_bytes()
    after = [r.raw for r in iter_archive(PosixFS(), str(arch), 0, cipher=cipher)]
    assert after == before and any(b"secret-000000" in raw for raw in after)


def _crash_after(sim, body, **options):
    db = pagestore.open("/s", fs=sim, encryption_key=KEY, **dict(OPTS, **options))
    body(db)
    db._abandon()
    sim.crash(random.Random(1), "keep")          # a process kill: the OS keeps every write


def test_records_sealed_in_python_and_in_c_replay_under_either_sealer(monkeypatch):
    """Without libcrypto the store seals records in Python, to the bytes the C
    encoder writes: a store moved between the two replays everything, and no
    plaintext reaches a segment file either way."""
    sim = SimFS()

    def run(sealer, prefix, before):
        if sealer == "python":
            monkeypatch.setattr(_native, "wal_seal_available", lambda: False)

        def body(db):
            assert db.stats()["wal_sealer"] == sealer
            assert db.stats()["wal_write_path"] == ("pwrite" if sealer == "python" else "mmap")
            assert db.recovery["records_replayed"] >= min(before, 3000) and len(db) == before
            for i in range(3000):
                db.put(prefix + b"-%05d" % i, b"secret-" + prefix + b"-%05d" % i)
        _crash_after(sim, body)
        monkeypatch.undo()
    run("python", b"a", 0)
    run("c", b"b", 3000)
    run("python", b"c", 6000)
    with pagestore.open("/s", fs=sim, encryption_key=KEY, **OPTS) as db:
        assert len(db) == 9000 and db[b"a-02999"] == b"secret-a-02999" and db[b"c-00000"] == b"secret-c-00000"
    for n in sim.listdir("/s/wal"):
        raw = sim.open(f"/s/wal/{n}").pread(1 << 20, 0)
        assert b"secret-" not in raw, n
        h = decode_segment_header(raw)
        assert h is None or h.flags == SEALED_RECORDS


def test_a_block_sealed_segment_of_an_earlier_version_is_refused_naming_it(tmp_path):
    """Header flag 1 (4 KiB blocks sealed at publish) is no longer read: opening
    such a store raises CorruptionError naming the segment, and changes nothing."""
    path = tmp_path / "s"
    write_and_kill(path, 'db.put(b"k", b"v")')
    seg = segments(path)[0]
    raw = bytearray(seg.read_bytes())
    struct.pack_into("<H", raw, 10, 1)
    struct.pack_into("<I", raw, 40, crc32c(bytes(raw[:40])))
    seg.write_bytes(bytes(raw))
    with pytest.raises(pagestore.CorruptionError) as e:
        pagestore.open(path, encryption_key=KEY, **OPTS)
    assert e.value.path == str(seg) and "4 KiB blocks" in str(e.value)
    assert seg.read_bytes() == bytes(raw)
    from pagestore.cipher import Cipher
    from pagestore.verify import verify
    rep = verify(str(path), cipher=Cipher.from_option(KEY))     # verify reports it as a fault
    assert not rep["ok"] and any(f["file"] == str(seg) and "4 KiB blocks" in f["message"]
                                 for f in rep["faults"]), rep["faults"]
