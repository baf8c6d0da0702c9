"""Recovery-file and marker formats: round trips and every validity rule."""

import struct

import pytest

from pagestore.checkpoint.format import (END, FILE_HEADER_SIZE, MARKER_SIZE, RECORD_HEADER, START, Marker,
                               MarkerCorrupt, RecoveryFileCorrupt, marker_name, pack_file_header,
                               pack_marker, pack_record_header, parse_name, record_crc,
                               recovery_file_name, unpack_file_header, unpack_marker)


def test_names_sort_by_checkpoint_id_and_parse_back():
    names = [recovery_file_name(9, 2), recovery_file_name(10, 0), marker_name(10, START), marker_name(9, END)]
    assert sorted(names)[0].startswith("0000000000000009")
    assert parse_name(recovery_file_name(10, 3)) == (10, "RECOVERY", 3)
    assert parse_name(marker_name(7, START)) == (7, "START", None)
    assert parse_name(marker_name(7, END)) == (7, "END", None)


def test_temp_and_foreign_names_are_not_parsed():
    assert parse_name(marker_name(7, START) + ".tmp") is None
    assert parse_name("7-START.bin") is None
    assert parse_name("notes.txt") is None


def test_file_header_round_trips():
    head = pack_file_header(42, 3, 4096, 1)
    assert len(head) == FILE_HEADER_SIZE
    h = unpack_file_header(head, "f")
    assert (h.checkpoint_id, h.writer, h.page_size, h.codec) == (42, 3, 4096, 1)


@pytest.mark.parametrize("offset", [0, 9, 12, 17, 29])
def test_file_header_any_flipped_byte_is_corruption_naming_the_file(offset):
    head = bytearray(pack_file_header(42, 3, 4096, 1))
    head[offset] ^= 0x40
    with pytest.raises(RecoveryFileCorrupt) as e:
        unpack_file_header(bytes(head), "cp/x.bin")
    assert e.value.path == "cp/x.bin" and "cp/x.bin" in str(e.value)


def test_short_file_header_is_corruption():
    with pytest.raises(RecoveryFileCorrupt, match="short header"):
        unpack_file_header(pack_file_header(1, 0, 4096, 0)[:20], "f")


def test_record_crc_covers_page_id_not_only_payload():
    payload = b"x" * 100
    head = bytearray(pack_record_header(77, 0, 0, payload))
    pid, codec, flags, n, crc = RECORD_HEADER.unpack(head)
    assert (pid, n) == (77, 100) and record_crc(bytes(head[:14]), payload) == crc
    head[0] ^= 1                        # page 76 instead of 77
    assert record_crc(bytes(head[:14]), payload) != crc


def test_marker_round_trips_every_field():
    m = Marker(START, 12, 3456, 789, 1000, 4, "wal")
    data = pack_marker(m)
    assert len(data) == MARKER_SIZE
    assert unpack_marker(data, "m", 12, START) == m


@pytest.mark.parametrize("offset", range(0, MARKER_SIZE, 5))
def test_marker_any_flipped_byte_is_refused(offset):
    data = bytearray(pack_marker(Marker(END, 12, 3456, 789, 1000, 4)))
    data[offset] ^= 0x10
    with pytest.raises(MarkerCorrupt):
        unpack_marker(bytes(data), "m", 12, END)


def test_marker_whose_content_disagrees_with_its_name_is_refused():
    data = pack_marker(Marker(START, 12, 3456))
    with pytest.raises(MarkerCorrupt, match="name says"):
        unpack_marker(data, "m", 13, START)
    with pytest.raises(MarkerCorrupt, match="name says"):
        unpack_marker(data, "m", 12, END)


def test_marker_of_wrong_size_is_refused():
    with pytest.raises(MarkerCorrupt, match="size"):
        unpack_marker(pack_marker(Marker(START, 1, 2)) + b"\0", "m", 1, START)


def test_layout_offsets_match_the_documented_table():
    head = pack_file_header(0x0102030405060708, 5, 8192, 3)
    assert head[0:8] == b"PSRECOVR"
    assert struct.unpack_from("<HHIQB", head, 8) == (1, 5, 8192, 0x0102030405060708, 3)
    m = pack_marker(Marker(START, 7, 99, 5, 44, 2, "checkpoint"))
    assert m[0:8] == b"PSCPMARK"
    assert struct.unpack_from("<HBBHHQQQQ", m, 8) == (1, START, 0, 2, 0, 7, 99, 5, 44)
