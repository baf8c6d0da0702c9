/* The state of one group-commit group (struct ps_gcommit), private to the
 * group's files: gcommit.c (the group and its wait), gcround.c (rounds
 * written and synced in C) and gcsyncer.c (the asyncio syncer).
 * ps_gcommit.h has the protocol and the entry points' contracts.
 *
 * One mutex per group.  Each waiter links a node on its own stack into the
 * group's list `head` and sleeps on the node's own futex, so whoever ends a
 * round wakes exactly the threads it must: the ones it covered (counted for
 * the linger, `linger_cv`) go to the `ready` queue, the others are woken to
 * elect the next leader.  Nodes live only while their thread is inside
 * ps_gc_wait; every write to a node by another thread is made under the
 * mutex, the final store of GC_GO last (after it no one touches the node,
 * and its thread may return without the mutex).  A node's `asleep` and
 * `state` are read and written atomically where the mutex is not held.
 *
 * The ready queue (the GIL baton, ps_gcommit.h): covered waiters that return
 * to Python leave it one at a time, each when a caller coming from Python
 * has just let the GIL go (`gil_free` keeps one such release no one used);
 * its head spins for at most `spin_ns`, then leaves on its own, and every
 * node behind it with it (the GIL is busy on other work: they all wait for
 * it in CPython's GIL wait, as without the queue).
 *
 * Rounds in C (PS_GC_IO, ps_gcommit.h): the leader pwrites and fdatasyncs
 * the registered segment and reports the round, without the GIL; the
 * publish lock `pub_mu` serialises its pwrite with the WAL's own publishes. */
#ifndef PS_GCSTATE_H
#define PS_GCSTATE_H

#include <errno.h>
#include <time.h>
#include <unistd.h>

#include "ps_internal.h"
#include "ps_gcommit.h"

/* Where a waiter is (gc_node.state). */
enum { GC_OUT, GC_WAITING, GC_READY, GC_GO };

typedef struct gc_node {
    struct gc_node *prev, *next;   /* in head (GC_WAITING) or ready (GC_READY) */
    uint64_t lsn;
    int py;               /* returns to Python (PS_GC_PY): leaves in its turn */
    int state;            /* GC_*; GC_GO is stored last by whoever lets it go */
    uint32_t word;        /* its futex: bumped under the mutex to wake it */
    int asleep;           /* in the futex wait (or on its way): a wake-up needs the call */
    int armed;            /* made the ready queue's head: it spins for its turn */
} gc_node;

typedef struct gc_slot {
    uint64_t seq;
    int fd;
    int valid;
    uint8_t *buf;
    uint64_t busy;        /* C rounds using this registration now */
} gc_slot;

#define BLOCK 4096u

struct ps_gcommit {
    pthread_mutex_t mu;
    pthread_mutex_t pub_mu;
    pthread_cond_t io_cv;      /* ps_gc_io_forget / io_segment wait for busy == 0 */
    pthread_cond_t kick_cv;    /* the aio syncer sleeps here */
    uint64_t published;        /* under pub_mu */
    int io_on, io_direct, syncer_idle, syncer_stop, syncer_linger;
    uint64_t seg_size;
    gc_slot slot[2];
    uint64_t zero_seq[2];      /* ps_gc_io_zeroing: the grower zeroes segment zero_seq[i] */
    int zeroing[2];
    ps_gc_io_failure fail;
    ps_gc_io_stats io;
    pthread_cond_t linger_cv;
    const volatile uint64_t *end;
    uint64_t durable, sync_target;
    int syncing, max_syncs, lingering;
    uint64_t in_flight;   /* threads the last round released, not yet back */
    uint64_t max_linger_ns;
    gc_node head;         /* sentinel of the waiters' list */
    gc_node ready;        /* sentinel of the ready queue (covered, returning to Python) */
    int gil_free;         /* a caller from Python let the GIL go and no waiter took it */
    uint64_t spin_ns;     /* how long the ready queue's head spins for its turn */
    ps_gc_stats st;
};

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline struct timespec at_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    return ts;
}

/* gcommit.c: a round ended (ps_gc_done's work): durable advanced when ok,
 * the waiters it covered counted and woken.
 * REQUIRES: g->mu held; t granted to this caller. */
void gc_finish(ps_gcommit *g, ps_gc_ticket *t, int ok, uint64_t took);

/* gcround.c: the elected leader's round, in C.
 * REQUIRES: g->mu held on entry (released during the I/O, held again on
 * return); t granted by ps_gc_wait's election; g->io_on.
 * RETURNS 1 (durable), -1 (failed: kept in g->fail, C rounds off), 0 (not
 * for C: the caller hands it to Python, still granted). */
int gc_round_in_c(ps_gcommit *g, ps_gc_ticket *t);

#endif
