/* The B+tree: variable-length byte keys in memcmp order (shorter first on a
 * common prefix), slotted leaf and inner pages (layout in ps_api.h), values
 * above the inline limit in overflow chains.
 *
 * Inner node with n keys has n+1 children: child 0 holds keys < key 0,
 * the child of slot i holds keys >= key i (and < key i+1).  A leaf split
 * pushes up the shortest prefix of the new right leaf's first key that is
 * above the left leaf's last key; an inner split pushes its middle key up; a
 * root split grows the tree.  Deletes remove emptied pages from their parent
 * and free them; an inner node may be left with one child and no keys (a
 * pass-through), except the root, which is collapsed.  There are no sibling
 * links: scans walk a stack of (page, child index) frames within one call.
 *
 * Every cell is at most max_cell = (usable - 48) / 3 - 6 bytes, so any three
 * fit in a page and every split finds a point where both halves fit. */
#include "ps_internal.h"

#define MAXH 48

typedef struct path {
    uint32_t slot[MAXH];
    int ci[MAXH];
    uint64_t miss;      /* after PS_RETRY: the page not in memory, at level miss_lvl */
    int miss_lvl;
} path_t;

static inline int keycmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl) {
    size_t n = al < bl ? al : bl;
    int r = n ? memcmp(a, b, n) : 0;
    if (r) return r;
    return (al > bl) - (al < bl);
}

/* Slots: a leaf slot is (u16 cell offset, u32 key head), 6 bytes; an inner
 * slot is (u32 key head, u16 key offset, u16 key length, u64 child), 16
 * bytes and 16-aligned, so a descent reads the head it compares and the
 * child it follows from one cache line and never touches the key bytes
 * unless two heads tie.  Child ci of an inner node is the u64 at
 * INNER_CHILD0 + 16 * ci (child 0, then the child of each slot). */
static inline uint16_t nkeys(const uint8_t *p) { return rd16(p + N_NKEYS); }
static inline uint32_t sbase(int inner) { return inner ? INNER_SLOTS : LEAF_SLOTS; }
static inline uint32_t sstride(int inner) { return inner ? INNER_SLOT_SZ : SLOT_SZ; }
static inline const uint8_t *slot_at(const uint8_t *p, int inner, int i) {
    return p + sbase(inner) + sstride(inner) * (size_t)i;
}
static inline uint16_t cell_off(const uint8_t *p, int inner, int i) {
    return rd16(slot_at(p, inner, i) + (inner ? IS_OFF : 0));
}
static inline uint32_t slot_head(const uint8_t *p, int inner, int i) {
    return rd32(slot_at(p, inner, i) + (inner ? IS_HEAD : 2));
}
/* the first 4 key bytes as a big-endian number, zero-padded: head(a) < head(b)
 * implies a < b, so searches compare heads in the slot array and touch a
 * key only on a tie */
static inline uint32_t key_head(const uint8_t *k, size_t n) {
    if (n >= 4) return __builtin_bswap32(rd32(k));
    uint32_t h = 0;
    for (size_t i = 0; i < 4; i++) h = (h << 8) | (i < n ? k[i] : 0);
    return h;
}
/* Entries in flight (a new leaf cell; a separator moving up; the entries of
 * a node being split): a leaf entry is its cell, an inner entry is
 * (u16 klen, u64 child, key).  An entry of size sz takes sz + SLOT_SZ bytes
 * of a page either way (inner: 16-byte slot + key = 10 + klen + 6). */
static inline uint32_t cell_klen(const uint8_t *cell) { return rd16(cell) & 0x7FFFu; }
static inline const uint8_t *cell_key(const uint8_t *cell, int inner) {
    return cell + (inner ? INNER_CELL_HDR : LEAF_CELL_HDR);
}
static inline uint32_t cell_size(const uint8_t *cell, int inner) {
    uint32_t raw = rd16(cell), kl = raw & 0x7FFFu;
    if (inner) return INNER_CELL_HDR + kl;
    return LEAF_CELL_HDR + kl + ((raw & KLEN_OVF) ? 8 : rd32(cell + 2));
}
/* key i of a node and its length */
static inline const uint8_t *node_key(const uint8_t *p, int inner, int i, uint32_t *kl) {
    const uint8_t *s = slot_at(p, inner, i);
    if (inner) {
        *kl = rd16(s + IS_KLEN);
        return p + rd16(s + IS_OFF);
    }
    const uint8_t *cell = p + rd16(s);
    *kl = cell_klen(cell);
    return cell + LEAF_CELL_HDR;
}
/* bytes entry i holds in the cell area (leaf: its cell; inner: its key) */
static inline uint32_t node_cell_size(const uint8_t *p, int inner, int i) {
    if (inner) return rd16(slot_at(p, 1, i) + IS_KLEN);
    return cell_size(p + cell_off(p, 0, i), 0);
}
static inline uint64_t child_at(const uint8_t *p, int ci) {
    return rd64(p + INNER_CHILD0 + INNER_SLOT_SZ * (size_t)ci);
}

/* First index whose key is >= key; *found if equal.  A branch-free lower
 * bound over the slot heads (a conditional move per step, no mispredicted
 * branches), then full keys only among slots whose head ties. */
static inline __attribute__((always_inline)) int node_lb(const uint8_t *p, int inner,
                                                         const uint8_t *key, size_t klen,
                                                         int *found) {
    const int n = nkeys(p);
    const size_t st = sstride(inner);
    const uint8_t *hb = p + sbase(inner) + (inner ? IS_HEAD : 2);
    const uint32_t kh = key_head(key, klen);
    if (n >= 24) {   /* the first probes of the search, fetched together */
        __builtin_prefetch(hb + st * (size_t)(n / 4));
        __builtin_prefetch(hb + st * (size_t)(n / 2));
        __builtin_prefetch(hb + st * (size_t)(3 * n / 4));
        if (n >= 64) {
            __builtin_prefetch(hb + st * (size_t)(n / 8));
            __builtin_prefetch(hb + st * (size_t)(3 * n / 8));
            __builtin_prefetch(hb + st * (size_t)(5 * n / 8));
            __builtin_prefetch(hb + st * (size_t)(7 * n / 8));
        }
    }
    int lo = 0, len = n;
    while (len > 1) {   /* the answer lies in [lo, lo + len] */
        int half = len >> 1;
        lo = rd32(hb + st * (size_t)(lo + half - 1)) < kh ? lo + half : lo;
        len -= half;
    }
    if (len == 1 && rd32(hb + st * (size_t)lo) < kh) lo++;
    *found = 0;
    if (lo == n || rd32(hb + st * (size_t)lo) != kh) return lo;
    uint32_t kl;
    const uint8_t *k;
    int end = lo + 1;
    if (end == n || rd32(hb + st * (size_t)end) != kh) {   /* one candidate (the usual case) */
        k = node_key(p, inner, lo, &kl);
        if (!inner) {   /* a leaf hit goes on to read the value: load its lines too */
            __builtin_prefetch(k + 64);
            __builtin_prefetch(k + 120);
        }
        int r = keycmp(k, kl, key, klen);
        if (r < 0) return lo + 1;
        *found = r == 0;
        return lo;
    }
    /* several keys share the head (a common prefix): bound the run, then search it */
    int a = end + 1, b = n;
    while (a < b) {
        int m = (a + b) >> 1;
        if (rd32(hb + st * (size_t)m) == kh) a = m + 1;
        else b = m;
    }
    end = a;
    a = lo;
    b = end;
    while (a < b) {
        int m = (a + b) >> 1;
        k = node_key(p, inner, m, &kl);
        if (keycmp(k, kl, key, klen) < 0) a = m + 1;
        else b = m;
    }
    if (a < end) {
        k = node_key(p, inner, a, &kl);
        *found = keycmp(k, kl, key, klen) == 0;
    }
    return a;
}

