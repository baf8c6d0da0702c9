/* Group commit: the group and its wait (ps_gcommit.h has the protocol and
 * each entry point's contract: LOCK, REQUIRES, RETURNS).  A committer
 * waits in ps_gc_wait until a round covers its LSN or it is elected leader;
 * a leader's round is done in C (gcround.c) or handed to Python, which
 * reports it with ps_gc_done.  The asyncio syncer is gcsyncer.c's; the
 * group's state and its locks are gcstate.h's.
 *
 * REQUIRES of every entry point but ps_gc_create: g from ps_gc_create and
 * not yet destroyed. */
#include "gcstate.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <sched.h>

/* How long the ready queue's head spins for its turn before it leaves on
 * its own (longer than a put's Python work between two calls into C, so a
 * chain of writers passes the GIL without a sleep; short enough that a
 * thread holding the GIL on other work costs a little CPU only). */
#define SPIN_NS 50000u

static int cond_init_monotonic(pthread_cond_t *cv) {
    pthread_condattr_t a;
    if (pthread_condattr_init(&a)) return -1;
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc ? -1 : 0;
}

int ps_gc_create(const uint64_t *end_lsn, uint64_t durable, int max_syncs,
                           uint64_t max_linger_ns, ps_gcommit **out) {
    if (!end_lsn || max_syncs < 1 || !out) return PS_E_ARG;
    ps_gcommit *g = calloc(1, sizeof *g);
    if (!g) return PS_E_NOMEM;
    if (pthread_mutex_init(&g->mu, NULL)) { free(g); return PS_E_NOMEM; }
    if (pthread_mutex_init(&g->pub_mu, NULL)) { pthread_mutex_destroy(&g->mu); free(g); return PS_E_NOMEM; }
    int made = 0;
    pthread_cond_t *cvs[] = {&g->linger_cv, &g->io_cv, &g->kick_cv};
    for (; made < 3; made++)
        if (cond_init_monotonic(cvs[made])) break;
    if (made < 3) {
        while (made--) pthread_cond_destroy(cvs[made]);
        pthread_mutex_destroy(&g->pub_mu); pthread_mutex_destroy(&g->mu); free(g);
        return PS_E_NOMEM;
    }
    g->end = end_lsn;
    g->durable = g->sync_target = g->st.durable = g->published = durable;
    g->max_syncs = max_syncs;
    g->max_linger_ns = max_linger_ns;
    g->head.next = g->head.prev = &g->head;
    g->ready.next = g->ready.prev = &g->ready;
    g->spin_ns = SPIN_NS;
    *out = g;
    return 0;
}

