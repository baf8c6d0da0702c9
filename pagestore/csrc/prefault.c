/* Page memory is asked to use transparent huge pages: random gets are
 * TLB-bound without them (1M keys, 512 MiB: 631-677k gets/s with, 534-590k
 * without).  But under this kernel's defrag=madvise the first touch of each
 * 2 MiB huge page compacts memory synchronously: a 5.4-5.7 ms stall inside
 * the put that grew the store, once per ~500 new pages, and a 1M-key load
 * ran 25 % slower.  So a prefault thread populates the memory just ahead of
 * the next fresh slot, off the writers' path.  Fresh slots leave the free
 * list in index order (ps_create pushes them so), so the frontier only
 * grows; reused slots are already populated.  MADV_POPULATE_WRITE (Linux
 * 5.14) faults pages in without changing a byte, so it may run while the
 * slots below it are in use.  Where it is missing, nothing is prefaulted
 * and first touches fault in the writer, as plain memory does.
 *
 * The checkpoint buffer too: a writer that changes a page of a running
 * checkpoint copies it there first, and the first use of each buffer page
 * faulted inside that put (~1-2 us, on most puts of a store's first
 * checkpoints, since nearly every put then copies a page).  ckpt_begin asks
 * for as much of the buffer as its checkpoint could use; copies take buffer
 * pages from index 0 up, the order in which they are populated. */
#include <sys/mman.h>
#include <unistd.h>

#include "ps_internal.h"

#define AHEAD (8u << 20)   /* populated beyond the fresh-slot frontier */
#define STEP (2u << 20)    /* one huge page per madvise: a stop request waits at most that */

/* Populate one step of [*done, goal) of `base` with pf_mu dropped meanwhile;
 * on failure (unsupported) *done jumps to `limit`: stop trying.  Returns the
 * bytes now known populated, for the stats. */
static size_t populate_step(ps_core *c, uint8_t *base, size_t *done, size_t goal, size_t limit) {
    size_t at = *done, n = goal - at < STEP ? goal - at : STEP;
    pthread_mutex_unlock(&c->pf_mu);
    int ok = madvise(base + at, n, MADV_POPULATE_WRITE) == 0;
    pthread_mutex_lock(&c->pf_mu);
    *done = ok ? at + n : limit;
    return ok ? at + n : at;
}

static void *prefault_loop(void *arg) {
    ps_core *c = arg;
    size_t total = (size_t)c->nslots * c->page_size, cow_total = (size_t)c->ncow * c->page_size;
    pthread_mutex_lock(&c->pf_mu);
    for (;;) {
        while (!c->pf_stop && c->pf_done >= c->pf_goal && c->pf_cow_done >= c->pf_cow_goal)
            pthread_cond_wait(&c->pf_cv, &c->pf_mu);
        if (c->pf_stop) break;
        if (c->pf_cow_done < c->pf_cow_goal)        /* a checkpoint is running: its copies first */
            c->sig.cow_prefaulted_bytes =
                populate_step(c, c->cow_mem, &c->pf_cow_done, c->pf_cow_goal, cow_total);
        else
            c->sig.prefaulted_bytes =
                populate_step(c, c->mem, &c->pf_done, c->pf_goal < total ? c->pf_goal : total, total);
    }
    pthread_mutex_unlock(&c->pf_mu);
    return NULL;
}

void prefault_start(ps_core *c) {
#if defined(MADV_HUGEPAGE) && defined(MADV_POPULATE_WRITE)
    size_t total = (size_t)c->nslots * c->page_size;
    if (total < 2 * AHEAD) return;          /* small stores: nothing to gain */
    if (madvise(c->mem, total, MADV_HUGEPAGE) != 0) return;
    pthread_mutex_init(&c->pf_mu, NULL);
    pthread_cond_init(&c->pf_cv, NULL);
    c->pf_goal = c->pf_asked = AHEAD;
    if (pthread_create(&c->pf_thread, NULL, prefault_loop, c) != 0) {
        pthread_cond_destroy(&c->pf_cv);
        pthread_mutex_destroy(&c->pf_mu);
        return;
    }
    c->pf_pid = getpid();
    c->pf_on = 1;
#else
    (void)c;
#endif
}

/* Slot s is about to be used for the first time (under the tree write lock,
 * so pf_asked needs no lock; the thread's goal does). */
void prefault_need(ps_core *c, uint32_t s) {
    size_t edge = ((size_t)s + 1) * c->page_size;
    if (!c->pf_on || edge + AHEAD / 2 <= c->pf_asked || getpid() != c->pf_pid) return;
    c->pf_asked = edge + AHEAD;
    size_t total = (size_t)c->nslots * c->page_size;
    pthread_mutex_lock(&c->pf_mu);
    /* never beyond the region: a goal past its end could not be reached, and
     * the thread would call madvise on nothing forever (a core burnt for as
     * long as the store stays open once its slots had all been used) */
    c->pf_goal = c->pf_asked < total ? c->pf_asked : total;
    pthread_cond_signal(&c->pf_cv);
    pthread_mutex_unlock(&c->pf_mu);
}

/* A checkpoint of `pages` pages begins (under the tree write lock): it may
 * copy up to that many pages into the checkpoint buffer. */
void prefault_cow(ps_core *c, uint64_t pages) {
    if (!c->pf_on || getpid() != c->pf_pid) return;
    uint64_t n = pages < c->ncow ? pages : c->ncow;
    size_t want = (size_t)n * c->page_size;
    pthread_mutex_lock(&c->pf_mu);
    if (want > c->pf_cow_goal) {
        c->pf_cow_goal = want;
        pthread_cond_signal(&c->pf_cv);
    }
    pthread_mutex_unlock(&c->pf_mu);
}

void prefault_stop(ps_core *c) {
    if (!c->pf_on) return;
    if (getpid() != c->pf_pid) {
        /* a forked child: the thread stayed in the parent, there is nothing to join */
        c->pf_on = 0;
        return;
    }
    pthread_mutex_lock(&c->pf_mu);
    c->pf_stop = 1;
    pthread_cond_signal(&c->pf_cv);
    pthread_mutex_unlock(&c->pf_mu);
    pthread_join(c->pf_thread, NULL);
    pthread_cond_destroy(&c->pf_cv);
    pthread_mutex_destroy(&c->pf_mu);
    c->pf_on = 0;
}
