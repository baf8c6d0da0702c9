/* The undo log: before-images kept for open snapshots (mvcc.c has the whole
 * picture).
 *
 * While a snapshot is open, every write (put, delete, each op of a batch)
 * first records the key's before-image (its value, or "absent") here,
 * inside the same hold of the tree write lock as the change itself, so the
 * tree and the log are never seen out of step.  Each entry carries the
 * write's sequence number: writes are numbered 1, 2, ... in commit order
 * (all ops of one batch share a number).
 *
 * The log is an array in seq order plus a chained hash index whose chains
 * run newest to oldest (bucket head = newest entry), so a lookup walks its
 * chain until an entry at or below the snapshot's number.  Entries are
 * numbered for good; [head, tail) are live, and a chain link below head ends
 * the chain, so trimming the front never touches the index.  A write that
 * fails rolls its entries back off the tail (they head their chains).  Past
 * the bound the caller passes, the oldest live snapshots are marked too old
 * and the entries only they needed are freed: writes never wait or fail for
 * a snapshot.
 *
 * The same log undoes writes the WAL did not acknowledge.  Where a write is
 * applied before its commit can fail (fsync mode, a WAL that publishes with
 * pwrite), ps_undo_keep has every write keep its before-image, snapshots or
 * not, stamped with the end of its last record, until the log acknowledges
 * that end.  When the log fails, ps_wal_fence puts back, newest first, every
 * before-image of a write past the acknowledged end and refuses writes from
 * then on, in one hold of the lock: a write that raised leaves no trace in
 * memory, and none is applied after the store saw the error.
 */

#include "undolog.h"

#include <stdlib.h>
#include <string.h>

uint32_t undo_hash(const uint8_t *k, size_t n) {
    uint64_t h = 1469598103934665603ull;          /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ k[i]) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32));
}


/* ---- the log ------------------------------------------------------------- */

static int rehash(struct mv_state *m, size_t n) {
    uint64_t *b = calloc(n, sizeof *b);
    if (!b) return PS_E_NOMEM;
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = n;
    for (uint64_t e = m->head; e < m->tail; e++) {
        mv_entry *x = ent(m, e);
        uint64_t *slot = &b[x->hash & (n - 1)];
        x->next = *slot;
        *slot = e + 1;
    }
    return 0;
}

static int append(struct mv_state *m, uint64_t seq, uint32_t hash, uint8_t *data, uint32_t klen,
                  int64_t vlen) {
    if (m->tail - m->base == m->cap) {
        size_t used = (size_t)(m->tail - m->head);
        if (m->head - m->base >= m->cap / 2 && m->cap) {
            memmove(m->ents, ent(m, m->head), used * sizeof *m->ents);
            m->base = m->head;
        } else {
            size_t ncap = m->cap ? m->cap * 2 : 256;
            mv_entry *ne = realloc(m->ents, ncap * sizeof *ne);
            if (!ne) return PS_E_NOMEM;
            m->ents = ne;
            m->cap = ncap;
        }
    }
    if (m->tail - m->head >= m->nbuckets) {
        int rc = rehash(m, m->nbuckets ? m->nbuckets * 2 : 256);
        if (rc) return rc;
    }
    uint64_t e = m->tail++;
    mv_entry *x = ent(m, e);
    x->seq = seq;
    x->hash = hash;
    x->klen = klen;
    x->vlen = vlen;
    x->data = data;
    x->lsn = UINT64_MAX;
    uint64_t *slot = &m->buckets[hash & (m->nbuckets - 1)];
    x->next = *slot;
    *slot = e + 1;
    m->bytes += ENTRY_OVERHEAD + klen + (vlen > 0 ? (uint64_t)vlen : 0);
    return 0;
}

static void drop_head(struct mv_state *m) {
    mv_entry *x = ent(m, m->head++);
    m->bytes -= ENTRY_OVERHEAD + x->klen + (x->vlen > 0 ? (uint64_t)x->vlen : 0);
    free(x->data);
}

static void drop_tail(struct mv_state *m) {
    mv_entry *x = ent(m, --m->tail);
    m->buckets[x->hash & (m->nbuckets - 1)] = x->next;   /* it was its chain's head */
    m->bytes -= ENTRY_OVERHEAD + x->klen + (x->vlen > 0 ? (uint64_t)x->vlen : 0);
    free(x->data);
}

void undo_trim(struct mv_state *m) {
    uint64_t min = UINT64_MAX;
    for (uint32_t i = 0; i < m->nsnaps; i++)
        if (m->snaps[i].state == SNAP_LIVE && m->snaps[i].seq < min) min = m->snaps[i].seq;
    uint64_t acked = m->acked ? __atomic_load_n(m->acked, __ATOMIC_ACQUIRE) : UINT64_MAX;
    while (m->head < m->tail && ent(m, m->head)->seq <= min && ent(m, m->head)->lsn <= acked)
        drop_head(m);
}

const mv_entry *undo_find(const struct mv_state *m, const uint8_t *k, uint32_t kl, uint32_t h,
                          uint64_t s) {
    if (!m->nbuckets) return NULL;
    const mv_entry *hit = NULL;
    uint64_t e1 = m->buckets[h & (m->nbuckets - 1)];
    while (e1 && e1 - 1 >= m->head) {
        const mv_entry *x = &m->ents[e1 - 1 - m->base];
        if (x->seq <= s) break;              /* older entries are older still */
        if (x->hash == h && x->klen == kl && memcmp(x->data, k, kl) == 0) hit = x;
        e1 = x->next;
    }
    return hit;
}

