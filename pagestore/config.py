"""Options of `pagestore.open`, their documented defaults and their validation.

Every option is a keyword argument of `open`; an unknown name or a bad value
raises `ConfigError` (a `ValueError`) naming the option before anything on
disk is touched. `docs/options.md` lists the same table for users.
"""

from __future__ import annotations

import dataclasses
import os

from .errors import ConfigError

MiB = 1 << 20
GiB = 1 << 30
MAX_SLOTS = 0x7FFFFFFF          # page-memory slots the C core can number
MAX_WAL_SEGMENT = 2 << 30       # Ignite's upper bound for a WAL segment (2 GB)

WAL_MODES = ("fsync", "log_only", "background")
RECOVERY_DATA = ("checkpoint", "wal")
COMPRESSIONS = ("disabled", "skip_garbage", "snappy", "zstd", "lz4")
THROTTLING = ("disabled", "exponential_backoff", "fill_rate", "speed_based", "adaptive")


def default_memory_size() -> int:
    """A fifth of physical RAM, like Ignite's default data region (or of the
    process's cgroup memory limit when that is lower), in whole 2 MiB.

    The region is reserved, not committed: pages of it take resident memory
    only once used, so a small store costs a few MiB whatever this is.
    """
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit.isdigit():
            ram = min(ram, int(limit))
    except OSError:
        pass
    return max(ram // 5 // (2 * MiB) * (2 * MiB), 64 * MiB)


@dataclasses.dataclass(frozen=True)
class Config:
    """A store's options, validated by `make_config` (docs/options.md)."""

    page_size: int = 4096                  # bytes per page; power of two, 1 KiB..16 KiB
    # bytes of page memory: one region, reserved at open and touched only as pages are used;
    # default a fifth of physical RAM (Ignite's default data region)
    memory_size: int = dataclasses.field(default_factory=default_memory_size)
    checkpoint_buffer_size: int | None = None  # copy-on-write buffer; default memory_size // 4, at most 2 GiB
    wal_mode: str = "log_only"             # fsync | log_only | background (Ignite's default)
    wal_segment_size: int = 64 * MiB       # allocated as the log grows, reused in rotation; a record must fit in one
    wal_flush_interval: float = 0.5        # seconds between background flushes
    wal_direct: bool = False               # O_DIRECT writes of whole 4 KiB blocks (pwrite path)
    checkpoint_interval: float = 30.0      # seconds between timed checkpoints (IEP-113 ran 30 s)
    checkpoint_threads: int = 4            # recovery-file / page writers (Ignite's default)
    checkpoint_spread: float = 0.5         # a timed checkpoint's page writes end by spread * interval (0: full speed)
    checkpoint_dirty_fraction: float = 0.6  # dirty pages / page memory that starts a checkpoint
    checkpoint_wal_size: int = 512 * MiB   # WAL bytes since the last checkpoint that start one
    recovery_data: str = "checkpoint"      # checkpoint (IEP-113 recovery files) | wal (legacy)
    recovery_compression: str | None = None  # codec for recovery data / WAL page images; None: default_compression()
    recovery_compression_level: int | None = None  # zstd / lz4 level; None: the codec's default
    encryption_key: bytes | str | None = None  # 32 bytes, or a path to a key file
    throttling: str = "adaptive"           # write-throttling policy
    wal_archive: str | None = None         # directory for segments trimmed by a checkpoint
    wal_archive_size: int = 1024 * MiB     # archive bound, oldest removed first
    snapshot_memory: int = 64 * MiB        # before-images kept for open snapshots; past it the oldest is dropped

    @property
    def cow_buffer_size(self) -> int:
        """The checkpoint buffer's size in bytes: `checkpoint_buffer_size`, or derived from page memory."""
        if self.checkpoint_buffer_size is not None:
            return self.checkpoint_buffer_size
        # Ignite's rule above 8 GiB: the buffer holds only the pages writers change
        # while a checkpoint runs, which is bounded by the checkpoint's pace, not
        # by the size of page memory
        return max(min(self.memory_size // 4, 2 * GiB), 64 * self.page_size)


def _fail(option: str, message: str):
    raise ConfigError(f"option {option!r}: {message}", option=option)


def make_config(**options) -> Config:
    """Build a validated Config from keyword options."""
    names = {f.name for f in dataclasses.fields(Config)}
    for name in options:
        if name not in names:
            _fail(name, f"unknown option (known: {', '.join(sorted(names))})")
    cfg = Config(**options)
    if cfg.recovery_compression is None:
        cfg = dataclasses.replace(cfg, recovery_compression=default_compression())
    _validate(cfg)
    return cfg


def default_compression() -> str:
    """skip_garbage: Ignite's default for recovery data, and the faster codec here.

    It drops each page's unused bytes and frames in C without the GIL. When the
    data outgrows page memory, checkpoints set the pace of writers, and
    skip_garbage loaded 57-67 k keys/s against lz4's 32-54 k (two runs each,
    same machine). lz4 stores fewer bytes (about 1,670 a page against 2,770
    in the bench's codec table); choose it with recovery_compression="lz4"
    when disk bytes matter more than checkpoint speed.
    """
    return "skip_garbage"


def _int(cfg: Config, name: str, lo: int, hi: int | None = None) -> int:
    value = getattr(cfg, name)
    if not isinstance(value, int) or isinstance(value, bool):
        _fail(name, f"must be an int, got {type(value).__name__}")
    if value < lo or (hi is not None and value > hi):
        _fail(name, f"must be in [{lo}, {hi if hi is not None else 'inf'}], got {value}")
    return value


def _number(cfg: Config, name: str, lo: float, hi: float | None = None) -> float:
    value = getattr(cfg, name)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        _fail(name, f"must be a number, got {type(value).__name__}")
    if not (value >= lo) or (hi is not None and value > hi):
        _fail(name, f"must be in [{lo}, {hi if hi is not None else 'inf'}], got {value}")
    return float(value)


def _choice(cfg: Config, name: str, choices) -> None:
    value = getattr(cfg, name)
    if value not in choices:
        _fail(name, f"must be one of {', '.join(choices)}, got {value!r}")


def _validate(cfg: Config) -> None:
    page = _int(cfg, "page_size", 1024, 16384)
    if page & (page - 1):
        _fail("page_size", f"must be a power of two, got {page}")
    # the C core numbers page-memory slots with 31 bits
    _int(cfg, "memory_size", 64 * page, MAX_SLOTS * page)
    if cfg.checkpoint_buffer_size is not None:
        _int(cfg, "checkpoint_buffer_size", 8 * page, cfg.memory_size)
    _choice(cfg, "wal_mode", WAL_MODES)
    seg = _int(cfg, "wal_segment_size", 1 * MiB, MAX_WAL_SEGMENT)
    if seg % 4096:
        _fail("wal_segment_size", "must be a multiple of 4096")
    _number(cfg, "wal_flush_interval", 0.001, 3600)
    if not isinstance(cfg.wal_direct, bool):
        _fail("wal_direct", f"must be True or False, got {cfg.wal_direct!r}")
    if cfg.wal_direct and cfg.encryption_key is not None:
        _fail("wal_direct", "O_DIRECT cannot be combined with encryption_key (without libcrypto in the "
                            "C core, records are sealed in Python and written in unaligned pieces)")
    _number(cfg, "checkpoint_interval", 0.01)
    _int(cfg, "checkpoint_threads", 1, 64)
    _number(cfg, "checkpoint_spread", 0.0, 1.0)
    _number(cfg, "checkpoint_dirty_fraction", 0.05, 0.95)
    _int(cfg, "checkpoint_wal_size", 1 * MiB)
    _choice(cfg, "recovery_data", RECOVERY_DATA)
    _choice(cfg, "recovery_compression", COMPRESSIONS)
    if cfg.recovery_compression_level is not None:
        _int(cfg, "recovery_compression_level", -131072, 22)
        from pagestore.checkpoint.compression import PageCodec   # each codec's own range, or none
        try:
            PageCodec(cfg.recovery_compression, cfg.recovery_compression_level, page)
        except ValueError as e:
            _fail("recovery_compression_level", str(e))
    _choice(cfg, "throttling", THROTTLING)
    _int(cfg, "snapshot_memory", 4096)
    key = cfg.encryption_key
    if key is not None:
        if isinstance(key, str):
            if not os.path.isfile(key):
                _fail("encryption_key", f"key file {key!r} does not exist")
        elif not isinstance(key, (bytes, bytearray)) or len(key) != 32:
            _fail("encryption_key", "must be 32 bytes or the path of a key file")
    if cfg.wal_archive is not None and (not isinstance(cfg.wal_archive, str) or not cfg.wal_archive):
        _fail("wal_archive", "must be a directory path or None")
    if cfg.wal_archive and os.path.exists(cfg.wal_archive) and not os.path.isdir(cfg.wal_archive):
        _fail("wal_archive", f"{cfg.wal_archive!r} is not a directory")
    _int(cfg, "wal_archive_size", 1 * MiB)
