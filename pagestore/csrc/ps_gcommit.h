/* Group commit: the wait of a durable commit, in C with the GIL released.
 * Parsed by cffi's cdef (pagestore/_build.py): declarations only.
 *
 * A committer calls ps_gc_wait with the end LSN of its record.  It returns
 * PS_GC_DURABLE once everything below that LSN is durable (a round another
 * thread led covered it), or PS_GC_LEAD: the caller leads a round, must make
 * [ticket.start, ticket.target) durable (publish + fdatasync, in Python, which
 * releases the GIL around the I/O) and then call ps_gc_done, whatever
 * happened.  Each follower sleeps on a futex of its own, in the group's list,
 * so the end of a round wakes exactly the followers it covered, and those it
 * did not to elect the next leader.  One round covers everything appended
 * before its leader read the end LSN.
 *
 * The GIL baton (PS_GC_PY): a covered follower that returns to Python needs
 * the GIL, which its siblings pass along one at a time; woken all at once,
 * they would each sleep again in CPython's GIL wait and be woken once more
 * per hand-over.  So covered followers wait in the group's ready queue, in
 * the order they were covered, and leave it one at a time: each time a
 * caller from Python enters ps_gc_put / ps_gc_delete / ps_gc_wait (cffi has
 * just let its GIL go, and it writes and waits before it wants it back),
 * the queue's head returns and takes the GIL without a sleep.  The head
 * spins for it (sched_yield, so a GIL holder on the same CPU runs first) at
 * most SPIN_NS (ps_gc_set_spin), then returns anyway, and the whole queue
 * with it: nothing waits on a caller that may never come, and a thread
 * holding the GIL on other work costs one spin a round at most.  A leader
 * from Python returns first (it is on a CPU); a GIL release no one was
 * queued for is kept for the next covered follower.
 * A caller that does not return to Python (the asyncio syncer) passes no
 * PS_GC_PY and is let go as soon as it is covered.
 *
 * Linger: the threads a round released come back one at a time (each needs
 * the GIL for its next write), so the first back would sync alone.  A leader
 * elected while threads of the last round are still out (PS_GC_LINGER) waits
 * until the last of them has come back, at most min(max_linger, the moving
 * mean of a round's sync): PostgreSQL's commit_delay with the siblings
 * counted, not guessed.
 *
 * Lock: one mutex per group, held only inside these calls; no callback into
 * Python, no other lock taken under it.  In the lock order (ps_api.h) it
 * stands apart, after all of them: no caller of ps_gc_wait holds the tree
 * lock, the checkpointer's condition or the WAL's segment lock (a leader
 * takes the WAL's publish lock after ps_gc_wait has returned). */

typedef struct ps_gcommit ps_gcommit;

/* What ps_gc_wait hands a leader; the caller owns it.  `granted` is set in
 * the ticket before ps_gc_wait returns, so a caller interrupted (Ctrl-C) on
 * its way back from the call still finds the round it owes there. */
typedef struct ps_gc_ticket {
    uint64_t start;     /* durable LSN when elected: sync every segment from here */
    uint64_t target;    /* the log's end LSN when elected: sync up to here */
    uint64_t t0_ns;     /* CLOCK_MONOTONIC at election, for the round's duration */
    uint64_t granted;   /* 1 from election until ps_gc_done: the caller owes the round */
    uint64_t lsn;       /* ps_gc_put / ps_gc_delete: the end LSN of the write's record */
    uint64_t py;        /* the leader returns to Python (PS_GC_PY) */
} ps_gc_ticket;

typedef struct ps_gc_stats {
    uint64_t durable;       /* everything below is durable */
    uint64_t rounds;        /* rounds that advanced durable */
    uint64_t grouped;       /* commits that returned durable (leaders included) */
    uint64_t group_max;     /* most commits covered by one round */
    uint64_t round_size;    /* commits covered so far by the current round */
    uint64_t lingered_ns;   /* total time leaders lingered */
    uint64_t sync_mean_ns;  /* moving mean of a round's duration */
    uint64_t waiting;       /* committers asleep now */
    uint64_t handoffs;      /* covered followers let go as a caller from Python let the GIL go */
    uint64_t spin_outs;     /* covered followers that spun SPIN_NS for their turn, then left */
} ps_gc_stats;

