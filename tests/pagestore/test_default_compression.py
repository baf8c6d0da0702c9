"""The default recovery_compression is Ignite's, skip_garbage, whether or not
liblz4 loads; an explicit choice stands."""

import pagestore
from pagestore import _native, config


def test_default_is_skip_garbage_whether_or_not_liblz4_loads(monkeypatch):
    monkeypatch.setattr(_native, "lz4_available", lambda: True)
    assert config.make_config().recovery_compression == "skip_garbage"
    monkeypatch.setattr(_native, "lz4_available", lambda: False)
    assert config.make_config().recovery_compression == "skip_garbage"
    assert config.make_config(recovery_compression=None).recovery_compression == "skip_garbage"


def test_an_explicit_codec_is_kept(monkeypatch):
    for flag in (True, False):
        monkeypatch.setattr(_native, "lz4_available", lambda: flag)
        for name in config.COMPRESSIONS:
            assert config.make_config(recovery_compression=name).recovery_compression == name


def test_a_store_opened_with_defaults_checkpoints_with_the_default_codec(tmp_path):
    with pagestore.open(str(tmp_path), checkpoint_interval=3600) as db:
        for i in range(500):
            db.put(b"k%04d" % i, b"v" * 100)
        db.checkpoint()
        assert db.stats()["last_checkpoint"]["compression"] == config.default_compression()
