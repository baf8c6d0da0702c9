"""SimFS: an in-memory file system that can be crashed (DESIGN.md §5).

Each file (an `_Inode`) holds its durable image, the pending operations
issued since its last fsync, and the current view that reads see. The
namespace exists twice: the live one (what `exists`/`open` see) and the
durable one; creations, removals and renames are pending directory operations
until `fsync_dir` of a directory they touch. `crash(rng, mode)` builds the
post-crash disk through simcrash.py and the SimFS carries on from it, with
every handle opened before the crash invalidated.

Mappings: `map()` hands out a bytearray that overlays bytes [0, size) of the
file. Stores into it are visible to reads at once (shared memory) but reach
the disk model only when `publish()` records them as a pending write: a
mapped range that was never published is lost even by a process kill.

Fault injection: `arm(name, hit)` raises SimulatedCrash at a crash point;
`arm_io(n)` raises it instead of performing the n-th mutating operation from
now. `arm_fault(n, err, persistent=...)` is SQLite's I/O-error loop and
RocksDB's FaultInjectionTestFS: the n-th mutating operation from now fails
with DiskIOError(err) (ENOSPC, EIO, EROFS, ...) and changes nothing; with
`persistent=True` every later one fails too, until `clear_fault()` (space
came back). The process goes on: this is an error to handle, not a crash. Mutating operations (counted in `io_count`): pwrite, fsync, fdatasync,
truncate, preallocate, open that creates or truncates, remove, rename,
fsync_dir, makedirs that creates, publish, Mapping.sync. After SimulatedCrash
every operation raises it again until `crash()`.
"""

from __future__ import annotations

import copy
import errno
import posixpath
import random
import threading

from .base import FileSystem, Lock
from .crashpoints import check_crash_point
from .errors import DiskIOError, LockedError, SimulatedCrash, make_error
from .simcrash import MODES, OUTCOMES, CrashReport, apply_dirop, crash_image, crash_namespace
from .simfile import SimFile, SimLock, SimMapping, _Inode

__all__ = ["SimFS", "SimFile", "SimMapping", "SimSnapshot"]

_ROOTS = frozenset({"/", "."})


def _norm(path: str) -> str:
    return posixpath.normpath(path) if path else "."


def _parent(path: str) -> str:
    return posixpath.dirname(path) or ("/" if path.startswith("/") else ".")


class SimSnapshot:
    """A frozen copy of a SimFS state; `clone()` gives a fresh SimFS from it."""

    def __init__(self, state: dict):
        self._state = state

    def clone(self) -> "SimFS":
        """A new SimFS in this snapshot's state."""
        sim = SimFS()
        sim._set_state(self._state)
        return sim


