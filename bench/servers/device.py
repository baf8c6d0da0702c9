"""Device and process write accounting for one measured window.

Two counters, both read by the kernel's own bookkeeping:

* ``/proc/diskstats``: sectors written (field 10, 512-byte units) of the block
  device that holds the run's directory. The window opens and closes with
  ``sync()``, so what the system under test wrote into the page cache during the
  window has reached the device by its end. The device is shared: whatever other
  processes wrote lands in the same counter, hence the second figure.
* ``/proc/PID/io`` ``wchar``: bytes handed to write()/pwrite() by given processes.
  The window reads it for the system under test and, as a check, for every other
  process on the machine ("others' wchar"): a large figure there means the device
  figure includes someone else's writes. ``write_bytes`` in the same file is not
  used: on this kernel it is charged per dirtied folio (up to 2 MiB) and overstates
  small buffered writers.
"""

from __future__ import annotations

import os


def block_device(path: str) -> str:
    """The diskstats name (``vda``, ``nvme0n1p2``...) of the device holding ``path``."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if int(p[0]) == major and int(p[1]) == minor:
                return p[2]
    raise LookupError(f"no /proc/diskstats entry for {path} (device {major}:{minor}); "
                      "device bytes cannot be measured on this file system")


def sectors_written(device: str) -> int:
    """Sectors (512 bytes) written to ``device`` since boot."""
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if p[2] == device:
                return int(p[9])
    raise LookupError(f"{device} is not in /proc/diskstats")


def wchar(pid: int) -> int:
    """``wchar`` of one process; 0 when it has exited or cannot be read."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def all_wchar() -> dict:
    """{pid: wchar} for every process readable now."""
    return {int(n): wchar(int(n)) for n in os.listdir("/proc") if n.isdigit()}


class Window:
    """Bytes written between ``open()`` and ``close()``: device, measured processes, others.

    ``pids`` is a callable returning the PIDs of the system under test at that moment
    (a server's processes change; pagestore is this process)."""

    def __init__(self, path: str, pids):
        self.device = block_device(path)
        self.pids = pids

    def open(self) -> None:
        """Flush what was written before, then read every counter."""
        os.sync()
        self.sectors0 = sectors_written(self.device)
        self.wchar0 = all_wchar()

    def close(self) -> dict:
        """Flush what the window wrote, read the counters again; byte deltas."""
        ours = set(self.pids())
        os.sync()
        sectors1 = sectors_written(self.device)
        wchar1 = all_wchar()
        mine = others = 0
        for pid, w in wchar1.items():
            # a process born inside the window started at 0
            d = max(0, w - self.wchar0.get(pid, 0))
            if pid in ours:
                mine += d
            elif pid != os.getpid():   # the harness itself: client sockets, no file writes
                others += d
        return {"device_bytes": (sectors1 - self.sectors0) * 512, "wchar_bytes": mine,
                "others_wchar_bytes": others, "device": self.device}