void ps_gc_destroy(ps_gcommit *g) {
    if (!g) return;
    pthread_cond_destroy(&g->kick_cv);
    pthread_cond_destroy(&g->io_cv);
    pthread_mutex_destroy(&g->pub_mu);
    pthread_cond_destroy(&g->linger_cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void ps_gc_reset(ps_gcommit *g, uint64_t durable) {
    pthread_mutex_lock(&g->mu);
    g->durable = g->sync_target = g->st.durable = durable;
    g->in_flight = 0;
    pthread_mutex_unlock(&g->mu);
    pthread_mutex_lock(&g->pub_mu);
    g->published = durable;
    pthread_mutex_unlock(&g->pub_mu);
}

static void unlink_node(gc_node *n) {
    n->prev->next = n->next;
    n->next->prev = n->prev;
}

static void link_tail(gc_node *head, gc_node *n) {
    n->prev = head->prev;
    n->next = head;
    head->prev->next = n;
    head->prev = n;
}

/* ---- a waiter's sleep and wake-up: its own futex ---------------------- */

/* Asleep on n's futex until woken or `until` (CLOCK_MONOTONIC; NULL: none)
 * passes.  REQUIRES g->mu held; returns without it.  RETURNS 1 if `until` passed. */
static int node_park(ps_gcommit *g, gc_node *n, const struct timespec *until) {
    uint32_t w = __atomic_load_n(&n->word, __ATOMIC_ACQUIRE);
    __atomic_store_n(&n->asleep, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g->mu);
    long r = syscall(SYS_futex, &n->word, FUTEX_WAIT_BITSET_PRIVATE, w, until, NULL,
                     FUTEX_BITSET_MATCH_ANY);
    int timed_out = r < 0 && errno == ETIMEDOUT;
    __atomic_store_n(&n->asleep, 0, __ATOMIC_RELAXED);
    return timed_out;
}

/* node_park, then g->mu held again. */
static int node_sleep(ps_gcommit *g, gc_node *n, const struct timespec *until) {
    int timed_out = node_park(g, n, until);
    pthread_mutex_lock(&g->mu);
    return timed_out;
}

/* REQUIRES g->mu held: the node's thread cannot leave ps_gc_wait meanwhile. */
static void node_wake(gc_node *n) {
    __atomic_add_fetch(&n->word, 1, __ATOMIC_RELEASE);
    if (__atomic_load_n(&n->asleep, __ATOMIC_RELAXED))   /* else it looks at its state before it sleeps */
        syscall(SYS_futex, &n->word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Let n return (it is out of every list).  REQUIRES g->mu held.  GC_GO is
 * stored last: a spinning head returns on seeing it, without the mutex. */
static void node_go(gc_node *n) {
    node_wake(n);
    __atomic_store_n(&n->state, GC_GO, __ATOMIC_RELEASE);
}

/* ---- the ready queue: the GIL baton ----------------------------------- */

/* The ready queue's head spins: wake it (a call only if it sleeps). */
static void arm_head(ps_gcommit *g) {
    if (g->ready.next == &g->ready) return;
    __atomic_store_n(&g->ready.next->armed, 1, __ATOMIC_RELEASE);   /* before the wake-up */
    node_wake(g->ready.next);
}

/* The head h takes its turn: the next one becomes head (woken, it spins). */
static void ready_pop(ps_gcommit *g, gc_node *h) {
    g->st.handoffs++;
    unlink_node(h);
    arm_head(g);
    node_go(h);
}

/* n leaves the ready queue on its own, wherever it is in it.  REQUIRES g->mu;
 * n is the caller's own node (it returns at once: no wake-up needed). */
static void ready_leave(ps_gcommit *g, gc_node *n) {
    unlink_node(n);
    arm_head(g);
    n->state = GC_GO;
}

/* The head n spins for a caller from Python to let the GIL go (yielding: a
 * runnable GIL holder on its CPU goes first), at most spin_ns.  Without the
 * mutex.  RETURNS 1 once let go (then no one touches n any more). */
static int spin_for_turn(ps_gcommit *g, gc_node *n) {
    uint64_t stop = now_ns() + __atomic_load_n(&g->spin_ns, __ATOMIC_RELAXED);
    while (__atomic_load_n(&n->state, __ATOMIC_ACQUIRE) != GC_GO && now_ns() < stop)
        sched_yield();
    return __atomic_load_n(&n->state, __ATOMIC_ACQUIRE) == GC_GO;
}

/* The head n spun out: no caller from Python came, so the GIL is held on
 * other work.  n and every follower queued behind it go to CPython's GIL
 * wait at once, as without the baton, rather than each spinning out in
 * turn while the GIL holder wins the GIL again and again.  REQUIRES g->mu. */
static void spun_out(ps_gcommit *g, gc_node *n) {
    g->st.spin_outs++;
    unlink_node(n);
    n->state = GC_GO;
    while (g->ready.next != &g->ready) {
        gc_node *x = g->ready.next;
        unlink_node(x);
        node_go(x);
    }
}

/* A caller from Python let the GIL go and will not take it back soon (it
 * writes, then waits): the ready queue's head may take it.  REQUIRES g->mu. */
static void gil_released(ps_gcommit *g) {
    if (g->ready.next != &g->ready) ready_pop(g, g->ready.next);
    else g->gil_free = 1;
}

/* n is covered by a round.  REQUIRES g->mu held; n in no list. */
static void covered(ps_gcommit *g, gc_node *n) {
    if (!n->py) { node_go(n); return; }     /* it does not take the GIL: no turn to wait */
    n->state = GC_READY;
    link_tail(&g->ready, n);
    if (g->ready.next != n) return;          /* its turn comes after the head's */
    if (g->gil_free) { g->gil_free = 0; ready_pop(g, n); }
    else arm_head(g);                        /* the new head: it spins */
}

/* The elected leader, lock held: linger if its siblings are out, then fix
 * its round's range. */
static void lead(ps_gcommit *g, int flags, ps_gc_ticket *t) {
    uint64_t wait = g->st.sync_mean_ns < g->max_linger_ns ? g->st.sync_mean_ns : g->max_linger_ns;
    if ((flags & PS_GC_LINGER) && g->in_flight && !g->lingering && wait > 0) {
        uint64_t t0 = now_ns();
        struct timespec until = at_ns(t0 + wait);
        g->lingering = 1;
        while (g->in_flight && pthread_cond_timedwait(&g->linger_cv, &g->mu, &until) != ETIMEDOUT) {}
        g->lingering = 0;
        g->st.lingered_ns += now_ns() - t0;
    }
    t->start = g->durable;
    t->target = *g->end;
    if (t->target > g->sync_target) g->sync_target = t->target;
    t->t0_ns = now_ns();
    t->py = (flags & PS_GC_PY) != 0;
    t->granted = 1;
}

/* A round ended, lock held: ps_gc_done's work (gcstate.h). */
void gc_finish(ps_gcommit *g, ps_gc_ticket *t, int ok, uint64_t took) {
    t->granted = 0;
    g->syncing--;
    if (ok) {
        int64_t d = (int64_t)took - (int64_t)g->st.sync_mean_ns;
        g->st.sync_mean_ns = (uint64_t)((int64_t)g->st.sync_mean_ns + d / 8);
        if (t->target > g->durable) {
            g->durable = g->st.durable = t->target;
            g->st.rounds++;
            if (g->st.round_size > g->st.group_max) g->st.group_max = g->st.round_size;
            g->st.round_size = 0;
        }
    } else {
        g->sync_target = g->durable;   /* a later leader syncs this range again */
    }
    g->st.round_size++;
    g->st.grouped++;
    /* a leader from Python is on a CPU and takes the GIL next: its next
     * call into C lets the first covered waiter go */
    if (t->py) g->gil_free = 0;
    uint64_t back = 1;                 /* this leader, and each waiter it covered */
    for (gc_node *n = g->head.next, *next; n != &g->head; n = next) {
        next = n->next;
        if (n->lsn <= g->durable) {    /* covered: off the list, to return */
            unlink_node(n);
            g->st.waiting--;
            g->st.round_size++;
            g->st.grouped++;
            back++;
            covered(g, n);
        } else {
            node_wake(n);              /* one of them leads next (or meets the failure) */
        }
    }
    g->in_flight = ok ? back : 0;
}

/* ps_gc_wait's work; `entering`: the caller came straight from Python (not
 * after its write, whose call let the GIL go already). */
static int gc_wait(ps_gcommit *g, uint64_t lsn, int flags, uint64_t slice_ns, ps_gc_ticket *t,
                   int entering) {
    gc_node node = {NULL, NULL, lsn, (flags & PS_GC_PY) != 0, GC_OUT, 0, 0, 0};
    int rc;
    struct timespec until = at_ns(slice_ns ? now_ns() + slice_ns : 0);
    pthread_mutex_lock(&g->mu);
    if (entering && node.py) gil_released(g);
    if ((flags & PS_GC_FIRST) && g->in_flight) {
        if (--g->in_flight == 0 && g->lingering) pthread_cond_signal(&g->linger_cv);
    }
    for (;;) {
        if (node.state == GC_GO) { rc = PS_GC_DURABLE; break; }
        if (node.state == GC_READY) {
            int head = g->ready.next == &node, timed_out = 0;
            if (head) {
                pthread_mutex_unlock(&g->mu);
            } else {
                /* behind the head: asleep until made head (then it spins
                 * without coming back for the mutex) or let go */
                timed_out = node_park(g, &node, slice_ns ? &until : NULL);
                head = !timed_out && __atomic_load_n(&node.armed, __ATOMIC_ACQUIRE);
            }
            if ((head && spin_for_turn(g, &node)) || __atomic_load_n(&node.state, __ATOMIC_ACQUIRE) == GC_GO)
                return PS_GC_DURABLE;        /* let go in its turn: no one touches the node now */
            pthread_mutex_lock(&g->mu);
            if (node.state == GC_READY && head)
                spun_out(g, &node);          /* no one came: take the GIL as any thread does */
            else if (node.state == GC_READY && timed_out)
                ready_leave(g, &node);       /* never stuck behind a head that does not move */
            continue;
        }
        if (g->durable >= lsn) {
            if (node.state == GC_WAITING) { unlink_node(&node); g->st.waiting--; }
            node.state = GC_OUT;
            g->st.round_size++;
            g->st.grouped++;
            rc = PS_GC_DURABLE;
            break;
        }
        if (g->fail.err) { rc = PS_GC_IO_FAILED; break; }   /* nothing is acknowledged after it */
        if (g->syncing < g->max_syncs && lsn > g->sync_target) {
            if (lsn > *g->end) { rc = PS_GC_PAST_END; break; }
            g->syncing++;
            if (node.state == GC_WAITING) { unlink_node(&node); g->st.waiting--; node.state = GC_OUT; }
            lead(g, flags, t);
            if ((flags & PS_GC_IO) && g->io_on) {
                int r = gc_round_in_c(g, t);
                rc = r > 0 ? PS_GC_DURABLE : r < 0 ? PS_GC_IO_FAILED : PS_GC_LEAD;
            } else {
                rc = PS_GC_LEAD;
            }
            break;
        }
        if (node.state == GC_OUT) {
            link_tail(&g->head, &node);
            node.state = GC_WAITING;
            g->st.waiting++;
        }
        if (node_sleep(g, &node, slice_ns ? &until : NULL) && node.state == GC_WAITING &&
            g->durable < lsn) {
            rc = PS_GC_AGAIN;
            break;
        }
    }
    if (node.state == GC_WAITING) { unlink_node(&node); g->st.waiting--; }
    if (node.py) g->gil_free = 0;            /* this thread takes the GIL now */
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int ps_gc_wait(ps_gcommit *g, uint64_t lsn, int flags, uint64_t slice_ns, ps_gc_ticket *t) {
    return gc_wait(g, lsn, flags, slice_ns, t, 1);
}

/* the wait of a write that got a record (lsn >= 0), or the write's status */
static int64_t wait_written(ps_gcommit *g, int64_t lsn, int flags, uint64_t slice_ns,
                            ps_gc_ticket *t) {
    if (lsn < 0) return lsn;
    t->lsn = (uint64_t)lsn;
    return gc_wait(g, (uint64_t)lsn, flags, slice_ns, t, 0);
}

/* A write from Python let the GIL go: the ready queue's head takes it now,
 * while this thread writes (not after: its write is the head's head start). */
static void entered(ps_gcommit *g, int flags) {
    if (!(flags & PS_GC_PY)) return;
    pthread_mutex_lock(&g->mu);
    gil_released(g);
    pthread_mutex_unlock(&g->mu);
}

int64_t ps_gc_put(ps_gcommit *g, ps_core *c, const char *key, size_t klen, const char *val,
                  size_t vlen, int flags, uint64_t slice_ns, ps_gc_ticket *t) {
    entered(g, flags);
    return wait_written(g, ps_put(c, key, klen, val, vlen), flags, slice_ns, t);
}

int64_t ps_gc_delete(ps_gcommit *g, ps_core *c, const char *key, size_t klen, int flags,
                     uint64_t slice_ns, ps_gc_ticket *t) {
    entered(g, flags);
    return wait_written(g, ps_delete(c, key, klen), flags, slice_ns, t);
}

void ps_gc_done(ps_gcommit *g, ps_gc_ticket *t, int ok) {
    if (!t->granted) return;           /* not a leader's, or reported already */
    uint64_t took = now_ns() - t->t0_ns;
    pthread_mutex_lock(&g->mu);
    gc_finish(g, t, ok, took);
    pthread_mutex_unlock(&g->mu);
}

void ps_gc_set_spin(ps_gcommit *g, uint64_t spin_ns) {   /* read without the mutex too */
    __atomic_store_n(&g->spin_ns, spin_ns, __ATOMIC_RELAXED);
}

void ps_gc_stats_get(ps_gcommit *g, ps_gc_stats *out) {
    pthread_mutex_lock(&g->mu);
    *out = g->st;
    pthread_mutex_unlock(&g->mu);
}
