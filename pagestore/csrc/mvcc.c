/* Snapshots and validated commits, over the undo log (undolog.c).
 *
 * A snapshot remembers s, the number of the last write before it.  Its value
 * of key k is the before-image of the OLDEST undo entry of k with seq > s,
 * or the tree's value if k has no such entry (nothing changed it since).  A
 * snapshot scan reads a batch of the tree and, in the same hold of the lock,
 * the overlay: every key of the range changed since s with its value then;
 * Python lays the overlay over the batch.  Bytes held are bounded by the
 * limit given at ps_snap_open (the `snapshot_memory` option): past it the
 * oldest live snapshots are marked too old (their next read fails with
 * PS_E_SNAP_OLD).
 *
 * A transaction commit (ps_txn_commit) validates under the write lock, in
 * the call that applies its writes: a key it read, or a key inside a range it
 * scanned, written after its snapshot means a conflict (PS_E_CONFLICT) and
 * nothing is applied.  Otherwise what it read is still the store's state at
 * its commit, so it behaves as if it ran alone there (serializable).
 *
 * Nothing here is on disk: snapshots end with the process.
 */

#include "undolog.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* ---- snapshots ------------------------------------------------------------- */

static mv_snap *snap_of(const ps_core *c, uint64_t id, int *rc) {
    struct mv_state *m = c->mv;
    uint32_t i = (uint32_t)(id & ((1u << SLOT_BITS) - 1));
    if (!m || i >= m->nsnaps || m->snaps[i].gen != (uint32_t)(id >> SLOT_BITS) ||
        m->snaps[i].state == SNAP_FREE) {
        *rc = PS_E_ARG;
        return NULL;
    }
    if (m->snaps[i].state == SNAP_OLD) {
        *rc = PS_E_SNAP_OLD;
        return NULL;
    }
    *rc = 0;
    return &m->snaps[i];
}

int64_t ps_snap_open(ps_core *c, uint64_t limit) {
    core_wrlock(c);
    PS_REFUSE_IF_CLOSED(c);
    int64_t r = PS_E_NOMEM;
    struct mv_state *m = c->mv;
    if (!m && !(m = c->mv = calloc(1, sizeof *m))) goto out;
    m->limit = limit;
    uint32_t i = 0;
    while (i < m->nsnaps && m->snaps[i].state != SNAP_FREE) i++;
    if (i == m->nsnaps) {
        if (i >= (1u << SLOT_BITS)) goto out;
        uint32_t n = m->nsnaps ? m->nsnaps * 2 : 16;
        mv_snap *ns = realloc(m->snaps, n * sizeof *ns);
        if (!ns) goto out;
        memset(ns + m->nsnaps, 0, (n - m->nsnaps) * sizeof *ns);
        m->snaps = ns;
        m->nsnaps = n;
    }
    mv_snap *s = &m->snaps[i];
    s->gen = (s->gen + 1) & 0x7FFFFFFFu;
    s->state = SNAP_LIVE;
    s->seq = m->seq;
    s->t_ns = now_ns();
    m->live++;
    r = (int64_t)(((uint64_t)s->gen << SLOT_BITS) | i);
out:
    pthread_rwlock_unlock(&c->lock);
    return r;
}

int ps_snap_close(ps_core *c, uint64_t id) {
    core_wrlock(c);
    int rc;
    mv_snap *s = snap_of(c, id, &rc);
    if (s || rc == PS_E_SNAP_OLD) {
        struct mv_state *m = c->mv;
        s = &m->snaps[id & ((1u << SLOT_BITS) - 1)];
        if (s->state == SNAP_LIVE) m->live--;
        s->state = SNAP_FREE;
        undo_trim(m);
        rc = 0;
    }
    pthread_rwlock_unlock(&c->lock);
    return rc;
}

static int64_t snap_get(ps_core *c, uint64_t id, const char *key, size_t klen, char *out,
                        size_t cap, int may_load) {
    int rc;
    mv_snap *s = snap_of(c, id, &rc);
    if (!s) return rc;
    const mv_entry *x = undo_find(c->mv, (const uint8_t *)key, (uint32_t)klen,
                             undo_hash((const uint8_t *)key, klen), s->seq);
    if (!x) return bt_get(c, (const uint8_t *)key, klen, (uint8_t *)out, cap, may_load);
    if (x->vlen < 0) return PS_E_NOT_FOUND;
    if ((size_t)x->vlen <= cap) memcpy(out, x->data + x->klen, (size_t)x->vlen);
    return x->vlen;
}

int64_t ps_snap_get(ps_core *c, uint64_t id, const char *key, size_t klen, char *out, size_t cap) {
    if (klen > c->max_key) return PS_E_NOT_FOUND;
    core_rdlock(c);
    PS_REFUSE_IF_CLOSED(c);
    int64_t r = snap_get(c, id, key, klen, out, cap, 0);
    pthread_rwlock_unlock(&c->lock);
    if (r != PS_RETRY) return r;
    core_wrlock(c);
    PS_REFUSE_IF_CLOSED(c);
    r = snap_get(c, id, key, klen, out, cap, 1);
    unpin_op_all(c);
    pthread_rwlock_unlock(&c->lock);
    return r;
}

