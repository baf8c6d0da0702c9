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
    pthread_cond_t *cvs[] = {&g->cv, &g->linger_cv, &g->io_cv, &g->kick_cv};
    for (; made < 4; made++)
        if (cond_init_monotonic(cvs[made])) break;
    if (made < 4) {
        while (made--) pthread_cond_destroy(cvs[made]);
        pthread_mutex_destroy(&g->pub_mu); pthread_mutex_destroy(&g->mu); free(g);
        return PS_E_NOMEM;
    }
    g->end = end_lsn;
    g->durable = g->sync_target = g->st.durable = g->published = durable;
    g->max_syncs = max_syncs;
    g->max_linger_ns = max_linger_ns;
    g->head.next = g->head.prev = &g->head;
    *out = g;
    return 0;
}

void ps_gc_destroy(ps_gcommit *g) {
    if (!g) return;
    pthread_cond_destroy(&g->kick_cv);
    pthread_cond_destroy(&g->io_cv);
    pthread_mutex_destroy(&g->pub_mu);
    pthread_cond_destroy(&g->linger_cv);
    pthread_cond_destroy(&g->cv);
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
    uint64_t back = 1;                 /* this leader, and each waiter it covered */
    for (gc_node *n = g->head.next; n != &g->head; n = n->next) {
        if (!n->counted && n->lsn <= g->durable) { n->counted = 1; back++; }
    }
    g->in_flight = ok ? back : 0;
    if (g->head.next != &g->head) pthread_cond_broadcast(&g->cv);
}

int ps_gc_wait(ps_gcommit *g, uint64_t lsn, int flags, uint64_t slice_ns, ps_gc_ticket *t) {
    gc_node node = {NULL, NULL, lsn, 0};
    int queued = 0, rc;
    struct timespec until = at_ns(slice_ns ? now_ns() + slice_ns : 0);
    pthread_mutex_lock(&g->mu);
    if ((flags & PS_GC_FIRST) && g->in_flight) {
        if (--g->in_flight == 0 && g->lingering) pthread_cond_signal(&g->linger_cv);
    }
    for (;;) {
        if (g->durable >= lsn) {
            g->st.round_size++;
            g->st.grouped++;
            rc = PS_GC_DURABLE;
            break;
        }
        if (g->fail.err) { rc = PS_GC_IO_FAILED; break; }   /* nothing is acknowledged after it */
        if (g->syncing < g->max_syncs && lsn > g->sync_target) {
            if (lsn > *g->end) { rc = PS_GC_PAST_END; break; }
            g->syncing++;
            if (queued) { unlink_node(&node); queued = 0; g->st.waiting--; }
            lead(g, flags, t);
            if ((flags & PS_GC_IO) && g->io_on) {
                int r = gc_round_in_c(g, t);
                rc = r > 0 ? PS_GC_DURABLE : r < 0 ? PS_GC_IO_FAILED : PS_GC_LEAD;
            } else {
                rc = PS_GC_LEAD;
            }
            break;
        }
        if (!queued) {
            node.prev = g->head.prev;
            node.next = &g->head;
            g->head.prev->next = &node;
            g->head.prev = &node;
            queued = 1;
            g->st.waiting++;
        }
        int w = slice_ns ? pthread_cond_timedwait(&g->cv, &g->mu, &until)
                         : pthread_cond_wait(&g->cv, &g->mu);
        if (w == ETIMEDOUT && g->durable < lsn) { rc = PS_GC_AGAIN; break; }
    }
    if (queued) { unlink_node(&node); g->st.waiting--; }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* the wait of a write that got a record (lsn >= 0), or the write's status */
static int64_t wait_written(ps_gcommit *g, int64_t lsn, int flags, uint64_t slice_ns,
                            ps_gc_ticket *t) {
    if (lsn < 0) return lsn;
    t->lsn = (uint64_t)lsn;
    return ps_gc_wait(g, (uint64_t)lsn, flags, slice_ns, t);
}

int64_t ps_gc_put(ps_gcommit *g, ps_core *c, const char *key, size_t klen, const char *val,
                  size_t vlen, int flags, uint64_t slice_ns, ps_gc_ticket *t) {
    return wait_written(g, ps_put(c, key, klen, val, vlen), flags, slice_ns, t);
}

int64_t ps_gc_delete(ps_gcommit *g, ps_core *c, const char *key, size_t klen, int flags,
                     uint64_t slice_ns, ps_gc_ticket *t) {
    return wait_written(g, ps_delete(c, key, klen), flags, slice_ns, t);
}

void ps_gc_done(ps_gcommit *g, ps_gc_ticket *t, int ok) {
    if (!t->granted) return;           /* not a leader's, or reported already */
    uint64_t took = now_ns() - t->t0_ns;
    pthread_mutex_lock(&g->mu);
    gc_finish(g, t, ok, took);
    pthread_mutex_unlock(&g->mu);
}

void ps_gc_stats_get(ps_gcommit *g, ps_gc_stats *out) {
    pthread_mutex_lock(&g->mu);
    *out = g->st;
    pthread_mutex_unlock(&g->mu);
}