class SimFS(FileSystem):
    """The crash simulator; `direct=True` enforces O_DIRECT alignment rules."""

    def __init__(self, direct: bool = False):
        super().__init__()
        self.direct = direct
        self._lock = threading.RLock()
        self._live: dict[str, _Inode] = {}
        self._durable: dict[str, _Inode] = {}
        self._dirops: list[tuple[frozenset, tuple]] = []  # (directories touched, op)
        self._dirs: set[str] = set()
        self._locks: dict[str, SimLock] = {}
        self._epoch = 0
        self._crashed = False
        self._io_crash_at: int | None = None
        self._fault: tuple[int, int, bool] | None = None  # (at io_count, errno, persistent)
        self.faults_injected = 0
        self.io_count = 0
        self.last_crash: CrashReport | None = None

    # -- fault injection -------------------------------------------------
    def arm(self, name: str, hit: int = 1) -> None:
        """Raise SimulatedCrash at the `hit`-th pass of crash point `name` from now."""
        check_crash_point(name)
        self._points.arm(name, hit, "raise")

    def arm_io(self, n: int) -> None:
        """Raise SimulatedCrash instead of performing the n-th mutating operation from now."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        with self._lock:
            self._io_crash_at = self.io_count + n

    def arm_fault(self, n: int, err: int = errno.EIO, *, persistent: bool = False) -> None:
        """Fail the n-th mutating operation from now with DiskIOError(`err`).

        The failing operation changes nothing. With `persistent`, every later
        mutating operation fails the same way until `clear_fault()`.
        """
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        with self._lock:
            self._fault = (self.io_count + n, err, persistent)

    def clear_fault(self) -> None:
        """Stop failing operations (the disk has room again, or is writable)."""
        with self._lock:
            self._fault = None

    def disarm(self, name: str | None = None) -> None:
        super().disarm(name)
        if name is None:
            with self._lock:
                self._io_crash_at = None
                self._fault = None

    @property
    def crashed(self) -> bool:
        """True between a SimulatedCrash and the next crash()."""
        return self._crashed

    def crash_point(self, name: str) -> None:
        with self._lock:
            self._check()
        super().crash_point(name)

    def _fire(self, name: str, action: object) -> None:
        with self._lock:
            self._crashed = True
        raise SimulatedCrash(f"crash point {name}")

    def _check(self) -> None:
        if self._crashed:
            raise SimulatedCrash("SimFS has crashed; call crash() first")

    def _count_io(self, path: str | None = None) -> None:
        if self._io_crash_at is not None and self.io_count + 1 >= self._io_crash_at:
            self._io_crash_at = None
            self._crashed = True
            raise SimulatedCrash(f"armed I/O operation {self.io_count + 1}")
        fault = self._fault
        if fault is not None and self.io_count + 1 >= fault[0]:
            at, err, persistent = fault
            if not persistent:
                self._fault = None
            self.faults_injected += 1
            self.io_count += 1   # a failed operation is still an operation
            raise make_error(err, f"injected fault at I/O operation {self.io_count}", path)
        self.io_count += 1

    def _mutate(self, path: str | None = None) -> None:
        self._check()
        self._count_io(path)

    # -- namespace helpers --------------------------------------------------
    def _is_dir(self, path: str) -> bool:
        return path in _ROOTS or path in self._dirs

    def _need_parent(self, path: str) -> None:
        if not self._is_dir(_parent(path)):
            raise make_error(errno.ENOENT, "parent directory does not exist", path)

    def _file(self, path: str) -> _Inode:
        inode = self._live.get(path)
        if inode is None:
            err = errno.EISDIR if self._is_dir(path) else errno.ENOENT
            raise make_error(err, "no such file" if err == errno.ENOENT else "is a directory", path)
        return inode

    def _dirop(self, op: tuple, *paths: str) -> None:
        self._dirops.append((frozenset(_parent(p) for p in paths), op))

    # -- FileSystem ------------------------------------------------------
    def open(self, path: str, *, create: bool = False, truncate: bool = False, direct: bool = False) -> SimFile:
        path = _norm(path)
        with self._lock:
            self._check()
            inode = self._live.get(path)
            if inode is None:
                if not create or self._is_dir(path):
                    self._file(path)  # raises the right error
                self._need_parent(path)
                self._mutate(path)
                inode = _Inode()
                self._live[path] = inode
                self._dirop(("create", path, inode), path)
            elif truncate:
                if inode.mapbuf is not None:
                    raise DiskIOError(errno.EBUSY, "cannot truncate a mapped file", path)
                self._mutate(path)
                inode.do(("truncate", 0, None))
            return SimFile(self, path, inode, direct)

    def exists(self, path: str) -> bool:
        path = _norm(path)
        with self._lock:
            self._check()
            return path in self._live or self._is_dir(path)

    def listdir(self, path: str) -> list[str]:
        path = _norm(path)
        with self._lock:
            self._check()
            if not self._is_dir(path):
                raise make_error(errno.ENOENT, "no such directory", path)
            names = {posixpath.basename(p) for p in list(self._live) + list(self._dirs) if _parent(p) == path and p != path}
            return sorted(names)

    def makedirs(self, path: str) -> None:
        # Directories are durable as soon as they exist: the store creates
        # its directories once, and modelling their loss would only test
        # the parent of the store, which the store does not own.
        path = _norm(path)
        with self._lock:
            self._check()
            if path in self._live:
                raise make_error(errno.EEXIST, "a file has this name", path)
            missing = []
            p = path
            while not self._is_dir(p):
                missing.append(p)
                p = _parent(p)
            if missing:
                self._mutate(path)
                self._dirs.update(missing)

    def remove(self, path: str) -> None:
        path = _norm(path)
        with self._lock:
            self._check()
            inode = self._file(path)
            self._mutate(path)
            del self._live[path]
            self._dirop(("remove", path, inode), path)

    def rename(self, src: str, dst: str) -> None:
        src, dst = _norm(src), _norm(dst)
        with self._lock:
            self._check()
            inode = self._file(src)
            self._need_parent(dst)
            if self._is_dir(dst):
                raise make_error(errno.EISDIR, "rename target is a directory", dst)
            self._mutate(src)
            if src != dst:
                del self._live[src]
                self._live[dst] = inode
                self._dirop(("rename", src, dst, inode), src, dst)

    def fsync_dir(self, path: str) -> None:
        path = _norm(path)
        with self._lock:
            self._check()
            if not self._is_dir(path):
                raise make_error(errno.ENOENT, "no such directory", path)
            self._mutate(path)
            remaining = []
            for dirs, op in self._dirops:
                if path in dirs:
                    apply_dirop(self._durable, op)
                else:
                    remaining.append((dirs, op))
            self._dirops = remaining

    def size(self, path: str) -> int:
        path = _norm(path)
        with self._lock:
            self._check()
            return len(self._file(path).data)

    def map(self, path: str, size: int) -> SimMapping:
        if size <= 0:
            raise ValueError(f"mapping size must be > 0, got {size}")
        path = _norm(path)
        with self._lock:
            self._check()
            inode = self._file(path)
            if len(inode.data) < size:
                raise make_error(errno.EINVAL, f"file is {len(inode.data)} bytes, cannot map {size}", path)
            if inode.mapbuf is None:
                inode.mapbuf = bytearray(inode.data[:size])
            elif len(inode.mapbuf) != size:
                raise DiskIOError(errno.EBUSY, f"already mapped with size {len(inode.mapbuf)}", path)
            inode.maprefs += 1
            return SimMapping(self, path, inode, size)

    def lock(self, path: str) -> Lock:
        path = _norm(path)
        with self._lock:
            self._check()
            if path in self._locks:
                raise LockedError(path)
            if path not in self._live:
                self.open(path, create=True).close()  # like O_CREAT on the LOCK file
            lock = SimLock(self, path)
            self._locks[path] = lock
            return lock

    # -- crashing ------------------------------------------------------------
    def crash(self, rng=None, mode: str = "random", *, outcomes: tuple = OUTCOMES) -> CrashReport:
        """Simulate power loss (or a process kill, mode "keep") and continue from the result.

        `rng` is a random.Random or an int seed; `outcomes` restricts which
        write outcomes "random" mode may choose (for tests of one outcome).
        """
        if mode not in MODES:
            raise ValueError(f"unknown crash mode {mode!r}; expected one of {MODES}")
        bad = set(outcomes) - set(OUTCOMES)
        if bad or not outcomes:
            raise ValueError(f"outcomes must be a non-empty subset of {OUTCOMES}, got {outcomes!r}")
        if not isinstance(rng, random.Random):
            rng = random.Random(rng)
        with self._lock:
            report = CrashReport(mode)
            if mode == "keep":
                # A killed process leaves the kernel's namespace exactly as it was.
                report.dir_kept = len(self._dirops)
                ns = dict(self._live)
            else:
                ns = crash_namespace(self._durable, [op for _d, op in self._dirops], mode, rng, report)
            images: dict[int, bytearray] = {}
            for path in sorted(ns):  # sorted: the same seed gives the same disk
                inode = ns[path]
                if id(inode) not in images:
                    images[id(inode)] = crash_image(inode.durable, inode.pending, mode, rng, report, tuple(outcomes))
            fresh: dict[int, _Inode] = {}
            for key, img in images.items():
                node = _Inode()
                node.durable = img
                node.data = bytearray(img)
                fresh[key] = node
            report.lost_paths = sorted(set(self._live) - set(ns))
            self._live = {p: fresh[id(i)] for p, i in ns.items()}
            self._durable = dict(self._live)
            self._dirops = []
            self._locks = {}  # the process that held them is gone
            self._epoch += 1  # every earlier File / Mapping is now stale
            self._crashed = False
            self.last_crash = report
            return report

    # -- snapshots -------------------------------------------------------------
    def _get_state(self) -> dict:
        memo: dict[int, _Inode] = {}

        def cp(inode: _Inode) -> _Inode:
            if id(inode) not in memo:
                node = _Inode()
                node.durable = bytearray(inode.durable)
                node.data = inode.materialized()
                node.pending = list(inode.pending)
                memo[id(inode)] = node
            return memo[id(inode)]

        def cp_op(op: tuple) -> tuple:
            return tuple(cp(x) if isinstance(x, _Inode) else x for x in op)

        return {
            "live": {p: cp(i) for p, i in self._live.items()},
            "durable": {p: cp(i) for p, i in self._durable.items()},
            "dirops": [(d, cp_op(op)) for d, op in self._dirops],
            "dirs": set(self._dirs),
            "crashed": self._crashed,
            "io_count": self.io_count,
            "direct": self.direct,
        }

    def _set_state(self, state: dict) -> None:
        state = copy.deepcopy(state)  # the snapshot stays reusable
        with self._lock:
            self._live, self._durable = state["live"], state["durable"]
            self._dirops, self._dirs = state["dirops"], state["dirs"]
            self._crashed, self.io_count = state["crashed"], state["io_count"]
            self.direct = state["direct"]
            self._locks = {}
            self._epoch += 1

    def snapshot(self) -> SimSnapshot:
        """Freeze the current state (including a crashed flag) for repeated use."""
        with self._lock:
            return SimSnapshot(self._get_state())  # _get_state already copies

    def restore(self, snap: SimSnapshot) -> None:
        """Return this SimFS to `snap`; handles opened since become stale."""
        self._set_state(snap._state)

    def clone(self) -> "SimFS":
        """An independent SimFS in the same state (no open handles, locks or arms)."""
        return self.snapshot().clone()
