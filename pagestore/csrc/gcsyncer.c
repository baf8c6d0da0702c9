/* Group commit: the asyncio syncer (ps_gcommit.h, "The asyncio syncer",
 * has the protocol and each entry point's contract).  One thread
 * (pagestore.aio's) makes everything written durable through the group's
 * wait, as a committer of the log's end would, and wakes the event loop
 * through an eventfd after each round.
 *
 * REQUIRES of every entry point: g from ps_gc_create and not yet destroyed;
 * one syncer thread per group at a time. */
#include "gcstate.h"

int ps_gc_syncer(ps_gcommit *g, int efd, uint64_t slice_ns, ps_gc_ticket *t) {
    int first = PS_GC_FIRST;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        if (g->syncer_linger && *g->end > g->durable && !g->syncer_stop) {
            /* the loop has not yet run the writers the last round released:
             * wait for it (ps_gc_go), at most a mean round (the gate's linger) */
            uint64_t wait = g->st.sync_mean_ns < g->max_linger_ns ? g->st.sync_mean_ns : g->max_linger_ns;
            struct timespec until = at_ns(now_ns() + wait);
            uint64_t t0 = now_ns();
            while (g->syncer_linger && !g->syncer_stop &&
                   pthread_cond_timedwait(&g->kick_cv, &g->mu, &until) != ETIMEDOUT) {}
            g->st.lingered_ns += now_ns() - t0;
        }
        g->syncer_linger = 0;
        uint64_t end = *g->end;
        if (end <= g->durable) {
            if (g->syncer_stop) { pthread_mutex_unlock(&g->mu); return PS_GC_DURABLE; }
            if (g->fail.err) { pthread_mutex_unlock(&g->mu); return PS_GC_IO_FAILED; }
            struct timespec until = at_ns(now_ns() + (slice_ns ? slice_ns : 200000000u));
            __atomic_store_n(&g->syncer_idle, 1, __ATOMIC_SEQ_CST);
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            int w = 0;
            while (*g->end <= g->durable && !g->syncer_stop && w != ETIMEDOUT)
                w = pthread_cond_timedwait(&g->kick_cv, &g->mu, &until);
            __atomic_store_n(&g->syncer_idle, 0, __ATOMIC_SEQ_CST);
            int idle = *g->end <= g->durable && !g->syncer_stop;
            pthread_mutex_unlock(&g->mu);
            if (idle) return PS_GC_AGAIN;
            continue;
        }
        pthread_mutex_unlock(&g->mu);
        int rc = ps_gc_wait(g, end, first | PS_GC_IO, slice_ns, t);
        first = 0;
        if (rc == PS_GC_DURABLE) {
            uint64_t one = 1;
            pthread_mutex_lock(&g->mu);
            g->syncer_linger = 1;      /* before the loop can answer the write below */
            pthread_mutex_unlock(&g->mu);
            while (write(efd, &one, sizeof one) < 0 && errno == EINTR) {}
            first = PS_GC_FIRST;
            continue;
        }
        if (rc == PS_GC_AGAIN) continue;
        return rc;          /* PS_GC_LEAD (granted), PS_GC_IO_FAILED */
    }
}

/* Lock-free unless the syncer sleeps: the writer stored the new end LSN
 * (under the tree lock, whose release is a full barrier on the CPUs we run
 * on; the fence makes it so everywhere) before it reads `syncer_idle`, and
 * the syncer sets `syncer_idle` before it reads the end LSN (its fence):
 * one of the two sees the other's store. */
void ps_gc_kick(ps_gcommit *g) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&g->syncer_idle, __ATOMIC_SEQ_CST)) return;
    pthread_mutex_lock(&g->mu);
    if (g->syncer_idle) pthread_cond_signal(&g->kick_cv);
    pthread_mutex_unlock(&g->mu);
}

void ps_gc_go(ps_gcommit *g) {
    pthread_mutex_lock(&g->mu);
    if (g->syncer_linger) {
        g->syncer_linger = 0;
        pthread_cond_signal(&g->kick_cv);
    }
    pthread_mutex_unlock(&g->mu);
}

const volatile int *ps_gc_syncer_idle_ptr(ps_gcommit *g) { return &g->syncer_idle; }

void ps_gc_syncer_stop(ps_gcommit *g, int stop) {
    pthread_mutex_lock(&g->mu);
    g->syncer_stop = stop != 0;
    pthread_cond_signal(&g->kick_cv);
    pthread_mutex_unlock(&g->mu);
}