static int corrupt_page(ps_core *c, uint64_t id, const char *what) {
    c->bad_page = id;
    return set_err(c, PS_E_CORRUPT, "page %llu: %s", (unsigned long long)id, what);
}

/* Node (re)initialisation zeroes everything past the common header, so the
 * gap is all zeros (docs/page-format.md, "The gap"). */
void leaf_init(ps_core *c, uint8_t *p) {
    memset(p + H_SIZE, 0, c->usable - H_SIZE);
    wr16(p + H_TYPE, PS_PAGE_LEAF);
    wr16(p + H_FREELO, LEAF_SLOTS);
    wr16(p + H_FREEHI, (uint16_t)c->usable);
}

static void node_reset(ps_core *c, uint8_t *p, int inner, uint64_t child0) {
    memset(p + H_SIZE, 0, c->usable - H_SIZE);
    if (inner) wr64(p + INNER_CHILD0, child0);
    wr16(p + H_FREELO, (uint16_t)sbase(inner));
    wr16(p + H_FREEHI, (uint16_t)c->usable);
}

/* place entry e of size sz at slot idx; the gap must hold sz + SLOT_SZ bytes */
static void node_put(uint8_t *p, int inner, int idx, const uint8_t *e, uint32_t sz) {
    uint32_t n = nkeys(p), lo = rd16(p + H_FREELO), st = sstride(inner);
    uint32_t kl = cell_klen(e), csz = inner ? kl : sz;
    uint32_t hi = rd16(p + H_FREEHI) - csz;
    const uint8_t *key = cell_key(e, inner);
    uint8_t *s = p + sbase(inner) + st * (size_t)idx;
    memmove(s + st, s, st * (size_t)(n - idx));
    if (inner) {
        memcpy(p + hi, key, kl);
        wr32(s + IS_HEAD, key_head(key, kl));
        wr16(s + IS_OFF, (uint16_t)hi);
        wr16(s + IS_KLEN, (uint16_t)kl);
        wr64(s + IS_CHILD, rd64(e + 2));
    } else {
        memcpy(p + hi, e, sz);
        wr16(s, (uint16_t)hi);
        wr32(s + 2, key_head(key, kl));
    }
    wr16(p + N_NKEYS, (uint16_t)(n + 1));
    wr16(p + H_FREELO, (uint16_t)(lo + st));
    wr16(p + H_FREEHI, (uint16_t)hi);
}

/* Remove entry idx.  Its cell bytes are zeroed: they join the gap when the
 * cell sat at its edge, else they count as garbage until a compaction. */
static void node_remove(uint8_t *p, int inner, int idx) {
    uint32_t n = nkeys(p), st = sstride(inner);
    uint32_t off = cell_off(p, inner, idx), sz = node_cell_size(p, inner, idx);
    uint8_t *s = p + sbase(inner) + st * (size_t)idx;
    memmove(s, s + st, st * (size_t)(n - idx - 1));
    uint32_t lo = rd16(p + H_FREELO) - st;
    memset(p + lo, 0, st);      /* the vacated last slot joins the gap */
    memset(p + off, 0, sz);
    wr16(p + N_NKEYS, (uint16_t)(n - 1));
    wr16(p + H_FREELO, (uint16_t)lo);
    if (off == rd16(p + H_FREEHI)) wr16(p + H_FREEHI, (uint16_t)(off + sz));
    else wr16(p + N_GARBAGE, (uint16_t)(rd16(p + N_GARBAGE) + sz));
}

/* Pack the cells against the end of the page; the space given back joins
 * the gap and is zeroed. */
static void node_compact(ps_core *c, uint8_t *p, int inner) {
    uint8_t *tmp = c->scratch;
    memcpy(tmp, p, c->usable);
    uint32_t n = nkeys(p), hi = c->usable, st = sstride(inner);
    uint8_t *s = p + sbase(inner) + (inner ? IS_OFF : 0);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t off = cell_off(tmp, inner, (int)i), sz = node_cell_size(tmp, inner, (int)i);
        hi -= sz;
        memcpy(p + hi, tmp + off, sz);
        wr16(s + st * (size_t)i, (uint16_t)hi);
    }
    uint32_t lo = rd16(p + H_FREELO);
    memset(p + lo, 0, hi - lo);
    wr16(p + H_FREEHI, (uint16_t)hi);
    wr16(p + N_GARBAGE, 0);
}

/* Start loading the lines of a node that its search will read first: the
 * header line and, for a leaf (the level that misses in every cache), the
 * next three lines of slots, all at once instead of one miss after another. */
static inline void node_prefetch(const uint8_t *p, int leaf) {
    __builtin_prefetch(p);
    if (leaf) {
        __builtin_prefetch(p + 64);
        __builtin_prefetch(p + 128);
        __builtin_prefetch(p + 192);
    }
}

/* Descend to the leaf for key, recording the path.  pin: pin every page
 * (write lock); may_load: page misses load (else PS_RETRY). */
