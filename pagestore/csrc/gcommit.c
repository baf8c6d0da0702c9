/* Group commit (ps_gcommit.h has the protocol).  One mutex and two condition
 * variables per group: `cv` for committers waiting for a round, `linger_cv`
 * for a leader waiting for the last round's threads to come back.  Each
 * waiter links a node on its own stack into the group's list so the leader
 * that covers it can count it (the linger needs the count); nodes live only
 * while their thread is inside ps_gc_wait.
 *
 * Rounds in C (PS_GC_IO, ps_gcommit.h): the leader pwrites and fdatasyncs
 * the registered segment and reports the round here, without the GIL; the
 * publish lock `pub_mu` serialises its pwrite with the WAL's own publishes. */
#include <errno.h>
#include <time.h>
#include <unistd.h>

#include "ps_internal.h"
#include "ps_gcommit.h"

typedef struct gc_node {
    struct gc_node *prev, *next;
    uint64_t lsn;
    int counted;          /* a round's leader counted it among its siblings */
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

/* A round ended, lock held: ps_gc_done's work. */
static void finish(ps_gcommit *g, ps_gc_ticket *t, int ok, uint64_t took) {
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

static int pwrite_all(int fd, const uint8_t *p, uint64_t n, uint64_t off) {
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno ? errno : EIO;
        }
        if (w == 0) return EIO;
        p += w; n -= (uint64_t)w; off += (uint64_t)w;
    }
    return 0;
}

/* The elected leader's round, in C: lock held on entry and on return.
 * RETURNS 1 (durable), -1 (failed: kept in g->fail, C rounds off), 0 (not
 * for C: the caller hands it to Python, still granted). */
static int round_in_c(ps_gcommit *g, ps_gc_ticket *t) {
    uint64_t S = g->seg_size, seq = t->start / S;
    if (t->target == 0 || (t->target - 1) / S != seq) return 0;
    gc_slot *s = &g->slot[seq & 1];
    if (!s->valid || s->seq != seq) return 0;
    if (g->zeroing[seq & 1] && g->zero_seq[seq & 1] == seq) return 0;
    s->busy++;
    int fd = s->fd, direct = g->io_direct, err = 0, in_sync = 0;
    uint8_t *buf = s->buf;
    uint64_t pw = 0, bytes = 0;
    pthread_mutex_unlock(&g->mu);

    /* publish [published, target): the blocks covering it, from the buffer
     * to the same offsets of the segment's file (wal/segments.py publish) */
    pthread_mutex_lock(&g->pub_mu);
    uint64_t a = g->published;
    if (t->target > a) {
        uint64_t base = seq * S, end = t->target - base;
        /* the END trailer goes out with the record: it proves that record complete */
        uint8_t img[PS_WAL_END_MAX];
        size_t n = ps_wal_end_image(t->target, img);
        uint64_t lo = a > base ? a - base : 0, hi = end + n < S ? end + n : S;
        if (direct) lo -= lo % BLOCK;
        uint64_t top = (hi + BLOCK - 1) / BLOCK * BLOCK, last = top - BLOCK;
        /* the partial last block alone: it must sit in a 4 KiB folio (segments.py) */
        uint64_t cut = top != hi && lo < last && !direct ? last : top;
        /* The END at `end` goes from a copy of its block(s) with the END laid
         * over: in the buffer, the next record may already be half over it. */
        _Alignas(4096) uint8_t scratch[2 * BLOCK];
        uint64_t sb = top;
        if (end > BLOCK && end < S) {
            sb = end - end % BLOCK;
            memcpy(scratch, buf + sb, top - sb);
            memcpy(scratch + (end - sb), img, n);
        }
        for (uint64_t x = lo; x < top && !err;) {
            uint64_t y = x < sb && sb < cut ? sb : x < cut ? cut : top;
            err = pwrite_all(fd, x < sb ? buf + x : scratch + (x - sb), y - x, x);
            pw++;
            x = y;
        }
        if (!err) {
            g->published = t->target;
            bytes = top - lo;
        }
    }
    pthread_mutex_unlock(&g->pub_mu);
    if (!err && fdatasync(fd) != 0) {
        err = errno ? errno : EIO;
        in_sync = 1;
    }
    uint64_t took = now_ns() - t->t0_ns;

    pthread_mutex_lock(&g->mu);
    if (--s->busy == 0) pthread_cond_broadcast(&g->io_cv);
    g->io.pwrites += pw;
    g->io.pwrite_bytes += bytes;
    if (!err || in_sync) g->io.fsyncs++;
    if (err) {
        if (!g->fail.err) {
            g->fail.err = err;
            g->fail.during_sync = in_sync;
            g->fail.seq = seq;
            g->fail.acked = g->durable;
            g->fail.handed = t->target > g->durable ? t->target : g->durable;
        }
        g->io_on = 0;
        finish(g, t, 0, took);
        return -1;
    }
    g->io.rounds++;
    finish(g, t, 1, took);
    return 1;
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
                int r = round_in_c(g, t);
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
    finish(g, t, ok, took);
    pthread_mutex_unlock(&g->mu);
}