#define PS_GC_DURABLE 0
#define PS_GC_LEAD 1
#define PS_GC_AGAIN 2       /* the slice ran out: call again (lets Python see signals) */
#define PS_GC_PAST_END 3    /* lsn is past the log's end: a caller's error */

#define PS_GC_IO_FAILED 4   /* the round's I/O failed in C (now or earlier): ps_gc_io_failure */

#define PS_GC_FIRST 1       /* the commit's first call (counts it back from its last round) */
#define PS_GC_LINGER 2      /* a commit: may linger for its siblings when leading */
#define PS_GC_IO 4          /* the caller lets a round it leads be written and synced in C */
#define PS_GC_PY 8          /* the caller let the GIL go for this call and takes it back after:
                             * it leaves in its turn once covered (the GIL baton) */

/* A group over the log whose end LSN is *end_lsn (read without a lock: it
 *   only grows, and every byte below it is written).
 * LOCK none.  REQUIRES end_lsn outlives the group; max_syncs >= 1.
 * RETURNS 0, or PS_E_NOMEM / PS_E_ARG.  OWNS *out is the caller's, freed by
 *   ps_gc_destroy once no thread can be inside a call. */
int ps_gc_create(const uint64_t *end_lsn, uint64_t durable, int max_syncs,
                 uint64_t max_linger_ns, ps_gcommit **out);
void ps_gc_destroy(ps_gcommit *g);

/* Everything below `durable` is durable (the log's start after recovery).
 * LOCK the group's.  REQUIRES no commit in flight (the WAL calls it from start()). */
void ps_gc_reset(ps_gcommit *g, uint64_t durable);

/* Wait until `lsn` is durable, or lead.  Sleeps at most slice_ns (0: no limit)
 * before returning PS_GC_AGAIN, after which the caller calls again without
 * PS_GC_FIRST.  LOCK the group's (released while asleep).  CALLS nothing.
 * RETURNS PS_GC_DURABLE, PS_GC_LEAD (*t filled; the caller MUST call
 * ps_gc_done), PS_GC_AGAIN, PS_GC_PAST_END.  OWNS *t is the caller's. */
int ps_gc_wait(ps_gcommit *g, uint64_t lsn, int flags, uint64_t slice_ns, ps_gc_ticket *t);

/* A write and its commit's wait in one call (one GIL release for a durable
 * put): ps_put / ps_delete on core c, then, once its record is in the log,
 * ps_gc_wait(g, its end LSN, flags, slice_ns, t) with t->lsn set to that
 * end.  The write's own contract holds (ps_api.h: LOCK write, CALLS
 * read_page, wal_segment, rolled back completely on failure); the wait
 * starts after the tree lock is released.  RETURNS a negative status of the
 * write (nothing waited for; PS_E_NOT_FOUND: a delete of an absent key), or
 * ps_gc_wait's result (PS_GC_DURABLE: durable; PS_GC_LEAD: the caller owes
 * the round of t, as after ps_gc_wait).  OWNS key and val are the caller's,
 * read during the call only; *t is the caller's. */
int64_t ps_gc_put(ps_gcommit *g, ps_core *c, const char *key, size_t klen, const char *val,
                  size_t vlen, int flags, uint64_t slice_ns, ps_gc_ticket *t);
int64_t ps_gc_delete(ps_gcommit *g, ps_core *c, const char *key, size_t klen, int flags,
                     uint64_t slice_ns, ps_gc_ticket *t);

/* A leader's round ended: ok != 0 means [t->start, t->target) is durable.
 * Wakes the waiters; on failure every waiter retries (and meets the error
 * itself as the next leader).  LOCK the group's.  REQUIRES t from this
 * caller's ps_gc_wait; a ticket not granted (or reported already) is ignored. */
