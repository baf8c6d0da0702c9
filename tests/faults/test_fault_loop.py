"""The I/O-error loop over a whole store: for n over the I/Os of a workload that
writes, checkpoints, is closed or killed, recovers and writes again, the n-th
I/O fails with ENOSPC, EIO or EROFS -- once, or from then on until the disk
works again -- and afterwards every acknowledged write is there, nothing that
raised is, and every error was a `pagestore.Error` (tests/support/faultloop.py).

`make test` samples every 4th n per configuration (>= 10,000 injected
faults over the module); PAGESTORE_TORTURE=1 runs every n with several seeds
(>= 100,000) and prints the count.
"""

import dataclasses
import os

import pytest

from tests.support.faultloop import ERRNOS, Spec, count_io, run_workload

TORTURE = os.environ.get("PAGESTORE_TORTURE") == "1"

SPECS = {
    "log_only-checkpoint": Spec(),
    "fsync-checkpoint": Spec(wal_mode="fsync"),
    "log_only-wal": Spec(recovery_data="wal"),
    "fsync-wal-killed": Spec(wal_mode="fsync", recovery_data="wal", end="kill"),
    "encrypted-log_only-checkpoint-killed": Spec(encrypted=True, end="kill"),
    "encrypted-fsync-wal": Spec(wal_mode="fsync", recovery_data="wal", encrypted=True),
}
# faults each configuration must inject in make test (6 x 1,700 > 10,000)
QUICK_FAULTS = 1700


def sweep(spec: Spec, ns, persistent_only_every: int = 1) -> tuple:
    """Run the loop for every n of `ns`, each errno, once and persistent;
    (faults injected, runs, violations with their fault)."""
    faults = runs = 0
    bad = []
    for i, n in enumerate(ns):
        for j, err in enumerate(ERRNOS):
            for persistent in (True, False):
                if not persistent and (i + j) % persistent_only_every:
                    continue
                out = run_workload(spec, (n, err, persistent))
                faults += out.faults
                runs += 1
                bad += [f"n={n} errno={err} persistent={persistent}: {v}" for v in out.violations]
    return faults, runs, bad


@pytest.mark.parametrize("name", sorted(SPECS))
def test_no_injected_fault_loses_an_acknowledged_write_or_applies_a_raised_one(name):
    spec = SPECS[name]
    total = count_io(spec)
    # every 4th n; a one-shot fault at every third of those (persistent
    # faults hit the rest of the workload and its recovery, one-shot ones
    # each a single I/O)
    faults, runs, bad = sweep(spec, range(1, total + 2, 4), persistent_only_every=3)
    assert not bad, "\n".join(bad[:20])
    assert faults >= QUICK_FAULTS, f"{faults} faults injected over {runs} runs"


@pytest.mark.slow
@pytest.mark.skipif(not TORTURE, reason="PAGESTORE_TORTURE=1 (make torture)")
def test_fault_loop_torture():
    faults = runs = 0
    bad = []
    for seed in (1, 2, 3):
        for spec in SPECS.values():
            spec = dataclasses.replace(spec, seed=seed)
            f, r, b = sweep(spec, range(1, count_io(spec) + 2))
            faults, runs, bad = faults + f, runs + r, bad + b
    print(f"fault loop: {faults} injected faults over {runs} runs")
    assert not bad, "\n".join(bad[:20])
    assert faults >= 100_000
