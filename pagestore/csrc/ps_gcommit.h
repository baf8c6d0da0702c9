/* Group commit: the wait of a durable commit, in C with the GIL released.
 * Parsed by cffi's cdef (pagestore/_build.py): declarations only.
 *
 * A committer calls ps_gc_wait with the end LSN of its record.  It returns
 * PS_GC_DURABLE once everything below that LSN is durable (a round another
 * thread led covered it), or PS_GC_LEAD: the caller leads a round, must make
 * [ticket.start, ticket.target) durable (publish + fdatasync, in Python, which
 * releases the GIL around the I/O) and then call ps_gc_done, whatever
 * happened.  Followers sleep on the group's condition variable, never on a
 * lock of their own, and wake once, covered.  One round covers everything
 * appended before its leader read the end LSN.
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
} ps_gc_stats;

#define PS_GC_DURABLE 0
#define PS_GC_LEAD 1
#define PS_GC_AGAIN 2       /* the slice ran out: call again (lets Python see signals) */
#define PS_GC_PAST_END 3    /* lsn is past the log's end: a caller's error */

#define PS_GC_FIRST 1       /* the commit's first call (counts it back from its last round) */
#define PS_GC_LINGER 2      /* a commit: may linger for its siblings when leading */

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

/* A leader's round ended: ok != 0 means [t->start, t->target) is durable.
 * Wakes the waiters; on failure every waiter retries (and meets the error
 * itself as the next leader).  LOCK the group's.  REQUIRES t from this
 * caller's ps_gc_wait; a ticket not granted (or reported already) is ignored. */
void ps_gc_done(ps_gcommit *g, ps_gc_ticket *t, int ok);

/* The durable LSN, and the counters.  LOCK the group's, briefly. */
uint64_t ps_gc_durable(ps_gcommit *g);
void ps_gc_stats_get(ps_gcommit *g, ps_gc_stats *out);
