"""A long replay reads the page file in bulk first, encrypted or not.

When the records to replay reach about one per page on disk, replay reads
the page file sequentially into free page memory (`Core.preload`) instead of
one miss callback per page; an encrypted page file is opened in bulk on the
way (`Cipher.open_pages`, C). A page that does not authenticate is zeroed and
skipped, so the miss that later needs it reports it by name.
"""

import os
import random

import pytest

import pagestore
from pagestore import _native
from pagestore.recovery import opening
from pagestore.cipher import PAGE_RESERVE, Cipher
from pagestore.errors import EncryptionError

KEY = bytes(range(32))
OPTS = dict(memory_size=64 << 20, checkpoint_interval=3600)
N = 20_000


def _value(i, gen):
    return b"v%d-%06d-" % (gen, i) + bytes(60)


def _crashed_store(path, **opts):
    """N keys checkpointed, then every key rewritten and the process killed."""
    with pagestore.open(path, **OPTS, **opts) as db:
        for i in range(N):
            db.put(b"k%06d" % i, _value(i, 0))
    db = pagestore.open(path, **OPTS, **opts)
    for i in range(N):
        db.put(b"k%06d" % i, _value(i, 1))
    db._abandon()
    pages = os.path.getsize(os.path.join(path, "pages.dat")) // 4096
    assert N > 2 * pages                  # enough records to trigger the preload
    return pages


@pytest.mark.parametrize("encrypted", [False, True])
def test_replay_of_a_long_log_loads_pages_in_bulk_not_by_misses(tmp_path, encrypted):
    if encrypted and not _native.wal_seal_available():
        pytest.skip("no libcrypto.so: encrypted pages are left to the misses")
    opts = dict(encryption_key=KEY) if encrypted else {}
    pages = _crashed_store(str(tmp_path), **opts)
    with pagestore.open(str(tmp_path), **OPTS, **opts) as db:
        assert db.recovery["records_replayed"] >= N
        assert db.stats()["page_loads"] < pages // 10
        assert all(db[b"k%06d" % i] == _value(i, 1) for i in range(0, N, 97))


def test_without_the_preload_the_same_replay_misses_on_most_pages(tmp_path, monkeypatch):
    """The control of the test above: its page_loads bound can fail."""
    pages = _crashed_store(str(tmp_path), encryption_key=KEY)
    monkeypatch.setattr(opening, "PRELOAD_RECORDS_PER_PAGE", 1e9)
    with pagestore.open(str(tmp_path), **OPTS, encryption_key=KEY) as db:
        assert db.stats()["page_loads"] > pages // 2


def test_a_page_that_fails_in_the_preload_is_reported_by_its_miss(tmp_path):
    if not _native.wal_seal_available():
        pytest.skip("no libcrypto.so")
    path = str(tmp_path)
    _crashed_store(path, encryption_key=KEY)
    pf = os.path.join(path, "pages.dat")
    victim = os.path.getsize(pf) // 4096 // 2
    with open(pf, "r+b") as f:
        f.seek(victim * 4096 + 100)
        b = f.read(1)
        f.seek(victim * 4096 + 100)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(EncryptionError, match=f"pages.dat: page {victim}: authentication failed"):
        with pagestore.open(path, **OPTS, encryption_key=KEY) as db:
            for i in range(N):
                db[b"k%06d" % i]


def _sealed(c, ids, ps=4096, seed=3):
    rng = random.Random(seed)
    plain = [rng.randbytes(ps - PAGE_RESERVE) + bytes(PAGE_RESERVE) for _ in ids]
    return plain, bytearray(b"".join(c.seal_page(p, pid) for p, pid in zip(plain, ids)))


@pytest.mark.parametrize("bulk", [True, False])
def test_open_pages_opens_what_seal_page_sealed_under_every_held_key(tmp_path, bulk):
    if bulk and not _native.wal_seal_available():
        pytest.skip("no libcrypto.so")
    kf = tmp_path / "keys"
    kf.write_text("1 " + "11" * 32 + "\n")
    old = Cipher.from_option(str(kf))
    kf.write_text("1 " + "11" * 32 + "\n2 " + "22" * 32 + "\n")
    new = Cipher.from_option(str(kf))
    new.bulk = new.bulk and bulk
    plain_a, buf_a = _sealed(old, [10, 11, 12])
    plain_b, buf_b = _sealed(new, [13, 14])
    buf = buf_a + buf_b
    assert new.open_pages(buf, 10, "/s/pages.dat", 4096) == 5
    assert bytes(buf) == b"".join(plain_a + plain_b)


@pytest.mark.parametrize("bulk", [True, False])
def test_open_pages_names_the_first_page_that_fails_or_zeroes_it_when_asked(bulk):
    if bulk and not _native.wal_seal_available():
        pytest.skip("no libcrypto.so")
    c = Cipher.from_option(KEY)
    c.bulk = c.bulk and bulk
    plain, buf = _sealed(c, [20, 21, 22, 23])
    buf[2 * 4096 + 7] ^= 1                       # page 22
    work = bytearray(buf)
    with pytest.raises(EncryptionError, match="page 22: authentication failed"):
        c.open_pages(work, 20, "/s/pages.dat", 4096)
    work = bytearray(buf)
    assert c.open_pages(work, 20, "/s/pages.dat", 4096, skip_bad=True) == 3
    assert work[:2 * 4096] == b"".join(plain[:2]) and work[3 * 4096:] == plain[3]
    assert work[2 * 4096:3 * 4096] == bytes(4096)
    moved = bytearray(buf[:4096])
    with pytest.raises(EncryptionError, match="page 21"):
        c.open_pages(moved, 21, "/s/pages.dat", 4096)      # page 20's image at 21
    with pytest.raises(EncryptionError, match="never sealed"):
        c.open_pages(bytearray(4096), 5, "/s/pages.dat", 4096)
