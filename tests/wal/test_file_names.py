"""pagestore.diskio.layout is the one grammar of the store's file names: what
the writers create is what the readers and tools parse. A name built anywhere
else (a writer's own f-string) that drifts from it fails here."""

import os

import pytest

import pagestore
from pagestore.diskio import layout

OPTS = dict(wal_segment_size=1 << 20, checkpoint_interval=3600.0, memory_size=16 << 20, checkpoint_threads=2)


def test_names_round_trip_through_the_grammar():
    assert layout.parse_slot(layout.slot_name(7)) == 7
    assert layout.parse_tail(layout.tail_name(layout.slot_name(3), 123456)) == (layout.slot_name(3), 123456)
    assert layout.parse_cp_name(layout.marker_name(12, "START")) == (12, "START", None)
    assert layout.parse_cp_name(layout.marker_name(12, "END")) == (12, "END", None)
    assert layout.parse_cp_name(layout.recovery_file_name(12, 5)) == (12, "RECOVERY", 5)
    assert layout.parse_archive_name(layout.archive_name(40)) == (40, "wal")
    assert layout.parse_archive_name(layout.compacted_name(40)) == (40, "walc")


def test_names_sort_in_id_order():
    ids = [1, 9, 10, 123, 10 ** 9]
    assert sorted(layout.marker_name(i, "START") for i in ids) == [layout.marker_name(i, "START") for i in ids]
    assert sorted(layout.archive_name(i) for i in ids) == [layout.archive_name(i) for i in ids]


@pytest.mark.parametrize("name", ["seg-1.wal", "seg-00000001.wal.tmp", "0000000000000001-START.bin.tmp",
                                  "1-END.bin", "seg-0000000000000001.walc.tmp", "notes.txt"])
def test_names_outside_the_grammar_are_not_the_stores(name):
    assert layout.parse_slot(name) is None
    assert layout.parse_cp_name(name) is None
    assert layout.parse_archive_name(name) is None


def test_a_marker_kind_outside_the_grammar_is_refused():
    with pytest.raises(ValueError):
        layout.marker_name(1, "BEGIN")


def test_every_file_a_store_writes_is_named_by_the_grammar(tmp_path):
    store, archive = tmp_path / "db", tmp_path / "archive"
    db = pagestore.open(str(store), wal_archive=str(archive), **OPTS)
    try:
        for round_ in range(3):
            for i in range(6000):
                db.put(b"k%06d" % i, bytes([round_]) * 200)
            db.checkpoint()
    finally:
        db.close()
    top = sorted(os.listdir(store))
    assert set(top) == {layout.LOCK, layout.PAGE_FILE, layout.WAL_DIR, layout.CP_DIR}, top
    slots = os.listdir(store / layout.WAL_DIR)
    assert layout.NEWEST in slots, slots
    assert all(layout.parse_slot(n) is not None for n in slots if n != layout.NEWEST), slots
    cp = os.listdir(store / layout.CP_DIR)
    kinds = {layout.parse_cp_name(n)[1] for n in cp if layout.parse_cp_name(n)}
    assert kinds >= {"START", "END"} and all(layout.parse_cp_name(n) for n in cp), cp
    arch = os.listdir(archive)
    assert arch and all(layout.parse_archive_name(n) for n in arch), arch