/* ---- snapshot scans: the tree's batch plus an overlay ------------------------ */

static __thread const struct mv_state *sort_m;

static int cmp_entry(const void *a, const void *b) {
    const mv_entry *x = &sort_m->ents[*(const uint64_t *)a - sort_m->base];
    const mv_entry *y = &sort_m->ents[*(const uint64_t *)b - sort_m->base];
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    int r = memcmp(x->data, y->data, n);
    if (r) return r;
    if (x->klen != y->klen) return x->klen < y->klen ? -1 : 1;
    return *(const uint64_t *)a < *(const uint64_t *)b ? -1 : 1;   /* older first */
}
static int64_t overlay(ps_core *c, uint64_t s, const uint8_t *lo, size_t lolen, int has_lo,
                       int lo_incl, const uint8_t *hi, size_t hilen, int has_hi, int hi_incl,
                       int reverse, uint8_t *out, size_t cap, size_t *out_len) {
    struct mv_state *m = c->mv;
    uint64_t first = undo_first_after(m, s), n = 0;
    *out_len = 0;
    if (first == m->tail) return 0;
    uint64_t *idx = malloc((size_t)(m->tail - first) * sizeof *idx);
    if (!idx) return PS_E_NOMEM;
    for (uint64_t e = first; e < m->tail; e++)
        if (undo_in_range(ent(m, e), lo, lolen, has_lo, lo_incl, hi, hilen, has_hi, hi_incl)) idx[n++] = e;
    sort_m = m;
    qsort(idx, (size_t)n, sizeof *idx, cmp_entry);
    size_t need = 8, keys = 0;
    for (uint64_t i = 0; i < n; i++) {
        const mv_entry *x = ent(m, idx[i]);
        if (i && ent(m, idx[keys - 1])->klen == x->klen &&
            memcmp(ent(m, idx[keys - 1])->data, x->data, x->klen) == 0)
            continue;                      /* a newer entry of the same key */
        idx[keys++] = idx[i];
        need += 12 + x->klen + (x->vlen > 0 ? (size_t)x->vlen : 0);
    }
    if (need > cap) {
        free(idx);
        *out_len = need;
        return PS_E_NEED_SPACE;
    }
    uint8_t *o = out;
    *o++ = 0x80; *o++ = 4; *o++ = ']'; *o++ = '(';
    for (size_t j = 0; j < keys; j++) {
        const mv_entry *x = ent(m, idx[reverse ? keys - 1 - j : j]);
        if (x->klen < 256) { *o++ = 'C'; *o++ = (uint8_t)x->klen; }
        else { *o++ = 'B'; wr32(o, x->klen); o += 4; }
        memcpy(o, x->data, x->klen);
        o += x->klen;
        if (x->vlen < 0) {
            *o++ = 'N';
        } else {
            if (x->vlen < 256) { *o++ = 'C'; *o++ = (uint8_t)x->vlen; }
            else { *o++ = 'B'; wr32(o, (uint32_t)x->vlen); o += 4; }
            memcpy(o, x->data + x->klen, (size_t)x->vlen);
            o += x->vlen;
        }
        *o++ = 0x86;
    }
    *o++ = 'e'; *o++ = '.';
    *out_len = (size_t)(o - out);
    free(idx);
    return (int64_t)keys;
}

static int64_t snap_scan(ps_core *c, uint64_t id, const char *lo, size_t lolen, int has_lo,
                         int lo_incl, const char *hi, size_t hilen, int has_hi, int hi_incl,
                         int reverse, size_t max_bytes, char *out, size_t cap, size_t *out_len,
                         char *ovl, size_t ovl_cap, size_t *ovl_len, int may_load) {
    int rc;
    mv_snap *s = snap_of(c, id, &rc);
    if (!s) return rc;
    int64_t r = overlay(c, s->seq, (const uint8_t *)lo, lolen, has_lo, lo_incl,
                        (const uint8_t *)hi, hilen, has_hi, hi_incl, reverse, (uint8_t *)ovl,
                        ovl_cap, ovl_len);
    if (r < 0) return r;
    return bt_scan(c, (const uint8_t *)lo, lolen, has_lo, lo_incl, (const uint8_t *)hi, hilen,
                   has_hi, hi_incl, reverse, max_bytes, (uint8_t *)out, cap, out_len, may_load);
}