uint64_t undo_first_after(const struct mv_state *m, uint64_t s) {
    uint64_t lo = m->head, hi = m->tail;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (m->ents[mid - m->base].seq <= s) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* ---- hooks in the write paths (core.c) ----------------------------------- */

int mv_capture(ps_core *c, const char *key, size_t klen, int is_delete) {
    struct mv_state *m = c->mv;
    if (m->refused) return set_err(c, PS_E_IO, "writes are refused: the store failed earlier (its log or a checkpoint)");
    if ((!m->live && !m->acked) || klen > c->max_key) return 0;
    uint8_t small[512];
    int64_t n = bt_get(c, (const uint8_t *)key, klen, small, sizeof small, 1);
    unpin_op_all(c);
    if (n == PS_E_NOT_FOUND && is_delete) return 0;      /* changes nothing */
    if (n < 0 && n != PS_E_NOT_FOUND) return (int)n;
    int64_t vlen = n == PS_E_NOT_FOUND ? -1 : n;
    uint8_t *data = malloc(klen + (vlen > 0 ? (size_t)vlen : 0) + 1);
    if (!data) return PS_E_NOMEM;
    memcpy(data, key, klen);
    if (vlen > (int64_t)sizeof small) {
        int64_t r = bt_get(c, (const uint8_t *)key, klen, data + klen, (size_t)vlen, 1);
        unpin_op_all(c);
        if (r != vlen) { free(data); return r < 0 ? (int)r : PS_E_CORRUPT; }
    } else if (vlen > 0) {
        memcpy(data + klen, small, (size_t)vlen);
    }
    int rc = append(m, m->seq + 1, undo_hash((const uint8_t *)key, klen), data, (uint32_t)klen, vlen);
    if (rc) free(data);
    return rc;
}

void mv_op_done(ps_core *c, int committed) {
    struct mv_state *m = c->mv;
    if (!committed) {
        while (m->tail > m->head && ent(m, m->tail - 1)->seq == m->seq + 1) drop_tail(m);
        return;
    }
    /* the op's entries are the newest: stamp them with the end of its records */
    for (uint64_t e = m->tail; e > m->head && ent(m, e - 1)->seq == m->seq + 1; e--)
        ent(m, e - 1)->lsn = c->sig.wal_end_lsn;
    m->seq++;
    if (m->acked && m->head < m->tail &&
        ent(m, m->head)->lsn <= __atomic_load_n(m->acked, __ATOMIC_ACQUIRE))
        undo_trim(m);
    /* Over the bound: the oldest live snapshots go, never the write. */
    while (m->bytes > m->limit && m->live) {
        uint32_t old = UINT32_MAX;
        for (uint32_t i = 0; i < m->nsnaps; i++)
            if (m->snaps[i].state == SNAP_LIVE && (old == UINT32_MAX || m->snaps[i].seq < m->snaps[old].seq))
                old = i;
        m->snaps[old].state = SNAP_OLD;
        m->live--;
        m->too_old++;
        undo_trim(m);
    }
}

int ps_undo_keep(ps_core *c, const uint64_t *acked) {
    core_wrlock(c);
    PS_REFUSE_IF_CLOSED(c);
    struct mv_state *m = c->mv;
    int rc = PS_OK;
    if (!m && !(m = c->mv = calloc(1, sizeof *m))) rc = PS_E_NOMEM;
    else m->acked = acked;
    pthread_rwlock_unlock(&c->lock);
    return rc;
}

int64_t ps_wal_fence(ps_core *c, uint64_t acked) {
    core_wrlock(c);
    PS_REFUSE_IF_CLOSED(c);
    struct mv_state *m = c->mv;
    int rc = 0;
    if (!m && !(m = c->mv = calloc(1, sizeof *m))) rc = PS_E_NOMEM;
    if (!rc) m->refused = 1;
    while (!rc && m->tail > m->head && ent(m, m->tail - 1)->lsn > acked) {
        mv_entry *x = ent(m, m->tail - 1);
        op_begin(c, 1);
        rc = x->vlen < 0 ? bt_delete(c, x->data, x->klen, 0, NULL)
                         : bt_put(c, x->data, x->klen, x->data + x->klen, (size_t)x->vlen, 0, NULL);
        if (rc == PS_E_NOT_FOUND) rc = 0;
        unpin_op_all(c);
        if (rc) {
            op_rollback(c);
            break;
        }
        op_commit(c);
        drop_tail(m);
    }
    int64_t end = (int64_t)c->sig.wal_end_lsn;
    pthread_rwlock_unlock(&c->lock);
    return rc ? rc : end;
}

void mv_free(ps_core *c) {
    struct mv_state *m = c->mv;
    if (!m) return;
    while (m->head < m->tail) drop_head(m);
    free(m->ents); free(m->buckets); free(m->snaps); free(m);
    c->mv = NULL;
}

int undo_in_range(const mv_entry *x, const uint8_t *lo, size_t lolen, int has_lo, int lo_incl,
                  const uint8_t *hi, size_t hilen, int has_hi, int hi_incl) {
    if (has_lo) {
        size_t n = x->klen < lolen ? x->klen : lolen;
        int r = memcmp(x->data, lo, n);
        if (!r) r = x->klen < lolen ? -1 : x->klen > lolen;
        if (r < 0 || (r == 0 && !lo_incl)) return 0;
    }
    if (has_hi) {
        size_t n = x->klen < hilen ? x->klen : hilen;
        int r = memcmp(x->data, hi, n);
        if (!r) r = x->klen < hilen ? -1 : x->klen > hilen;
        if (r > 0 || (r == 0 && !hi_incl)) return 0;
    }
    return 1;
}

/* The overlay: for every key in the bounds changed since s, its value as of s
 * (None: absent then), in key order, as a pickle of a list of 2-tuples. */