void ps_gc_done(ps_gcommit *g, ps_gc_ticket *t, int ok);

/* The counters.  LOCK the group's, briefly. */
void ps_gc_stats_get(ps_gcommit *g, ps_gc_stats *out);

/* How long the ready queue's head spins for its turn (default SPIN_NS,
 * 50 us) before it returns on its own.  LOCK the group's, briefly. */
void ps_gc_set_spin(ps_gcommit *g, uint64_t spin_ns);

/* ---- Rounds written and synced in C ---------------------------------------
 * When the WAL enables it (posix files, the pwrite write path, records not
 * sealed in Python, fsync mode) and a caller passes PS_GC_IO, the thread
 * elected leader does the round itself, without returning to Python: it
 * pwrites [published, target) of the segment from the segment's buffer (the
 * 4 KiB blocks covering it, as the WAL's publish does) under the publish
 * lock, fdatasyncs the segment's file, and reports the round (ps_gc_done's
 * work), so ps_gc_wait returns PS_GC_DURABLE to it as to a follower.  A
 * round C cannot do alone (its range spans two segments, or a segment not
 * registered) is handed to Python as PS_GC_LEAD, as without PS_GC_IO.
 *
 * Failure: the first failed pwrite or fdatasync is kept (errno, segment,
 * the acknowledged end = durable when it failed, the end handed to the OS),
 * C rounds stop for good, and every commit not yet durable gets
 * PS_GC_IO_FAILED from then on, whichever path it asked for: a second
 * fdatasync could succeed after the first lost the bytes (PostgreSQL's
 * fsync finding), so nothing is acknowledged after a failure.
 *
 * Segments: the WAL registers each segment the encoder writes (its fd and
 * buffer); a round pins the registration it uses (busy count), and
 * ps_gc_io_forget waits for those rounds before the WAL frees the buffer or
 * closes the file.  Two registrations at a time (seq and seq + 1).
 *
 * Publish lock: serialises every publish (C leaders and the WAL's Python
 * publishes) and guards `published`.  Never held while waiting for the
 * group's mutex to be released by a sleeping thread: lock order group mutex
 * -> nothing; publish lock -> nothing; a C leader takes them one at a time. */

typedef struct ps_gc_io_stats {
    uint64_t fsyncs;        /* fdatasyncs issued by C rounds */
    uint64_t pwrites;       /* pwrite calls of C rounds */
    uint64_t pwrite_bytes;  /* bytes they wrote */
    uint64_t rounds;        /* rounds done in C */
} ps_gc_io_stats;

typedef struct ps_gc_io_failure {
    int err;                /* errno of the first failure; 0: none */
    int during_sync;        /* 1: fdatasync failed, 0: pwrite failed */
    uint64_t seq;           /* the segment being written or synced */
    uint64_t acked;         /* the durable LSN when it failed */
    uint64_t handed;        /* end of what may have reached the OS */
} ps_gc_io_failure;

/* Let C do rounds (on != 0) over segments of `segment_size` bytes; `direct`:
 * the files are O_DIRECT (publish from the block boundary below).  Turning
 * it off waits for C rounds in flight.  LOCK the group's.  RETURNS 0, PS_E_ARG. */
int ps_gc_io_enable(ps_gcommit *g, int on, uint64_t segment_size, int direct);

/* Register segment `seq`: its file descriptor and the buffer the encoder
 * writes it into (segment_size bytes).  Replaces the registration of seq - 2
 * (waits for rounds using it).  LOCK the group's.  RETURNS 0, PS_E_ARG. */
int ps_gc_io_segment(ps_gcommit *g, uint64_t seq, int fd, uint8_t *buf);

/* The WAL's grower is writing zeros ahead in segment `seq` (on != 0) or has
 * stopped: while it is, C hands that segment's rounds to Python (whose
 * publish waits for the zeros).  The flag is read under the group's mutex
 * with the round's target, so a round that missed it read its target before
 * the grower read the writer's end, and writes below the zeros.  LOCK the group's. */
