"""The checkpoint benchmark's kill -9 path on the real store, at a small size."""

import pytest

from bench import ckptbench
from bench.stores import pagestore_available


@pytest.mark.skipif(not pagestore_available()[0], reason="pagestore cannot be opened here")
def test_crash_in_step_5_is_recovered_and_timed(tmp_path):
    out = ckptbench.crash_recovery(30_000, data_dir=str(tmp_path), store_options=dict(memory_size=64 << 20),
                                   timeout=120)
    assert out.get("error") is None, out
    assert out["killed"] and out["crash_spec"].startswith("checkpoint.page_written@")
    assert out["lock"]["pages"] > 0 and out["lock"]["lock_ms"] >= 0
    assert out["pages_restored"] > 0 and out["recovery_s"] > 0
    assert out["read_recovery_files_s"] > 0 and out["recovery_file_bytes"] > 0
    assert out["missing_or_wrong"] == 0 and out["checked"] == 5000


def test_scattered_write_rate_writes_as_many_pages_as_asked_within_the_span_and_leaves_nothing(tmp_path):
    r = ckptbench.scattered_write_rate(300, 1000, str(tmp_path), rounds=3)
    assert (r["pages"], r["span_pages"], len(r["rates"])) == (300, 1000, 3)
    assert r["rate"] == sorted(r["rates"])[1] > 0
    assert ckptbench.scattered_write_rate(900, 1000, str(tmp_path), rounds=1)["pages"] == 500
    assert list(tmp_path.iterdir()) == []


def test_sequential_write_rate_is_positive(tmp_path):
    r = ckptbench.sequential_write_rate(4 << 20, str(tmp_path))
    assert r["bytes"] == 4 << 20 and r["rate"] > 0


def test_the_crash_child_assumes_the_checkpointers_chunk_size():
    # the crash point's hit count is computed from it: a mismatch would miss step 5
    import inspect
    from bench import ckptbench
    from pagestore.checkpoint.checkpointer import DEFAULT_CHUNK_PAGES
    assert inspect.signature(ckptbench.crash_recovery).parameters["chunk_pages"].default == DEFAULT_CHUNK_PAGES
