"""Step-5 page writes of a plain posix page file go through one C call
(`_native.pwrite_pages`): every image lands at page_id * page_size, runs of
adjacent ids and isolated ids alike, and a failed write names the file."""

import os

import pytest

from pagestore.diskio import DiskIOError, PosixFS
from pagestore.pagefile import PageFile

PS = 4096


def test_images_land_at_their_offsets_in_runs_and_alone(tmp_path):
    pf = PageFile(PosixFS(), str(tmp_path), PS)
    assert pf.direct_fd() is not None
    ids = [1, 2, 3, 7, 9, 10]
    images = b"".join(bytes([pid]) * PS for pid in ids)
    pf.write_pages(ids, images)
    assert pf.bytes_written == len(ids) * PS
    raw = (tmp_path / "pages.dat").read_bytes()
    assert len(raw) == 11 * PS
    for pid in range(11):
        want = bytes([pid]) * PS if pid in ids else bytes(PS)
        assert raw[pid * PS:(pid + 1) * PS] == want, pid
    pf.close()


def test_a_failed_page_write_is_a_disk_error_naming_the_file(tmp_path):
    pf = PageFile(PosixFS(), str(tmp_path), PS)
    fd = pf.direct_fd()
    ro = os.open(pf.path, os.O_RDONLY)
    os.dup2(ro, fd)                       # the page file's fd can no longer write
    os.close(ro)
    with pytest.raises(DiskIOError) as e:
        pf.write_pages([0], bytes(PS))
    assert "pages.dat" in str(e.value.filename) and e.value.errno is not None
    pf.close()
