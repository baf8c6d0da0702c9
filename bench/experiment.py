"""IEP-113's experiment as this bench runs it: three scenarios, three compared modes, rounds.

IEP-113 compares, per scenario, the legacy *WAL mode* (page images in the WAL)
with *recovery files* written by the checkpoint, with and without compression.
``iep_configs`` lays those runs out as ``rounds`` interleaved rounds: every
round runs every scenario's three modes, and the order of the modes rotates
from round to round, so a drift of this shared machine (identical runs here
differ by 10-20 % minutes apart, up to 2x in the extreme scenario) spreads over
all modes instead of favouring one. A report pairs the runs of one round
(``experiment`` and ``round`` columns of the summary) and shows the median
ratio with the spread of the per-round ratios.

``throttling_configs`` is the second comparison: the old exponential backoff
against IEP-113's fill-rate throttling, in the extreme scenario with recovery
files, where the IEP says the backoff can stop every writer until the
recovery data is written.
"""

from __future__ import annotations

SCENARIOS = ("full-speed", "fixed-rate", "extreme")

#: (key, column title, pagestore options) of each compared mode, in column order
MODES = (
    ("wal", "WAL mode", dict(recovery_data="wal", recovery_compression="disabled")),
    ("files", "recovery files", dict(recovery_data="checkpoint", recovery_compression="disabled")),
    ("compressed", "recovery files + lz4", dict(recovery_data="checkpoint", recovery_compression="lz4")),
)
MODE_TITLES = {k: t for k, t, _ in MODES}

IEP = "iep-113"
THROTTLING = "throttling"
#: policies of the throttling comparison: the old one first, then IEP-113's
POLICIES = ("exponential_backoff", "fill_rate")

#: quick-job sizes: 6 measured seconds with a checkpoint every 1.5 s is three
#: checkpoint cycles and more (the extreme scenario checkpoints back to back)
QUICK = dict(duration=6.0, warmup=0.5, checkpoint_interval=1.5)
FULL = dict(duration=60.0, warmup=5.0, checkpoint_interval=10.0)


def mode_of(recovery_data: str, compression: str) -> str:
    """The compared mode a summary row belongs to (its ``recovery_data`` and ``compression``)."""
    if recovery_data == "wal":
        return "wal"
    return "files" if compression == "disabled" else "compressed"


def iep_configs(base: dict, rounds: int = 3, scenarios=SCENARIOS) -> list:
    """Every scenario's compared modes, ``rounds`` times, interleaved with rotating order."""
    out = []
    for r in range(rounds):
        order = MODES[r % len(MODES):] + MODES[:r % len(MODES)]
        for scen in scenarios:
            for _key, _title, opts in order:
                cfg = dict(base, scenario=scen, experiment=IEP, round=r, **opts)
                if scen == "extreme":
                    # back-to-back checkpoints: the preset's own interval and cadence
                    cfg.pop("checkpoint_interval", None)
                out.append(cfg)
    return out


def throttling_configs(base: dict, rounds: int = 2) -> list:
    """The two policies in the extreme scenario with recovery files, interleaved."""
    out = []
    for r in range(rounds):
        for pol in (POLICIES if r % 2 == 0 else POLICIES[::-1]):
            cfg = dict(base, scenario="extreme", experiment=THROTTLING, round=r, recovery_data="checkpoint",
                       recovery_compression="lz4", throttling=pol)
            cfg.pop("checkpoint_interval", None)
            out.append(cfg)
    return out