static int descend(ps_core *c, const uint8_t *key, size_t klen, path_t *pa, int may_load,
                   int pin) {
    uint64_t id = c->meta.root;
    int h = (int)c->meta.height;
    if (h < 1 || h > MAXH) return corrupt_page(c, 0, "bad tree height");
    for (int lvl = 0;; lvl++) {
        int64_t s = page_fetch(c, id, may_load);
        if (s < 0) {
            pa->miss = id;
            pa->miss_lvl = lvl;
            return (int)s;
        }
        const uint8_t *p = slot_page(c, (uint32_t)s);
        node_prefetch(p, lvl == h - 1);
        if (pin) pin_op(c, (uint32_t)s);
        pa->slot[lvl] = (uint32_t)s;
        uint16_t type = rd16(p + H_TYPE);
        if (lvl == h - 1) {
            if (type != PS_PAGE_LEAF) return corrupt_page(c, id, "expected a leaf page");
            return 0;
        }
        if (type != PS_PAGE_INNER) return corrupt_page(c, id, "expected an inner page");
        int found, i = node_lb(p, 1, key, klen, &found);
        int ci = found ? i + 1 : i;
        pa->ci[lvl] = ci;
        id = child_at(p, ci);
    }
}

/* Where a put of (key, vlen bytes) would land now, found through resident
 * pages only (no load, no pin, nothing changed; batchneed.c).  Returns 1 with
 * t->leaf, the leaf whose key range holds key, and t->resident; for a resident
 * leaf also t->owned (the running operation changed or created it), t->used
 * (bytes its cells and slots take), t->grow (bytes the put adds to it: its
 * cell and slot, less the cell it replaces) and t->old_vlen (the length of
 * the value it replaces when that sits in overflow pages, which it frees).  Returns 0 when a page above the
 * leaf is not in memory (or fails its checks), with t->grow the least the put
 * can add wherever it lands. */
int bt_put_target(ps_core *c, const uint8_t *key, size_t klen, size_t vlen, bt_target *t) {
    path_t pa;
    int h = (int)c->meta.height, rc = descend(c, key, klen, &pa, 0, 0);
    int ovf = LEAF_CELL_HDR + klen + vlen > c->leaf_inline_max;
    int64_t sz = LEAF_CELL_HDR + (int64_t)klen + (ovf ? 8 : (int64_t)vlen) + SLOT_SZ;
    memset(t, 0, sizeof *t);
    if (rc == PS_RETRY && pa.miss_lvl == h - 1) {     /* not resident: not changed either */
        t->leaf = pa.miss;
        return 1;
    }
    if (rc) {
        int64_t most = (int64_t)c->max_cell + SLOT_SZ;     /* replacing the largest cell */
        t->grow = sz < most ? sz - most : 0;
        return 0;
    }
    const slot_t *sl = &c->slots[pa.slot[h - 1]];
    const uint8_t *p = slot_page(c, pa.slot[h - 1]);
    t->leaf = sl->page_id;
    t->resident = 1;
    t->owned = sl->undo_epoch == c->op_epoch;
    t->used = (int64_t)(c->usable - LEAF_SLOTS) - (rd16(p + H_FREEHI) - rd16(p + H_FREELO)) -
              rd16(p + N_GARBAGE);
    int found, idx = node_lb(p, 0, key, klen, &found);
    t->grow = sz;
    if (found) {
        const uint8_t *cell = p + cell_off(p, 0, idx);
        t->grow -= (int64_t)cell_size(cell, 0) + SLOT_SZ;
        if (rd16(cell) & KLEN_OVF) t->old_vlen = rd32(cell + 2);
    }
    return 1;
}

static int node_insert(ps_core *c, path_t *pa, int lvl, int idx, const uint8_t *cell,
                       uint32_t sz);

static int node_split(ps_core *c, path_t *pa, int lvl, int idx, const uint8_t *cell,
                      uint32_t sz, int inner) {
    uint32_t s = pa->slot[lvl];
    uint8_t *p = slot_page(c, s);
    uint8_t *old = c->scratch;
    memcpy(old, p, c->usable);
    int n = nkeys(old), total = n + 1;
    const uint8_t **cp = c->cellp;
    uint32_t *cs = c->cells;
    uint8_t *w = c->splitbuf;   /* inner entries of the old node, in flight form */
    uint64_t T = 0;
    for (int i = 0, j = 0; i < total; i++) {
        if (i == idx) {
            cp[i] = cell;
            cs[i] = sz;
        } else if (inner) {
            uint32_t kl;
            const uint8_t *k = node_key(old, 1, j, &kl);
            wr16(w, (uint16_t)kl);
            wr64(w + 2, child_at(old, j + 1));
            memcpy(w + INNER_CELL_HDR, k, kl);
            cp[i] = w;
            cs[i] = INNER_CELL_HDR + kl;
            w += cs[i];
            j++;
        } else {
            cp[i] = old + cell_off(old, 0, j++);
            cs[i] = cell_size(cp[i], 0);
        }
        T += cs[i] + SLOT_SZ;
    }
    uint64_t cap = c->usable - sbase(inner), best = UINT64_MAX, pre = 0;
    int k = -1;
    /* k = cells kept on the left; for inner nodes cell k moves up */
    for (int i = 1; i < total - (inner ? 1 : 0); i++) {
        pre += cs[i - 1] + SLOT_SZ;
        uint64_t L = pre, R = T - pre - (inner ? cs[i] + SLOT_SZ : 0);
        if (L > cap || R > cap) continue;
        uint64_t m = L > R ? L : R;
        /* appending past the last key: keep the left page full (sorted loads) */
        if (!inner && idx == n && i == total - 1) m = 0;
        if (m < best) { best = m; k = i; }
    }
    if (k < 0) return corrupt_page(c, rd64(p + H_PAGEID), "no split point fits");
    uint64_t rid;
    int64_t rs = page_new(c, inner ? PS_PAGE_INNER : PS_PAGE_LEAF, &rid);
    if (rs < 0) return (int)rs;
    uint8_t *r = slot_page(c, (uint32_t)rs);
    if (!inner) leaf_init(c, r);
    /* from here until the separator is in place the right half is reachable
     * from no page: a failure in between leaves a tree batch_need must not walk */
    c->split_open = 1;
    node_reset(c, p, inner, inner ? rd64(old + INNER_CHILD0) : 0);
    for (int i = 0; i < k; i++) node_put(p, inner, i, cp[i], cs[i]);
    int start = inner ? k + 1 : k;
    node_reset(c, r, inner, inner ? rd64(cp[k] + 2) : 0);
    for (int i = start; i < total; i++) node_put(r, inner, i - start, cp[i], cs[i]);
    /* The separator goes up as an inner entry (klen, child = rid, key).  For
     * a leaf split it is the shortest prefix of the right page's first key
     * that is still above the left page's last key (suffix truncation):
     * every key on the left is < it <= every key on the right, and short
     * separators make inner nodes wider and the upper levels smaller. */
    uint8_t *pc = c->cellbuf[(lvl + 1) & 1];
    uint32_t sl = cell_klen(cp[k]);
    if (!inner) {
        const uint8_t *a = cell_key(cp[k - 1], 0), *b = cell_key(cp[k], 0);
        uint32_t al = cell_klen(cp[k - 1]), m = al < sl ? al : sl, l = 0;
        while (l < m && a[l] == b[l]) l++;
        if (l + 1 < sl) sl = l + 1;
    }
    wr16(pc, (uint16_t)sl);
    wr64(pc + 2, rid);
    memcpy(pc + INNER_CELL_HDR, cell_key(cp[k], inner), sl);
    uint32_t psz = INNER_CELL_HDR + sl;
    if (lvl == 0) {
        uint64_t nid;
        int64_t ns = page_new(c, PS_PAGE_INNER, &nid);
        if (ns < 0) return (int)ns;
        uint8_t *np = slot_page(c, (uint32_t)ns);
        node_reset(c, np, 1, rd64(p + H_PAGEID));
        node_put(np, 1, 0, pc, psz);
        c->meta.root = nid;
        c->meta.height++;
        return 0;
    }
    return node_insert(c, pa, lvl - 1, pa->ci[lvl - 1], pc, psz);
}

