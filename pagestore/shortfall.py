"""The shortfall of a write too large for page memory, told as its fix.

A transaction's changed pages stay in page memory until it commits (they are
never written out uncommitted), so one that changes more pages than page
memory holds can never commit. The core reports, for the write it rolled
back, how many pages it had changed or created and how far through its
writes it got; from those this module builds the `TransactionTooLargeError`
that says what the transaction needs, what the store has, and what to change.
"""

from __future__ import annotations

from .errors import TransactionTooLargeError

MiB = 1 << 20


def room_needed(signals) -> int:
    """Pages the write the core just rolled back needs, estimated from how far
    it got: `rollback_pages` after `rollback_ops_done` of `rollback_ops` writes,
    scaled to all of them (a batch of random keys touches fewer new pages per
    write as it grows, so this errs high), plus the one it failed to get."""
    had = int(signals.rollback_pages)
    ops, done = int(signals.rollback_ops), int(signals.rollback_ops_done)
    if ops > 1 and 0 < done < ops:
        had = -(-had * ops // done)
    return had + 1


def _mib(n: int) -> str:
    return f"{n / MiB:,.1f} MiB"


def too_large(path, signals, config, page_size: int, cause) -> TransactionTooLargeError:
    """The error for a write the core rolled back for good: it names the pages
    the write needs (at least those it had when it failed; for a batch cut
    short, an estimate for all of it at the rate of its first writes, or the
    pages the core proved it needs at once, `cause.need`, when more), the
    page memory and checkpoint buffer the store has, and the options to raise.
    Its attributes `pages_needed`, `memory_pages` and `buffer_pages` hold
    the same figures."""
    had = int(signals.rollback_pages)
    ops, done = int(signals.rollback_ops), int(signals.rollback_ops_done)
    memory_pages, buffer_pages = int(signals.slots_total), int(signals.cow_capacity)
    needed = room_needed(signals)
    need = f"it needs more than {had:,} pages ({_mib(had * page_size)})"
    if ops > 1 and 0 < done < ops:
        need += (f": it had changed {had:,} after {done:,} of its {ops:,} writes, so all of"
                 f" them need up to about {needed:,} pages ({_mib(needed * page_size)})")
    proven = int(getattr(cause, "need", 0) or 0)      # the core's lower bound (Retry.need)
    if proven > needed:       # the writes it had not made yet showed more than the estimate
        needed = proven
        need = (f"it needs at least {proven:,} pages at once ({_mib(proven * page_size)}; it had"
                f" changed {had:,} when it stopped" + (f", after {done:,} of its {ops:,} writes)"
                                                      if ops > 1 else ")"))
    want = -(-needed * 5 // 4) * page_size            # room for the tree's other pages too
    fix = f"open the store with memory_size of at least {_mib(want)}"
    if ops > 1 and done > 1:
        fix += f", or split it into batches of at most about {max(done // 2, 1):,} writes"
    err = TransactionTooLargeError(
        f"{path}: a transaction does not fit in page memory ({cause}); {need}; page memory holds"
        f" {memory_pages:,} pages (memory_size={_mib(config.memory_size)}) and the checkpoint"
        f" buffer {buffer_pages:,} pages (checkpoint_buffer_size={_mib(config.cow_buffer_size)}),"
        f" and the pages of an uncommitted transaction are never written out: {fix}")
    err.pages_needed = needed
    err.memory_pages = memory_pages
    err.buffer_pages = buffer_pages
    return err
