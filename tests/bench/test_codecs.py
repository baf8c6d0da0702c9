"""bench/codecs.py: every codec checkpoints the same pages, and the figures come
from the stores' own checkpoint statistics."""

import pytest

from bench.codecs import codec_checkpoints


def test_every_codec_checkpoints_the_same_pages_and_compressors_write_fewer_bytes(tmp_path):
    out = codec_checkpoints(keys=20_000, rounds=2, codecs=("disabled", "skip_garbage", "lz4"),
                            data_dir=str(tmp_path), memory_size=16 << 20)
    c = out["codecs"]
    assert set(c) == {"disabled", "skip_garbage", "lz4"}
    assert len({r["pages"] for r in c.values()}) == 1 and c["disabled"]["pages"] > 100
    assert all(r["rounds"] == 2 and r["ckpt_ms_per_kpage"] > 0 for r in c.values())
    assert c["disabled"]["recovery_bytes_per_page"] > 4000
    assert c["lz4"]["recovery_bytes_per_page"] < c["skip_garbage"]["recovery_bytes_per_page"] \
        < c["disabled"]["recovery_bytes_per_page"]
    assert list(tmp_path.iterdir()) == []          # the stores are removed


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        codec_checkpoints(rounds=0)