/* Insert cell at slot idx of the node at path level lvl, splitting upwards. */
static int node_insert(ps_core *c, path_t *pa, int lvl, int idx, const uint8_t *cell,
                       uint32_t sz) {
    uint32_t s = pa->slot[lvl];
    uint8_t *p = slot_page(c, s);
    int inner = rd16(p + H_TYPE) == PS_PAGE_INNER;
    int rc = page_w(c, s);
    if (rc) return rc;
    uint32_t gap = (uint32_t)rd16(p + H_FREEHI) - rd16(p + H_FREELO);
    if (gap >= sz + SLOT_SZ) {
        node_put(p, inner, idx, cell, sz);
        return 0;
    }
    if (gap + rd16(p + N_GARBAGE) >= sz + SLOT_SZ) {
        node_compact(c, p, inner);
        node_put(p, inner, idx, cell, sz);
        return 0;
    }
    if (lvl + 2 >= MAXH) return corrupt_page(c, rd64(p + H_PAGEID), "tree too high");
    return node_split(c, pa, lvl, idx, cell, sz, inner);
}

/* Write value into a new overflow chain, last page first; returns its head. */
static int ovf_write(ps_core *c, const uint8_t *val, size_t vlen, uint64_t *first) {
    size_t cap = c->usable - O_DATA, np = (vlen + cap - 1) / cap;
    uint64_t next = 0;
    for (size_t i = np; i-- > 0;) {
        size_t off = i * cap, len = vlen - off < cap ? vlen - off : cap;
        uint64_t id;
        int64_t s = page_new(c, PS_PAGE_OVERFLOW, &id);
        if (s < 0) return (int)s;
        uint8_t *p = slot_page(c, (uint32_t)s);
        wr64(p + O_NEXT, next);
        wr32(p + O_LEN, (uint32_t)len);
        memcpy(p + O_DATA, val + off, len);
        wr16(p + H_FREELO, (uint16_t)(O_DATA + len));
        wr16(p + H_FREEHI, (uint16_t)c->usable);
        next = id;
    }
    *first = next;
    return 0;
}

static int ovf_free(ps_core *c, uint64_t id) {
    while (id) {
        int64_t s = page_fetch(c, id, 1);
        if (s < 0) return (int)s;
        const uint8_t *p = slot_page(c, (uint32_t)s);
        if (rd16(p + H_TYPE) != PS_PAGE_OVERFLOW) return corrupt_page(c, id, "expected an overflow page");
        uint64_t next = rd64(p + O_NEXT);
        int rc = page_free(c, id);
        if (rc) return rc;
        id = next;
    }
    return 0;
}

/* Copy an overflow value of vlen bytes into out. */
static int ovf_read(ps_core *c, uint64_t id, size_t vlen, uint8_t *out, int may_load) {
    size_t got = 0, cap = c->usable - O_DATA;
    while (got < vlen) {
        if (!id) return corrupt_page(c, 0, "overflow chain too short");
        int64_t s = page_fetch(c, id, may_load);
        if (s < 0) return (int)s;
        const uint8_t *p = slot_page(c, (uint32_t)s);
        uint32_t len = rd32(p + O_LEN);
        if (rd16(p + H_TYPE) != PS_PAGE_OVERFLOW || len > cap || len > vlen - got)
            return corrupt_page(c, id, "bad overflow page");
        memcpy(out + got, p + O_DATA, len);
        got += len;
        id = rd64(p + O_NEXT);
    }
    return 0;
}

int bt_put(ps_core *c, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen,
           int allow_fast, int *fast_used) {
    path_t pa;
    int rc = descend(c, key, klen, &pa, 1, 1);
    if (rc) return rc;
    int lvl = (int)c->meta.height - 1;
    uint32_t s = pa.slot[lvl];
    uint8_t *p = slot_page(c, s);
    int found, idx = node_lb(p, 0, key, klen, &found);
    int ovf = LEAF_CELL_HDR + klen + vlen > c->leaf_inline_max;
    uint32_t sz = LEAF_CELL_HDR + (uint32_t)klen + (ovf ? 8 : (uint32_t)vlen);
    uint32_t old_off = 0, old_sz = 0;
    int old_ovf = 0;
    uint64_t old_first = 0;
    if (found) {
        old_off = cell_off(p, 0, idx);
        old_ovf = (rd16(p + old_off) & KLEN_OVF) != 0;
        old_sz = cell_size(p + old_off, 0);
        if (old_ovf) old_first = rd64(p + old_off + LEAF_CELL_HDR + klen);
    }
    if (allow_fast && !c->physical && !ovf && !old_ovf) {
        const slot_t *sl = &c->slots[s];
        uint32_t gap = (uint32_t)rd16(p + H_FREEHI) - rd16(p + H_FREELO);
        uint32_t garb = rd16(p + N_GARBAGE);
        int room = found ? (old_sz == sz || gap + garb + old_sz >= sz) : (gap + garb >= sz + SLOT_SZ);
        if (room && (!sl->inckpt || sl->cow >= 0 || cow_available(c)) &&
            wal_fits(c, PS_WAL_REC_HDR + 16 + klen + vlen)) {
            c->guarded = 0;   /* nothing below can fail: no undo needed */
            if (fast_used) *fast_used = 1;
        }
    }
    if (found && !ovf && !old_ovf && old_sz == sz) {
        rc = page_w(c, s);
        if (rc) return rc;
        memcpy(p + old_off + LEAF_CELL_HDR + klen, val, vlen);
        return 0;
    }
    uint64_t first = 0;
    if (ovf) {
        rc = ovf_write(c, val, vlen, &first);
        if (rc) return rc;
    }
    uint8_t *cell = c->scratch + c->page_size;
    wr16(cell, (uint16_t)(klen | (ovf ? KLEN_OVF : 0)));
    wr32(cell + 2, (uint32_t)vlen);
    memcpy(cell + LEAF_CELL_HDR, key, klen);
    if (ovf) wr64(cell + LEAF_CELL_HDR + klen, first);
    else memcpy(cell + LEAF_CELL_HDR + klen, val, vlen);
    rc = page_w(c, s);
    if (rc) return rc;
    if (found) node_remove(p, 0, idx);
    else c->meta.key_count++;
    c->split_open = 0;
    rc = node_insert(c, &pa, lvl, idx, cell, sz);
    if (rc == 0) c->split_open = 0;
    if (rc) return rc;
    if (old_ovf) rc = ovf_free(c, old_first);
    return rc;
}