/* ---- rounds in C: registration, publish lock, failure -------------------- */

/* lock held: wait until no C round uses any registration */
static void quiesce(ps_gcommit *g, gc_slot *only) {
    for (;;) {
        int busy = 0;
        for (int i = 0; i < 2; i++)
            if ((!only || only == &g->slot[i]) && g->slot[i].busy) busy = 1;
        if (!busy) return;
        pthread_cond_wait(&g->io_cv, &g->mu);
    }
}

int ps_gc_io_enable(ps_gcommit *g, int on, uint64_t segment_size, int direct) {
    if (on && (segment_size == 0 || segment_size % BLOCK)) return PS_E_ARG;
    pthread_mutex_lock(&g->mu);
    if (on) {
        g->seg_size = segment_size;
        g->io_direct = direct != 0;
        g->io_on = g->fail.err == 0;
    } else {
        g->io_on = 0;
        quiesce(g, NULL);
    }
    pthread_mutex_unlock(&g->mu);
    return 0;
}

int ps_gc_io_segment(ps_gcommit *g, uint64_t seq, int fd, uint8_t *buf) {
    if (fd < 0 || !buf) return PS_E_ARG;
    pthread_mutex_lock(&g->mu);
    gc_slot *s = &g->slot[seq & 1];
    s->valid = 0;
    quiesce(g, s);
    s->seq = seq;
    s->fd = fd;
    s->buf = buf;
    s->valid = 1;
    pthread_mutex_unlock(&g->mu);
    return 0;
}

void ps_gc_io_forget(ps_gcommit *g, uint64_t before_seq) {
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < 2; i++) {
        gc_slot *s = &g->slot[i];
        if (s->valid && s->seq < before_seq) {
            s->valid = 0;
            quiesce(g, s);
            s->buf = NULL;
            s->fd = -1;
        } else if (!s->valid) {
            quiesce(g, s);
        }
    }
    pthread_mutex_unlock(&g->mu);
}

void ps_gc_io_zeroing(ps_gcommit *g, uint64_t seq, int on) {
    pthread_mutex_lock(&g->mu);
    /* kept apart from the registration: the grower may begin before it */
    g->zero_seq[seq & 1] = seq;
    g->zeroing[seq & 1] = on != 0;
    pthread_mutex_unlock(&g->mu);
}

void ps_gc_pub_lock(ps_gcommit *g) { pthread_mutex_lock(&g->pub_mu); }
void ps_gc_pub_unlock(ps_gcommit *g) { pthread_mutex_unlock(&g->pub_mu); }
uint64_t ps_gc_published(ps_gcommit *g) { return g->published; }
void ps_gc_set_published(ps_gcommit *g, uint64_t published) { g->published = published; }

const volatile uint64_t *ps_gc_durable_ptr(ps_gcommit *g) { return &g->durable; }

void ps_gc_io_failure_get(ps_gcommit *g, ps_gc_io_failure *out) {
    pthread_mutex_lock(&g->mu);
    *out = g->fail;
    pthread_mutex_unlock(&g->mu);
}

void ps_gc_io_stats_get(ps_gcommit *g, ps_gc_io_stats *out) {
    pthread_mutex_lock(&g->mu);
    *out = g->io;
    pthread_mutex_unlock(&g->mu);
}

/* ---- the asyncio syncer ------------------------------------------------- */

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

void ps_gc_stats_get(ps_gcommit *g, ps_gc_stats *out) {
    pthread_mutex_lock(&g->mu);
    *out = g->st;
    pthread_mutex_unlock(&g->mu);
}