int64_t ps_snap_scan(ps_core *c, uint64_t id, const char *lo, size_t lolen, int has_lo,
                     int lo_incl, const char *hi, size_t hilen, int has_hi, int hi_incl,
                     int reverse, size_t max_bytes, char *out, size_t cap, size_t *out_len,
                     char *ovl, size_t ovl_cap, size_t *ovl_len) {
    core_rdlock(c);
    PS_REFUSE_IF_CLOSED(c);
    int64_t r = snap_scan(c, id, lo, lolen, has_lo, lo_incl, hi, hilen, has_hi, hi_incl, reverse,
                          max_bytes, out, cap, out_len, ovl, ovl_cap, ovl_len, 0);
    pthread_rwlock_unlock(&c->lock);
    if (r != PS_RETRY) return r;
    core_wrlock(c);
    PS_REFUSE_IF_CLOSED(c);
    r = snap_scan(c, id, lo, lolen, has_lo, lo_incl, hi, hilen, has_hi, hi_incl, reverse,
                  max_bytes, out, cap, out_len, ovl, ovl_cap, ovl_len, 1);
    pthread_rwlock_unlock(&c->lock);
    return r;
}

static int64_t snap_count(ps_core *c, uint64_t id, int may_load) {
    int rc;
    mv_snap *s = snap_of(c, id, &rc);
    if (!s) return rc;
    struct mv_state *m = c->mv;
    int64_t n = (int64_t)c->meta.key_count;
    for (uint64_t e = undo_first_after(m, s->seq); e < m->tail; e++) {
        const mv_entry *x = ent(m, e);
        if (undo_find(m, x->data, x->klen, x->hash, s->seq) != x) continue;   /* counted at its oldest */
        uint8_t b[1];
        int64_t now = bt_get(c, x->data, x->klen, b, 0, may_load);
        if (now < 0 && now != PS_E_NOT_FOUND) return now;
        n += (x->vlen >= 0) - (now != PS_E_NOT_FOUND);
    }
    return n;
}

int64_t ps_snap_count(ps_core *c, uint64_t id) {
    core_rdlock(c);
    PS_REFUSE_IF_CLOSED(c);
    int64_t r = snap_count(c, id, 0);
    pthread_rwlock_unlock(&c->lock);
    if (r != PS_RETRY) return r;
    core_wrlock(c);
    PS_REFUSE_IF_CLOSED(c);
    r = snap_count(c, id, 1);
    unpin_op_all(c);
    pthread_rwlock_unlock(&c->lock);
    return r;
}

int ps_snap_stats(ps_core *c, ps_snap_info *info) {
    memset(info, 0, sizeof *info);
    core_rdlock(c);
    PS_REFUSE_IF_CLOSED(c);
    struct mv_state *m = c->mv;
    if (m) {
        uint64_t oldest = 0, t = now_ns();
        for (uint32_t i = 0; i < m->nsnaps; i++)
            if (m->snaps[i].state == SNAP_LIVE && (!oldest || m->snaps[i].t_ns < oldest))
                oldest = m->snaps[i].t_ns;
        info->open = m->live;
        info->oldest_age_ns = oldest ? t - oldest : 0;
        info->bytes = m->bytes;
        info->entries = m->tail - m->head;
        info->too_old = m->too_old;
    }
    pthread_rwlock_unlock(&c->lock);
    return 0;
}

/* ---- validated commits ---------------------------------------------------------- */

/* Reads: entries u8 kind; kind 1 (a key): u32 klen, key; kind 2 (a range
 * [lo, hi)): u8 flags (1 has_lo, 2 has_hi), u32 lolen, u32 hilen, lo, hi. */
int mv_validate(ps_core *c, uint64_t id, const uint8_t *reads, size_t len) {
    int rc;
    mv_snap *s = snap_of(c, id, &rc);
    if (!s) return rc == PS_E_SNAP_OLD ? PS_E_CONFLICT : rc;
    struct mv_state *m = c->mv;
    uint64_t first = undo_first_after(m, s->seq);
    if (first == m->tail) return 0;                  /* nothing written since */
    for (size_t off = 0; off < len;) {
        if (reads[off] == 1 && len - off >= 5) {
            uint32_t kl = rd32(reads + off + 1);
            if (kl > len - off - 5) return PS_E_ARG;
            const uint8_t *k = reads + off + 5;
            if (undo_find(m, k, kl, undo_hash(k, kl), s->seq)) return PS_E_CONFLICT;
            off += 5 + (size_t)kl;
        } else if (reads[off] == 2 && len - off >= 10) {
            uint8_t f = reads[off + 1];
            uint32_t ll = rd32(reads + off + 2), hl = rd32(reads + off + 6);
            if ((uint64_t)ll + hl > len - off - 10) return PS_E_ARG;
            const uint8_t *lo = reads + off + 10, *hi = lo + ll;
            for (uint64_t e = first; e < m->tail; e++)
                if (undo_in_range(ent(m, e), lo, ll, f & 1, 1, hi, hl, (f & 2) != 0, 0))
                    return PS_E_CONFLICT;
            off += 10 + (size_t)ll + hl;
        } else {
            return PS_E_ARG;
        }
    }
    return 0;
}

int64_t ps_txn_commit(ps_core *c, uint64_t id, const char *reads, size_t rlen, const char *ops,
                      size_t len, uint64_t txid) {
    mv_check chk = {id, (const uint8_t *)reads, rlen};
    return core_apply_batch(c, ops, len, txid, &chk);
}