static int collapse_root(ps_core *c) {
    while (c->meta.height > 1) {
        int64_t s = page_fetch(c, c->meta.root, 1);
        if (s < 0) return (int)s;
        const uint8_t *p = slot_page(c, (uint32_t)s);
        if (rd16(p + H_TYPE) != PS_PAGE_INNER || nkeys(p) != 0) break;
        uint64_t old = c->meta.root;
        c->meta.root = rd64(p + INNER_CHILD0);
        c->meta.height--;
        int rc = page_free(c, old);
        if (rc) return rc;
    }
    return 0;
}

/* The node at path level L loses its child pa->ci[L]. */
static int remove_child(ps_core *c, path_t *pa, int L) {
    uint32_t s = pa->slot[L];
    uint8_t *p = slot_page(c, s);
    int n = nkeys(p), ci = pa->ci[L];
    int rc = page_w(c, s);
    if (rc) return rc;
    if (n == 0) {
        if (L == 0) {   /* the root lost its only child: the tree is empty */
            leaf_init(c, p);
            c->meta.height = 1;
            return 0;
        }
        rc = remove_child(c, pa, L - 1);
        if (rc) return rc;
        return page_free(c, rd64(p + H_PAGEID));
    }
    if (ci == 0) {
        wr64(p + INNER_CHILD0, child_at(p, 1));
        node_remove(p, 1, 0);
    } else {
        node_remove(p, 1, ci - 1);
    }
    if (L == 0 && n == 1) return collapse_root(c);
    return 0;
}

int bt_delete(ps_core *c, const uint8_t *key, size_t klen, int allow_fast, int *fast_used) {
    path_t pa;
    int rc = descend(c, key, klen, &pa, 1, 1);
    if (rc) return rc;
    int lvl = (int)c->meta.height - 1;
    uint32_t s = pa.slot[lvl];
    uint8_t *p = slot_page(c, s);
    int found, idx = node_lb(p, 0, key, klen, &found);
    if (!found) return PS_E_NOT_FOUND;
    uint32_t off = cell_off(p, 0, idx);
    int old_ovf = (rd16(p + off) & KLEN_OVF) != 0;
    uint64_t first = old_ovf ? rd64(p + off + LEAF_CELL_HDR + klen) : 0;
    int n = nkeys(p);
    if (allow_fast && !c->physical && !old_ovf && (n > 1 || lvl == 0)) {
        const slot_t *sl = &c->slots[s];
        if ((!sl->inckpt || sl->cow >= 0 || cow_available(c)) &&
            wal_fits(c, PS_WAL_REC_HDR + 12 + klen)) {
            c->guarded = 0;
            if (fast_used) *fast_used = 1;
        }
    }
    rc = page_w(c, s);
    if (rc) return rc;
    node_remove(p, 0, idx);
    c->meta.key_count--;
    if (old_ovf) {
        rc = ovf_free(c, first);
        if (rc) return rc;
    }
    if (n == 1 && lvl > 0) {
        rc = remove_child(c, &pa, lvl - 1);
        if (rc) return rc;
        rc = page_free(c, rd64(p + H_PAGEID));
    }
    return rc;
}

/* The value of key in leaf p (bt_get). */
static inline int64_t leaf_get(ps_core *c, const uint8_t *p, const uint8_t *key, size_t klen,
                               uint8_t *out, size_t cap, int may_load) {
    int found, idx = node_lb(p, 0, key, klen, &found);
    if (!found) return PS_E_NOT_FOUND;
    const uint8_t *cell = p + cell_off(p, 0, idx);
    uint32_t vlen = rd32(cell + 2);
    if (vlen > cap) return vlen;
    if (rd16(cell) & KLEN_OVF) {
        int rc = ovf_read(c, rd64(cell + LEAF_CELL_HDR + klen), vlen, out, may_load);
        if (rc) return rc;
    } else {
        memcpy(out, cell + LEAF_CELL_HDR + klen, vlen);
    }
    return vlen;
}

/* ---- leaves read in place ---------------------------------------------
 *
 * A get that may not load (read lock) and misses only its leaf reads that
 * leaf from the map of the page file into a buffer of its own, checks it
 * and answers from it, when page memory has no empty slot: loading it would
 * evict a page, copy 4 KiB into a cold slot, and take the write lock and a
 * second descent to do so -- most of a miss's cost when the data is many
 * times page memory and nearly every get misses (docs/page-memory.md).
 * A leaf read in place twice within a short while is loaded the second
 * time instead (the ordinary path), so leaves that gets keep coming back to
 * still settle into page memory.  The store's `seen` table remembers the
 * leaves read in place last, two per set (the newer first), by a 32-bit tag
 * of the page id; readers update it under the read lock without a lock of
 * its own, and a lost or mistaken entry only changes which path one get
 * takes. */

/* 1: read leaf id in place; 0: load it (a slot is free, or it was read in
 * place a moment ago). */
