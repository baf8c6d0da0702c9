/* What a write rolled back for want of page memory has proven it needs.
 *
 * Why.  A write's changed pages stay in page memory until it commits
 * (no-steal), so one that must change more pages at once than page memory
 * has slots can never commit, however long it waits for checkpoints.  The
 * retry loop (Engine.retry, pagestore/engine.py) waits for room and tries
 * again; it must know when no wait can help from what the write has shown,
 * not from a guess: the linear estimate of the error message (shortfall.py)
 * is an upper bound for random keys, and giving up on it would fail batches
 * that fit.  Beside other writers page memory is never all clean, so "it
 * failed with all of memory to itself" cannot tell it either.
 *
 * The bound.  When a write fails with PS_E_NOMEM it holds H pages it changed
 * or created (the undo log) and needed one more: H + 1.  A batch also has its
 * puts not yet applied (the failed one and those after it, up to the first
 * delete), each key counted once, as its last put in the batch.  Every put
 * changes the leaf whose range holds its key when it runs (bt_put writes the
 * leaf even for an equal value); until that leaf changes no other put shrinks
 * its range (a leaf splits only when a put lands in it; there are no merges
 * or redistributions; a delete can take a leaf out of the tree, hence the
 * stop).  So at its commit the batch holds:
 *   - every leaf, not yet changed, where one of those puts lands now (U);
 *   - for the resident leaves they land in, pages enough for their cells and
 *     slots now plus what the puts add (bt_put_target): at most `cap` bytes a
 *     leaf, so more pages than those leaves when the bytes overflow them;
 *   - its other pages.
 * New pages may reuse freed ones it already holds: the pages it freed so
 * far, overflow chains its puts will free, freelist pages it took, and the
 * pages of the failed write's own split (the tree above it half-updated):
 * all taken off the new pages.  A write that failed after a split rewrote
 * its page but before the new half was linked (split_open) leaves keys that
 * no descent finds: then only H + 1 is claimed.  Leaves reached only through pages not in
 * memory are not counted, and their keys count as shrinking the cells they
 * replace as much as any cell can.  What remains is a lower bound.  A single
 * put of a value in overflow pages has its own: the pages of its new chain
 * (put_need).
 *
 * The figure is kept per thread (the retry runs in the thread that failed),
 * so another writer's rollback in between cannot replace it. */
#include "ps_internal.h"

#include <stdlib.h>

static __thread uint64_t last_need;

void rollback_need_note(uint64_t pages) { last_need = pages; }

uint64_t ps_rollback_need(void) { return last_need; }

/* A put of a value of vlen bytes in overflow pages: at its commit it holds
 * every page of the new chain and the leaf.  The chain's pages are new; the
 * freelist can hand it only pages it does not hold yet, but for the trunk
 * pages it empties and takes (the first of them changed, so held). */
uint64_t put_need(const ps_core *c, size_t vlen) {
    uint64_t cap = c->usable - O_DATA, ids = (c->usable - F_IDS) / 8;
    uint64_t chain = (vlen + cap - 1) / cap, trunks = 1 + chain / ids;
    return chain > trunks ? chain - trunks + 1 : 1;
}

typedef struct want {
    const uint8_t *key;
    uint32_t klen;
    int known;              /* bt_put_target found its leaf */
    size_t off;
    bt_target t;
} want_t;

