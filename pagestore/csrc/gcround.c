/* Group commit: rounds written and synced in C (PS_GC_IO; ps_gcommit.h,
 * "Rounds written and synced in C", has the protocol and each entry
 * point's contract).  The elected leader pwrites [published, target) of a
 * registered segment under the publish lock, fdatasyncs it and reports the
 * round (gc_finish, gcommit.c) without the GIL; here too the registration
 * of segments, the publish lock and the first failure kept.
 *
 * REQUIRES of every entry point: g from ps_gc_create and not yet destroyed;
 * a registered buffer and fd stay valid until ps_gc_io_forget (or
 * ps_gc_io_segment of seq + 2) has returned. */
#include "gcstate.h"

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

/* The elected leader's round, in C (gcstate.h has its contract). */
int gc_round_in_c(ps_gcommit *g, ps_gc_ticket *t) {
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
        gc_finish(g, t, 0, took);
        return -1;
    }
    g->io.rounds++;
    gc_finish(g, t, 1, took);
    return 1;
}


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