static int read_in_place(const ps_core *c, uint64_t id) {
    if (c->nfree || c->fresh < c->nslots) return 0;    /* no eviction to save */
    uint64_t h = (id + 1) * 0x9E3779B97F4A7C15ull;
    uint32_t *set = c->seen[h >> (64 - PS_SEEN_SET_BITS)], tag = (uint32_t)h | 1u;
    uint32_t newer = __atomic_load_n(&set[0], __ATOMIC_RELAXED);
    if (newer == tag || __atomic_load_n(&set[1], __ATOMIC_RELAXED) == tag) return 0;
    __atomic_store_n(&set[1], newer, __ATOMIC_RELAXED);
    __atomic_store_n(&set[0], tag, __ATOMIC_RELAXED);
    return 1;
}

/* bt_get's answer from leaf id read in place, or PS_RETRY (load it). */
static __attribute__((noinline)) int64_t get_in_place(ps_core *c, uint64_t id, const uint8_t *key,
                                                      size_t klen, uint8_t *out, size_t cap) {
    uint8_t page[PS_MAX_PAGE] __attribute__((aligned(64)));
    if (c->page_keys || !c->page_map || !read_in_place(c, id) || !page_read_mapped(c, id, page) ||
        rd16(page + H_TYPE) != PS_PAGE_LEAF)     /* the ordinary load names what is wrong */
        return PS_RETRY;
    __atomic_add_fetch(&c->sig.leaves_read_in_place, 1, __ATOMIC_RELAXED);
    return leaf_get(c, page, key, klen, out, cap, 0);
}

int64_t bt_get(ps_core *c, const uint8_t *key, size_t klen, uint8_t *out, size_t cap,
               int may_load) {
    path_t pa;
    int rc = descend(c, key, klen, &pa, may_load, may_load);
    if (__builtin_expect(rc == 0, 1))
        return leaf_get(c, slot_page(c, pa.slot[c->meta.height - 1]), key, klen, out, cap,
                        may_load);
    if (rc == PS_RETRY && !may_load && pa.miss_lvl == (int)c->meta.height - 1)
        return get_in_place(c, pa.miss, key, klen, out, cap);
    return rc;
}

/* ---- scans: results as one pickle stream (protocol 4 opcodes) ---------- */

typedef struct frame { uint32_t slot; int ci; int pinned; } frame_t;

static inline uint8_t *emit_bytes(uint8_t *o, size_t n) {
    if (n < 256) {
        *o++ = 'C';          /* SHORT_BINBYTES */
        *o++ = (uint8_t)n;
    } else {
        *o++ = 'B';          /* BINBYTES */
        wr32(o, (uint32_t)n);
        o += 4;
    }
    return o;
}

static void unpin_frames(ps_core *c, frame_t *st, int h) {
    for (int i = 0; i < h; i++)
        if (st[i].pinned) {
            c->slots[st[i].slot].pin--;
            st[i].pinned = 0;
        }
}

static int frame_load(ps_core *c, frame_t *f, uint64_t id, int may_load, uint16_t type) {
    int64_t s = page_fetch(c, id, may_load);
    if (s < 0) return (int)s;
    f->slot = (uint32_t)s;
    f->pinned = may_load;
    if (may_load) c->slots[s].pin++;
    if (rd16(slot_page(c, (uint32_t)s) + H_TYPE) != type)
        return corrupt_page(c, id, type == PS_PAGE_LEAF ? "expected a leaf page"
                                                        : "expected an inner page");
    return 0;
}

/* A scan (write lock) about to load leaf `ci` of inner page p, which is not
 * in memory: load it and the next leaves p points to in the scan's direction
 * at once (page_readahead), so the leaves after it are already there.  Only
 * scans read ahead: a point get wants one leaf.  Bounded by a quarter of page
 * memory, so a small one is not churned by pages read ahead of need. */
static void scan_readahead(ps_core *c, const uint8_t *p, int ci, int reverse) {
    uint32_t want = c->readahead < c->nslots / 4 ? c->readahead : c->nslots / 4;
    if (want < 2 || c->page_fd < 0) return;
    uint64_t ids[2 * PS_SCAN_READAHEAD];
    size_t n = 0;
    for (int i = ci, nk = nkeys(p); n < 2 * want && i >= 0 && i <= nk; i += reverse ? -1 : 1)
        ids[n++] = child_at(p, i);
    size_t now = n < want ? n : want;
    /* the window after this one, only hinted to the OS (page_readahead) */
    page_readahead(c, ids, now, ids + now, n - now);   /* what it could not load, the scan's miss loads or reports */
}