static int by_key_then_order(const void *a, const void *b) {
    const want_t *x = a, *y = b;
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    int d = memcmp(x->key, y->key, n);
    if (d) return d;
    if (x->klen != y->klen) return x->klen < y->klen ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* First sight of leaf `id` in the bitmap `seen` of page_count bits. */
static int first_sight(uint8_t *seen, uint64_t pages, uint64_t id) {
    if (id >= pages || seen[id >> 3] & (1u << (id & 7))) return 0;
    seen[id >> 3] |= (uint8_t)(1u << (id & 7));
    return 1;
}

/* REQUIRES: the write lock, inside the batch before op_rollback, its packed
 * entries b[0, len) checked by batch_check; `from` the offset of the write
 * that failed.  The lower bound of the comment above.  The leaves alone
 * (one pass in batch order) often show it never fits, or the bytes at most
 * that it might not; only in between are the bytes added up, each key once
 * (sorted), so a rollback costs little more than its batch took. */
uint64_t batch_need(ps_core *c, const uint8_t *b, size_t len, size_t from) {
    uint64_t held = c->nundo, pages = c->meta.page_count;
    /* failed inside a split: the keys of its unlinked right half would be
     * found nowhere and counted as new cells again; H + 1 is all it proved */
    if (c->split_open) return held + 1;
    size_t n = 0, map = pages / 8 + 1;
    for (size_t off = from; off < len && b[off] == 1; off += 9 + (size_t)rd32(b + off + 1) + rd32(b + off + 5))
        n++;
    want_t *w = n ? malloc(n * sizeof *w) : NULL;
    uint8_t *seen = n ? calloc(2 * map, 1) : NULL;   /* leaves: not yet changed | resident */
    if (!w || !seen) {
        free(w);
        free(seen);
        return held + 1;
    }
    uint64_t unchanged = 0;
    int64_t cap = (int64_t)(c->usable - LEAF_SLOTS), resident = 0, most = 0;
    size_t i = 0;
    for (size_t off = from; off < len && b[off] == 1; i++) {
        uint32_t kl = rd32(b + off + 1), vl = rd32(b + off + 5);
        const bt_target *t = &w[i].t;
        w[i].key = b + off + 9;
        w[i].klen = kl;
        w[i].off = off;
        w[i].known = bt_put_target(c, w[i].key, kl, vl, &w[i].t);
        if (w[i].known && !t->owned && first_sight(seen, pages, t->leaf) &&
            held + ++unchanged > c->nslots) {  /* proven already: the rest cannot lower it */
            free(w);
            free(seen);
            return held + unchanged;
        }
        if (w[i].known && t->resident && first_sight(seen + map, pages, t->leaf)) {
            resident++;
            most += t->used;
        }
        if (t->grow > 0) most += t->grow;   /* the bytes, at most (a key put twice: twice) */
        off += 9 + (size_t)kl + vl;
    }
    int64_t most_fresh = (most + cap - 1) / cap - resident;
    if (held + unchanged > c->nslots ||        /* never fits already */
        held + unchanged + (uint64_t)(most_fresh > 0 ? most_fresh : 0) <= c->nslots) {
        free(w);                                /* or the bytes cannot show it: not worth a sort */
        free(seen);
        return held + (unchanged ? unchanged : 1);
    }
    qsort(w, n, sizeof *w, by_key_then_order);
    memset(seen, 0, map);
    int64_t bytes = 0, reuse = 0;
    resident = 0;
    size_t ovf_cap = c->usable - O_DATA;
    for (i = 0; i < n; i++) {
        if (i + 1 < n && w[i].klen == w[i + 1].klen && !memcmp(w[i].key, w[i + 1].key, w[i].klen))
            continue;                           /* a later put of the same key decides */
        const bt_target *t = &w[i].t;
        if (t->old_vlen) reuse += (int64_t)((t->old_vlen + ovf_cap - 1) / ovf_cap);
        if (!w[i].known) {
            bytes += t->grow;                   /* <= 0: wherever it lands */
            continue;
        }
        if (first_sight(seen, pages, t->leaf)) {
            resident += t->resident;
            bytes += t->used;
        }
        bytes += t->grow;
    }
    free(w);
    free(seen);
    int64_t leaves = bytes > 0 ? (bytes + cap - 1) / cap : 0;
    int64_t fresh = leaves > resident ? leaves - resident : 0;
    int64_t ids = (int64_t)((c->usable - F_IDS) / 8);
    reuse += (int64_t)c->op_frees + 1 + fresh / ids + (int64_t)c->meta.height + 1;
    fresh = fresh > reuse ? fresh - reuse : 0;
    uint64_t more = unchanged + (uint64_t)fresh;
    return held + (more ? more : 1);
}