void ps_gc_io_zeroing(ps_gcommit *g, uint64_t seq, int on);

/* Forget every registered segment below `seq` (all: UINT64_MAX), waiting
 * for the C rounds that use them.  LOCK the group's (released while waiting). */
void ps_gc_io_forget(ps_gcommit *g, uint64_t before_seq);

/* Take the publish lock, which guards `published` and serialises every
 * publish.  LOCK the publish lock (blocks; the binding releases the GIL). */
void ps_gc_pub_lock(ps_gcommit *g);
/* LOCK releases the publish lock.  REQUIRES the caller holds it. */
void ps_gc_pub_unlock(ps_gcommit *g);
/* Everything below was handed to the OS.  LOCK none.  REQUIRES the caller
 * holds the publish lock (or no round can run). */
uint64_t ps_gc_published(ps_gcommit *g);
/* LOCK none.  REQUIRES the caller holds the publish lock (or no round can run). */
void ps_gc_set_published(ps_gcommit *g, uint64_t published);

/* The durable LSN's cell, for lock-free reads (only grows; 8-byte aligned).
 * LOCK none.  OWNS the group's: valid until ps_gc_destroy. */
const volatile uint64_t *ps_gc_durable_ptr(ps_gcommit *g);

/* The first C I/O failure (out->err 0: none); counters of C rounds.
 * LOCK the group's, briefly. */
void ps_gc_io_failure_get(ps_gcommit *g, ps_gc_io_failure *out);
void ps_gc_io_stats_get(ps_gcommit *g, ps_gc_io_stats *out);

/* ---- The asyncio syncer ------------------------------------------------
 * LOCK the group's (released while asleep and during a round's I/O).
 * One thread (pagestore.aio's) runs ps_gc_syncer: whenever the log's end is
 * past the durable LSN it makes everything written durable, as a committer
 * of the end LSN would (rounds in C; PS_GC_IO implied), and after each
 * round that advanced the durable LSN adds 1 to the eventfd `efd`, which
 * the event loop watches: one wake-up of the loop per group, and no GIL
 * taken by the syncer.  Between rounds it sleeps until ps_gc_kick, or
 * slice_ns.  RETURNS PS_GC_AGAIN when the slice ran out with nothing to do
 * (lets Python look at its state), PS_GC_LEAD when a round must be done in
 * Python (*t granted: do it, ps_gc_done, then call again), PS_GC_IO_FAILED,
 * or PS_GC_DURABLE once stopped (ps_gc_syncer_stop) with everything written
 * before the stop durable.  After a round it lingers for ps_gc_go.
 * CALLS write(2) on efd. */
int ps_gc_syncer(ps_gcommit *g, int efd, uint64_t slice_ns, ps_gc_ticket *t);
/* Wake the syncer (a write wants durability).  LOCK none unless the syncer
 * sleeps (then the group's, briefly). */
void ps_gc_kick(ps_gcommit *g);
/* The loop has run the writers the syncer's last round released (their
 * next writes are in the log): the syncer's next round may start.  Until
 * then, or at most min(max_linger, the mean round), the syncer lingers, as
 * a committing leader does for its siblings, so a round does not start with
 * the first of them alone.  LOCK the group's, briefly. */
void ps_gc_go(ps_gcommit *g);

/* The syncer's "asleep" flag, for a caller that calls ps_gc_kick only when
 * it is set (a read instead of a call per write).  LOCK none.  OWNS the
 * group's: valid until ps_gc_destroy. */
const volatile int *ps_gc_syncer_idle_ptr(ps_gcommit *g);
/* stop != 0: ask the syncer to make what is written durable and return;
 * 0: let a syncer run again (a new one).  LOCK the group's, briefly. */
void ps_gc_syncer_stop(ps_gcommit *g, int stop);