int64_t bt_scan(ps_core *c, const uint8_t *lo, size_t lolen, int has_lo, int lo_incl,
                const uint8_t *hi, size_t hilen, int has_hi, int hi_incl, int reverse,
                size_t max_bytes, uint8_t *out, size_t cap, size_t *out_len, int may_load) {
    int h = (int)c->meta.height;
    if (h < 1 || h > MAXH) return corrupt_page(c, 0, "bad tree height");
    if (cap < 16) return PS_E_ARG;
    frame_t st[MAXH];
    memset(st, 0, sizeof st);
    uint8_t *o = out, *end = out + cap;
    *o++ = 0x80; *o++ = 4;   /* PROTO 4 */
    *o++ = ']';              /* EMPTY_LIST */
    *o++ = '(';              /* MARK */
    int64_t count = 0;
    size_t bytes = 0;
    int rc = 0, found;
    uint64_t id = c->meta.root;
    for (int l = 0; l < h; l++) {
        if (may_load && l > 0 && l == h - 1 && pt_find(c, id) < 0)
            scan_readahead(c, slot_page(c, st[l - 1].slot), st[l - 1].ci, reverse);
        rc = frame_load(c, &st[l], id, may_load, l == h - 1 ? PS_PAGE_LEAF : PS_PAGE_INNER);
        if (rc) goto fail;
        const uint8_t *p = slot_page(c, st[l].slot);
        if (l < h - 1) {
            int ci;
            if (!reverse) {
                ci = 0;
                if (has_lo) { int i = node_lb(p, 1, lo, lolen, &found); ci = found ? i + 1 : i; }
            } else {
                ci = nkeys(p);
                if (has_hi) { int i = node_lb(p, 1, hi, hilen, &found); ci = found ? i + 1 : i; }
            }
            st[l].ci = ci;
            id = child_at(p, ci);
        } else if (!reverse) {
            int i = 0;
            if (has_lo) { i = node_lb(p, 0, lo, lolen, &found); if (found && !lo_incl) i++; }
            st[l].ci = i;
        } else {
            int i = nkeys(p) - 1;
            if (has_hi) { i = node_lb(p, 0, hi, hilen, &found); if (!(found && hi_incl)) i--; }
            st[l].ci = i;
        }
    }
    for (;;) {
        frame_t *lf = &st[h - 1];
        const uint8_t *p = slot_page(c, lf->slot);
        int n = nkeys(p), i = lf->ci;
        while (reverse ? i >= 0 : i < n) {
            const uint8_t *cell = p + cell_off(p, 0, i);
            uint32_t kl = cell_klen(cell), vl = rd32(cell + 2);
            const uint8_t *k = cell + LEAF_CELL_HDR;
            if (!reverse && has_hi) {
                int r = keycmp(k, kl, hi, hilen);
                if (r > 0 || (r == 0 && !hi_incl)) goto done;
            } else if (reverse && has_lo) {
                int r = keycmp(k, kl, lo, lolen);
                if (r < 0 || (r == 0 && !lo_incl)) goto done;
            }
            size_t need = 5 + (size_t)kl + 5 + vl + 1;
            if ((size_t)(end - o) < need + 2) {
                if (count == 0) {
                    *out_len = need + 16;
                    rc = PS_E_NEED_SPACE;
                    goto fail;
                }
                goto done;
            }
            o = emit_bytes(o, kl);
            memcpy(o, k, kl);
            o += kl;
            o = emit_bytes(o, vl);
            if (rd16(cell) & KLEN_OVF) {
                rc = ovf_read(c, rd64(k + kl), vl, o, may_load);
                if (rc) goto fail;
            } else {
                memcpy(o, k + kl, vl);
            }
            o += vl;
            *o++ = 0x86;     /* TUPLE2 */
            count++;
            bytes += kl + vl;
            i += reverse ? -1 : 1;
            if (bytes >= max_bytes) goto done;
        }
        /* next (or previous) leaf */
        int l = h - 2;
        if (lf->pinned) { c->slots[lf->slot].pin--; lf->pinned = 0; }
        while (l >= 0) {
            const uint8_t *ip = slot_page(c, st[l].slot);
            int ci = st[l].ci + (reverse ? -1 : 1);
            if (ci < 0 || ci > nkeys(ip)) {
                if (st[l].pinned) { c->slots[st[l].slot].pin--; st[l].pinned = 0; }
                l--;
                continue;
            }
            st[l].ci = ci;
            break;
        }
        if (l < 0) goto done;
        for (int m = l + 1; m < h; m++) {
            uint64_t cid = child_at(slot_page(c, st[m - 1].slot), st[m - 1].ci);
            if (may_load && m == h - 1 && pt_find(c, cid) < 0)
                scan_readahead(c, slot_page(c, st[m - 1].slot), st[m - 1].ci, reverse);
            rc = frame_load(c, &st[m], cid, may_load, m == h - 1 ? PS_PAGE_LEAF : PS_PAGE_INNER);
            if (rc) goto fail;
            const uint8_t *cp = slot_page(c, st[m].slot);
            int nk = nkeys(cp);
            st[m].ci = m < h - 1 ? (reverse ? nk : 0) : (reverse ? nk - 1 : 0);
        }
    }
done:
    *o++ = 'e';              /* APPENDS */
    *o++ = '.';              /* STOP */
    *out_len = (size_t)(o - out);
    unpin_frames(c, st, h);
    return count;
fail:
    unpin_frames(c, st, h);
    return rc;
}

/* ---- verify -------------------------------------------------------------- */

typedef struct vctx {
    ps_core *c;
    uint8_t *seen;
    ps_verify_info *info;
} vctx;

/* the gap [lo, hi) of a page is all zeros (docs/page-format.md) */
static int gap_zero(const ps_core *c, const uint8_t *p, uint32_t lo, uint32_t hi) {
    return lo >= hi || memcmp(p + lo, c->zero_page, hi - lo) == 0;
}

static int v_mark(vctx *v, uint64_t id, const char *what) {
    ps_core *c = v->c;
    if (id == 0 || id >= c->meta.page_count) {
        c->bad_page = id;
        return set_err(c, PS_E_CORRUPT, "%s link to page %llu outside 1..%llu", what,
                       (unsigned long long)id, (unsigned long long)c->meta.page_count - 1);
    }
    if (v->seen[id >> 3] & (1u << (id & 7))) {
        c->bad_page = id;
        return set_err(c, PS_E_CORRUPT, "page %llu is reachable twice (%s)",
                       (unsigned long long)id, what);
    }
    v->seen[id >> 3] |= (uint8_t)(1u << (id & 7));
    return 0;
}

static int v_ovf(vctx *v, uint64_t id, uint32_t vlen) {
    ps_core *c = v->c;
    uint64_t got = 0;
    while (id) {
        int rc = v_mark(v, id, "overflow");
        if (rc) return rc;
        int64_t s = page_fetch(c, id, 1);
        if (s < 0) return (int)s;
        const uint8_t *p = slot_page(c, (uint32_t)s);
        uint32_t len = rd32(p + O_LEN);
        if (rd16(p + H_TYPE) != PS_PAGE_OVERFLOW || rd64(p + H_PAGEID) != id)
            return corrupt_page(c, id, "bad overflow page type or id");
        if (len == 0 || len > c->usable - O_DATA) return corrupt_page(c, id, "bad overflow length");
        if (rd16(p + H_FREELO) != O_DATA + len || rd16(p + H_FREEHI) != c->usable)
            return corrupt_page(c, id, "overflow free_lo/free_hi wrong");
        if (!gap_zero(c, p, O_DATA + len, c->usable)) return corrupt_page(c, id, "gap not zeroed");
        got += len;
        v->info->overflow_pages++;
        id = rd64(p + O_NEXT);
    }
    if (got != vlen) return corrupt_page(c, 0, "overflow chain length differs from value length");
    return 0;
}

