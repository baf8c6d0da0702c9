/* Group commit (ps_gcommit.h has the protocol).  One mutex and two condition
 * variables per group: `cv` for committers waiting for a round, `linger_cv`
 * for a leader waiting for the last round's threads to come back.  Each
 * waiter links a node on its own stack into the group's list so the leader
 * that covers it can count it (the linger needs the count); nodes live only
 * while their thread is inside ps_gc_wait. */
#include <errno.h>
#include <time.h>

#include "ps_internal.h"
#include "ps_gcommit.h"

typedef struct gc_node {
    struct gc_node *prev, *next;
    uint64_t lsn;
    int counted;          /* a round's leader counted it among its siblings */
} gc_node;

struct ps_gcommit {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_cond_t linger_cv;
    const volatile uint64_t *end;
    uint64_t durable, sync_target;
    int syncing, max_syncs, lingering;
    uint64_t in_flight;   /* threads the last round released, not yet back */
    uint64_t max_linger_ns;
    gc_node head;         /* sentinel of the waiters' list */
    ps_gc_stats st;
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct timespec at_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    return ts;
}

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
    if (cond_init_monotonic(&g->cv)) { pthread_mutex_destroy(&g->mu); free(g); return PS_E_NOMEM; }
    if (cond_init_monotonic(&g->linger_cv)) {
        pthread_cond_destroy(&g->cv); pthread_mutex_destroy(&g->mu); free(g); return PS_E_NOMEM;
    }
    g->end = end_lsn;
    g->durable = g->sync_target = g->st.durable = durable;
    g->max_syncs = max_syncs;
    g->max_linger_ns = max_linger_ns;
    g->head.next = g->head.prev = &g->head;
    *out = g;
    return 0;
}

void ps_gc_destroy(ps_gcommit *g) {
    if (!g) return;
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
        if (g->syncing < g->max_syncs && lsn > g->sync_target) {
            if (lsn > *g->end) { rc = PS_GC_PAST_END; break; }
            g->syncing++;
            if (queued) { unlink_node(&node); queued = 0; g->st.waiting--; }
            lead(g, flags, t);
            rc = PS_GC_LEAD;
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

void ps_gc_done(ps_gcommit *g, ps_gc_ticket *t, int ok) {
    if (!t->granted) return;           /* not a leader's, or reported already */
    uint64_t took = now_ns() - t->t0_ns;
    pthread_mutex_lock(&g->mu);
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
    pthread_mutex_unlock(&g->mu);
}

uint64_t ps_gc_durable(ps_gcommit *g) {
    pthread_mutex_lock(&g->mu);
    uint64_t d = g->durable;
    pthread_mutex_unlock(&g->mu);
    return d;
}

void ps_gc_stats_get(ps_gcommit *g, ps_gc_stats *out) {
    pthread_mutex_lock(&g->mu);
    *out = g->st;
    pthread_mutex_unlock(&g->mu);
}