static int v_node(vctx *v, uint64_t id, int lvl, const uint8_t *lo, size_t lolen, int has_lo,
                  const uint8_t *hi, size_t hilen, int has_hi) {
    ps_core *c = v->c;
    int rc = v_mark(v, id, "tree");
    if (rc) return rc;
    int64_t s = page_fetch(c, id, 1);
    if (s < 0) return (int)s;
    c->slots[s].pin++;
    const uint8_t *p = slot_page(c, (uint32_t)s);
    int leaf = lvl == (int)c->meta.height - 1, inner = !leaf;
    uint16_t type = rd16(p + H_TYPE);
    int n = nkeys(p);
    uint32_t base = sbase(inner), flo = rd16(p + H_FREELO), fhi = rd16(p + H_FREEHI);
    uint64_t sum = 0;
    uint8_t *used = c->scratch + 2 * (size_t)c->page_size;
    const uint8_t *prev = NULL;
    uint32_t prevlen = 0;
    if (rd64(p + H_PAGEID) != id) { rc = corrupt_page(c, id, "page-id field differs"); goto out; }
    if (type != (leaf ? PS_PAGE_LEAF : PS_PAGE_INNER)) {
        rc = corrupt_page(c, id, leaf ? "expected a leaf at the leaf level" : "expected an inner page");
        goto out;
    }
    if (flo != base + sstride(inner) * (uint32_t)n || fhi < flo || fhi > c->usable) {
        rc = corrupt_page(c, id, "free_lo/free_hi inconsistent with the slot array");
        goto out;
    }
    if (!gap_zero(c, p, flo, fhi)) { rc = corrupt_page(c, id, "gap not zeroed"); goto out; }
    memset(used, 0, c->usable);
    for (int i = 0; i < n; i++) {
        uint32_t off = cell_off(p, inner, i);
        uint32_t hdr = inner ? 0 : LEAF_CELL_HDR;
        if (off < fhi || off + hdr > c->usable) { rc = corrupt_page(c, id, "cell offset outside the cell area"); goto out; }
        const uint8_t *cell = p + off;
        uint32_t kl, sz = node_cell_size(p, inner, i);
        const uint8_t *k = node_key(p, inner, i, &kl);
        if (off + sz > c->usable || kl > c->max_key) { rc = corrupt_page(c, id, "cell overruns the page"); goto out; }
        for (uint32_t b = off; b < off + sz; b++) {
            if (used[b]) { rc = corrupt_page(c, id, "cells overlap"); goto out; }
            used[b] = 1;
        }
        sum += sz;
        if (slot_head(p, inner, i) != key_head(k, kl)) { rc = corrupt_page(c, id, "slot key head differs from its key"); goto out; }
        if (prev && keycmp(prev, prevlen, k, kl) >= 0) { rc = corrupt_page(c, id, "keys out of order"); goto out; }
        if (has_lo && keycmp(k, kl, lo, lolen) < 0) { rc = corrupt_page(c, id, "key below its separator bound"); goto out; }
        if (has_hi && keycmp(k, kl, hi, hilen) >= 0) { rc = corrupt_page(c, id, "key at or above its separator bound"); goto out; }
        prev = k;
        prevlen = kl;
        if (leaf && (rd16(cell) & KLEN_OVF)) {
            rc = v_ovf(v, rd64(k + kl), rd32(cell + 2));
            if (rc) goto out;
        }
    }
    if (sum + rd16(p + N_GARBAGE) != c->usable - fhi) {
        rc = corrupt_page(c, id, "cell bytes plus garbage differ from the cell area");
        goto out;
    }
    if (leaf) {
        v->info->leaf_pages++;
        v->info->keys += (uint64_t)n;
        goto out;
    }
    v->info->inner_pages++;
    for (int ci = 0; ci <= n; ci++) {
        const uint8_t *clo = lo, *chi = hi;
        size_t clolen = lolen, chilen = hilen;
        int chas_lo = has_lo, chas_hi = has_hi;
        uint32_t kl;
        if (ci > 0) {
            clo = node_key(p, 1, ci - 1, &kl); clolen = kl; chas_lo = 1;
        }
        if (ci < n) {
            chi = node_key(p, 1, ci, &kl); chilen = kl; chas_hi = 1;
        }
        rc = v_node(v, child_at(p, ci), lvl + 1, clo, clolen, chas_lo, chi, chilen, chas_hi);
        if (rc) goto out;
    }
out:
    c->slots[s].pin--;
    return rc;
}

int bt_verify(ps_core *c, ps_verify_info *info) {
    memset(info, 0, sizeof *info);
    vctx v = {c, calloc(c->meta.page_count / 8 + 1, 1), info};
    if (!v.seen) return PS_E_NOMEM;
    int rc = 0;
    const uint8_t *m = slot_page(c, (uint32_t)pt_find(c, 0));
    if (rd16(m + H_TYPE) != PS_PAGE_META || memcmp(m + M_MAGIC, "PAGESTOR", 8) != 0 ||
        !gap_zero(c, m, M_END, c->usable)) {
        rc = corrupt_page(c, 0, "bad meta page");
        goto out;
    }
    if (c->meta.height < 1 || c->meta.height > MAXH) { rc = corrupt_page(c, 0, "bad tree height"); goto out; }
    rc = v_node(&v, c->meta.root, 0, NULL, 0, 0, NULL, 0, 0);
    if (rc) goto out;
    uint32_t cap = (c->usable - F_IDS) / 8;
    for (uint64_t id = c->meta.free_head; id;) {
        rc = v_mark(&v, id, "freelist");
        if (rc) goto out;
        int64_t s = page_fetch(c, id, 1);
        if (s < 0) { rc = (int)s; goto out; }
        const uint8_t *p = slot_page(c, (uint32_t)s);
        uint32_t n = rd32(p + F_COUNT);
        if (rd16(p + H_TYPE) != PS_PAGE_FREELIST || rd64(p + H_PAGEID) != id || n > cap ||
            rd16(p + H_FREELO) != F_IDS + 8 * n || rd16(p + H_FREEHI) != c->usable ||
            !gap_zero(c, p, F_IDS + 8 * n, c->usable)) {
            rc = corrupt_page(c, id, "bad freelist page");
            goto out;
        }
        for (uint32_t i = 0; i < n; i++) {
            rc = v_mark(&v, rd64(p + F_IDS + 8 * (size_t)i), "free id");
            if (rc) goto out;
        }
        info->freelist_pages++;
        info->free_ids += n;
        id = rd64(p + F_NEXT);
    }
    uint64_t reached = 1;
    for (uint64_t i = 1; i < c->meta.page_count; i++)
        reached += (v.seen[i >> 3] >> (i & 7)) & 1;
    if (reached != c->meta.page_count) {
        rc = set_err(c, PS_E_CORRUPT, "%llu of %llu pages are neither in the tree nor free",
                     (unsigned long long)(c->meta.page_count - reached),
                     (unsigned long long)c->meta.page_count);
        goto out;
    }
    if (info->keys != c->meta.key_count) {
        rc = set_err(c, PS_E_CORRUPT, "tree holds %llu keys, meta says %llu",
                     (unsigned long long)info->keys, (unsigned long long)c->meta.key_count);
        goto out;
    }
    info->height = c->meta.height;
    info->page_count = c->meta.page_count;
out:
    free(v.seen);
    return rc;
}
