/* Public entry points of the C core: lifetime, the tree lock, operations
 * with their WAL records, batches, replay and the checkpoint hooks.
 *
 * Locking (docs/architecture.md): get/scan/ckpt_copy take the read side of
 * the writer-preferring tree lock; a reader that meets a page miss drops it
 * and redoes the whole call under the write side, where loads may happen.
 * Everything else takes the write side.  The tree lock is also DESIGN.md's
 * checkpoint lock: ckpt_begin runs under it, so the dirty-page snapshot and
 * the CHECKPOINT record sit at one point of the operation order. */
#include <sys/mman.h>
#include <time.h>

#include <unistd.h>

#include "ps_internal.h"

/* Page-aligned memory, 2 MiB aligned when large (page memory may use huge
 * pages: prefault.c). */
static void *aligned(size_t n) {
    void *p = NULL;
    size_t align = n >= (4u << 20) ? (2u << 20) : 4096;
    if (n == 0) n = 4096;
    if (posix_memalign(&p, align, n) != 0) return NULL;
    return p;
}

/* Page memory, the checkpoint buffer and the per-slot arrays are reserved,
 * not touched: anonymous mappings read as zeros and take resident memory
 * only where written, so a store whose page memory is a fifth of the
 * machine's RAM costs what its pages in use cost (slot_take hands slots out
 * in index order).  MAP_NORESERVE: the region is a ceiling, not a
 * commitment.  `align` > 4 KiB trims the mapping to that alignment (huge
 * pages, prefault.c). */
static size_t region_len(size_t n) { return ((n ? n : 1) + 4095) & ~(size_t)4095; }

static void *region_map(size_t n, size_t align) {
    n = region_len(n);
    size_t extra = align > 4096 ? align : 0;
    uint8_t *p = mmap(NULL, n + extra, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (extra) {
        size_t head = (align - (uintptr_t)p % align) % align;
        if (head) munmap(p, head);
        if (extra - head) munmap(p + head + n, extra - head);
        p += head;
    }
    return p;
}

static void region_unmap(void *p, size_t n) {
    if (p) munmap(p, region_len(n));
}

int ps_create(uint32_t page_size, uint64_t memory_size, uint64_t ckpt_buffer_size,
              uint32_t page_reserve, int physical_wal, void *handle, ps_core **out) {
    *out = NULL;
    if (page_size < PS_MIN_PAGE || page_size > PS_MAX_PAGE || (page_size & (page_size - 1)))
        return PS_E_ARG;
    if (page_reserve > page_size / 4 || page_reserve % 8) return PS_E_ARG;
    uint64_t nslots = memory_size / page_size;
    if (nslots < 8 || nslots > 0x7FFFFFFFull) return PS_E_ARG;
    uint64_t ncow = ckpt_buffer_size / page_size;
    if (ncow > 0x7FFFFFFFull) return PS_E_ARG;
    ps_core *c = calloc(1, sizeof *c);
    if (!c) return PS_E_NOMEM;
    c->page_size = page_size;
    c->reserve = page_reserve;
    c->usable = page_size - page_reserve;
    c->max_cell = (c->usable - INNER_SLOTS) / 3 - SLOT_SZ;
    c->leaf_inline_max = c->max_cell;
    c->max_key = c->max_cell - 14 < PS_MAX_KEY ? c->max_cell - 14 : PS_MAX_KEY;
    c->physical = physical_wal != 0;
    c->handle = handle;
    c->page_fd = -1;
    c->readahead = PS_SCAN_READAHEAD;
    c->owner_pid = getpid();
    c->nslots = (uint32_t)nslots;
    c->ncow = (uint32_t)ncow;
    size_t maxcells = page_size / 8 + 2;
    size_t big = (size_t)nslots * page_size >= (4u << 20) ? (2u << 20) : 4096;
    c->mem = region_map((size_t)nslots * page_size, big);
    c->slots = region_map(nslots * sizeof *c->slots, 4096);
    c->free_slots = region_map(nslots * sizeof *c->free_slots, 4096);
    c->cow_mem = region_map((size_t)ncow * page_size, 4096);
    c->cow_free = region_map((ncow + 1) * sizeof *c->cow_free, 4096);
    c->cow_owner = region_map((ncow + 1) * sizeof *c->cow_owner, 4096);
    c->scratch = aligned(3 * (size_t)page_size);
    c->cellbuf[0] = malloc(page_size);
    c->cellbuf[1] = malloc(page_size);
    c->splitbuf = malloc(page_size);
    c->cellp = malloc(maxcells * sizeof *c->cellp);
    c->cells = malloc(maxcells * sizeof *c->cells);
    c->zero_page = calloc(1, page_size);
    c->ckpt_ids = region_map(nslots * sizeof *c->ckpt_ids, 4096);
    c->seen = calloc((size_t)1 << PS_SEEN_SET_BITS, sizeof *c->seen);
    if (!c->seen || !c->mem || !c->slots || !c->free_slots || !c->cow_mem || !c->cow_free || !c->cow_owner ||
        !c->scratch || !c->cellbuf[0] || !c->cellbuf[1] || !c->splitbuf || !c->cellp || !c->cells ||
        !c->zero_page || !c->ckpt_ids) {
        ps_destroy(c);
        return PS_E_NOMEM;
    }
    /* the arrays read as zeros; nothing is listed free: slot_take hands out
     * never-used slots (and cow_take buffer pages) from index 0 up */
    prefault_start(c);
    c->op_epoch = 1;
    c->sig.slots_total = nslots;
    c->sig.cow_capacity = ncow;
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&c->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    c->lock_ready = 1;
    ps_set_throttle_thresholds(c, 2.0 / 3.0, 0.75);
    *out = c;
    return PS_OK;
}

/* A user thread may still be inside an operation when the store closes, or may
 * call in after it (Python checks "closed" before the call, not atomically with
 * it): the write lock waits for the first, the flag refuses the second, and the
 * struct with its lock outlives both until ps_destroy. ps_shut does the first
 * two and leaves the memory to the closing checkpoint (its calls are not user
 * operations); ps_close also frees it. */
/* In a forked child the core belongs to the parent: its lock may have been
 * held by a parent thread at the fork (taking it would hang), and its page
 * memory is the parent's, copy-on-write. The child only marks it closed and
 * leaves it to the process's exit. */
static int forked_child(ps_core *c) {
    if (getpid() == c->owner_pid) return 0;
    c->closed = 1;
    return 1;
}

void ps_shut(ps_core *c) {
    if (!c || !c->lock_ready || forked_child(c)) return;
    core_wrlock(c);
    c->closed = 1;
    pthread_rwlock_unlock(&c->lock);
}

void ps_close(ps_core *c) {
    if (!c || c->freed || forked_child(c)) return;
    if (c->lock_ready) core_wrlock(c);   /* ps_create may fail before the lock exists */
    c->closed = c->freed = 1;
    prefault_stop(c);
    region_unmap(c->mem, (size_t)c->nslots * c->page_size);
    region_unmap(c->slots, c->nslots * sizeof *c->slots);
    region_unmap(c->free_slots, c->nslots * sizeof *c->free_slots);
    region_unmap(c->cow_mem, (size_t)c->ncow * c->page_size);
    region_unmap(c->cow_free, (c->ncow + 1) * sizeof *c->cow_free);
    region_unmap(c->cow_owner, (c->ncow + 1) * sizeof *c->cow_owner);
    region_unmap(c->ckpt_ids, c->nslots * sizeof *c->ckpt_ids);
    free(c->scratch); free(c->cellbuf[0]); free(c->cellbuf[1]); free(c->splitbuf);
    free(c->cellp); free(c->cells); free(c->zero_page); free(c->seen);
    free(c->undo); free(c->undo_img); free(c->pins);
    mv_free(c);
    seal_ctx_free(c->seal_ctx); free(c->seal_buf);
    page_keys_free(c->page_keys); page_map_drop(c);
    c->page_keys = NULL;
    for (uint64_t d = 0; d < c->pt_ndir; d++) free(c->pt_dir[d]);
    free(c->pt_dir);
    c->mem = NULL; c->slots = NULL; c->free_slots = NULL; c->cow_mem = NULL; c->cow_free = NULL;
    c->cow_owner = NULL; c->scratch = NULL; c->cellbuf[0] = c->cellbuf[1] = NULL; c->splitbuf = NULL;
    c->cellp = NULL; c->cells = NULL; c->zero_page = NULL; c->seen = NULL; c->ckpt_ids = NULL; c->undo = NULL;
    c->undo_img = NULL; c->pins = NULL; c->seal_ctx = NULL; c->seal_buf = NULL; c->pt_dir = NULL;
    c->pt_ndir = 0;
    if (c->lock_ready) pthread_rwlock_unlock(&c->lock);
}

void ps_destroy(ps_core *c) {
    if (!c || forked_child(c)) return;
    ps_close(c);
    if (c->lock_ready) pthread_rwlock_destroy(&c->lock);
    free(c);
}

ps_signals *ps_get_signals(ps_core *c) { return &c->sig; }
uint64_t ps_bad_page(ps_core *c) { return c->bad_page; }
uint64_t ps_blocked_page(ps_core *c) { return c->blocked_page; }
const char *ps_errmsg(ps_core *c) { return c->errmsg; }
uint32_t ps_max_key(ps_core *c) { return c->max_key; }
uint32_t ps_max_inline(ps_core *c) { return c->leaf_inline_max - LEAF_CELL_HDR; }

void ps_set_page_fd(ps_core *c, int fd) {
    core_wrlock(c);
    page_fd_set(c, fd);
    pthread_rwlock_unlock(&c->lock);
}

void ps_set_throttle_thresholds(ps_core *c, double cow_fraction, double dirty_fraction) {
    core_wrlock(c);
    c->thr_cow = cow_fraction > 0 ? (uint64_t)(cow_fraction * c->ncow + 0.999999) : 0;
    if (c->thr_cow == 0 && cow_fraction > 0) c->thr_cow = 1;
    c->thr_dirty = dirty_fraction > 0 ? (uint64_t)(dirty_fraction * c->nslots + 0.999999) : 0;
    if (c->thr_dirty == 0 && dirty_fraction > 0) c->thr_dirty = 1;
    update_throttle(c);
    pthread_rwlock_unlock(&c->lock);
}

int ps_format_new(ps_core *c) {
    core_wrlock(c);
    int rc = PS_E_ARG;
    if (c->ready) goto out;
    memset(&c->meta, 0, sizeof c->meta);
    c->meta.page_count = 0;
    op_begin(c, 0);
    uint64_t id0, id1;
    int64_t s0 = page_new(c, PS_PAGE_META, &id0);
    if (s0 < 0) { rc = (int)s0; goto out; }
    int64_t s1 = page_new(c, PS_PAGE_LEAF, &id1);
    if (s1 < 0) { rc = (int)s1; goto out; }
    leaf_init(c, slot_page(c, (uint32_t)s1));
    c->meta.root = id1;
    c->meta.height = 1;
    meta_to_page(c, slot_page(c, (uint32_t)s0));
    c->slots[s0].pin = 1;          /* the meta page stays resident */
    op_commit(c);
    c->ready = 1;
    rc = PS_OK;
out:
    pthread_rwlock_unlock(&c->lock);
    return rc;
}

int ps_open_existing(ps_core *c, uint64_t page_count) {
    core_wrlock(c);
    int rc = PS_E_ARG;
    if (c->ready) goto out;
    c->meta.page_count = 1;
    int64_t s = page_fetch(c, 0, 1);
    if (s < 0) { rc = (int)s; goto out; }
    const uint8_t *p = slot_page(c, (uint32_t)s);
    rc = PS_E_CORRUPT;
    c->bad_page = 0;
    if (rd16(p + H_TYPE) != PS_PAGE_META || memcmp(p + M_MAGIC, "PAGESTOR", 8) != 0) {
        set_err(c, rc, "page 0 is not a pagestore meta page");
        goto drop;
    }
    if (rd32(p + M_VERSION) != PS_META_VERSION || rd32(p + M_PAGESIZE) != c->page_size ||
        rd32(p + M_RESERVE) != c->reserve) {
        set_err(c, rc, "meta page: version %u, page_size %u, reserve %u do not match",
                rd32(p + M_VERSION), rd32(p + M_PAGESIZE), rd32(p + M_RESERVE));
        goto drop;
    }
    c->meta.root = rd64(p + M_ROOT);
    c->meta.page_count = rd64(p + M_PAGECOUNT);
    c->meta.free_head = rd64(p + M_FREEHEAD);
    c->meta.key_count = rd64(p + M_KEYCOUNT);
    c->meta.height = rd32(p + M_HEIGHT);
    if (c->meta.page_count < 2 || c->meta.root == 0 || c->meta.root >= c->meta.page_count ||
        c->meta.height < 1 || c->meta.free_head >= c->meta.page_count) {
        set_err(c, rc, "meta page fields out of range");
        goto drop;
    }
    if (page_count && page_count < c->meta.page_count) {
        set_err(c, rc, "page file holds %llu pages, meta page says %llu",
                (unsigned long long)page_count, (unsigned long long)c->meta.page_count);
        goto drop;
    }
    page_drop_beyond(c, c->meta.page_count);
    c->slots[s].pin = 1;
    c->ready = 1;
    rc = PS_OK;
    goto out;
drop:
    pt_remove(c, 0);
    c->slots[s].used = 0;
    c->free_slots[c->nfree++] = (uint32_t)s;
    c->sig.slots_used--;
    memset(&c->meta, 0, sizeof c->meta);
out:
    pthread_rwlock_unlock(&c->lock);
    return rc;
}

/* ---- operations ----------------------------------------------------------- */

static int log_put(ps_core *c, uint64_t txid, const char *key, size_t klen, const char *val,
                   size_t vlen, uint64_t *end) {
    uint8_t h[16];
    wr64(h, txid);
    wr32(h + 8, (uint32_t)klen);
    wr32(h + 12, (uint32_t)vlen);
    wpart parts[3] = {{h, 16}, {key, klen}, {val, vlen}};
    return wal_append(c, PS_REC_PUT, parts, 3, NULL, end);
}

static int log_delete(ps_core *c, uint64_t txid, const char *key, size_t klen, uint64_t *end) {
    uint8_t h[12];
    wr64(h, txid);
    wr32(h + 8, (uint32_t)klen);
    wpart parts[2] = {{h, 12}, {key, klen}};
    return wal_append(c, PS_REC_DELETE, parts, 2, NULL, end);
}

int64_t ps_put(ps_core *c, const char *key, size_t klen, const char *val, size_t vlen) {
    if (klen > c->max_key || vlen > PS_MAX_VALUE) return PS_E_TOO_LARGE;
    uint64_t end = 0;
    core_wrlock(c);
    PS_REFUSE_IF_CLOSED(c);
    op_begin(c, 1);
    int rc = c->mv ? mv_capture(c, key, klen, 0) : 0;   /* an open snapshot's before-image */
    if (!rc) rc = bt_put(c, (const uint8_t *)key, klen, (const uint8_t *)val, vlen, 1, NULL);
    if (!rc && c->guarded) rc = wal_physical(c);
    if (!rc) rc = log_put(c, 0, key, klen, val, vlen, &end);
    if (rc) {
        op_rollback(c);
        /* a value stored in overflow pages needs them all at once, plus a
         * leaf, the path above it and a split */
        size_t cap = c->usable - O_DATA;
        uint64_t whole = vlen > c->leaf_inline_max ? (vlen + cap - 1) / cap + c->meta.height + 2 : 0;
        if (whole > c->sig.rollback_pages) c->sig.rollback_pages = whole;
        uint64_t chain = rc == PS_E_NOMEM && whole ? put_need(c, vlen) : 0;
        if (chain > ps_rollback_need()) rollback_need_note(chain);
    } else {
        op_commit(c);
    }
    if (c->mv) mv_op_done(c, !rc);
    pthread_rwlock_unlock(&c->lock);
    return rc ? rc : (int64_t)end;
}

int64_t ps_delete(ps_core *c, const char *key, size_t klen) {
    if (klen > PS_MAX_KEY) return PS_E_TOO_LARGE;
    if (klen > c->max_key) return PS_E_NOT_FOUND;
    uint64_t end = 0;
    core_wrlock(c);
    PS_REFUSE_IF_CLOSED(c);
    op_begin(c, 1);
    int rc = c->mv ? mv_capture(c, key, klen, 1) : 0;
    if (!rc) rc = bt_delete(c, (const uint8_t *)key, klen, 1, NULL);
    if (!rc && c->guarded) rc = wal_physical(c);
    if (!rc) rc = log_delete(c, 0, key, klen, &end);
    if (rc) op_rollback(c);
    else op_commit(c);
    if (c->mv) mv_op_done(c, !rc);
    pthread_rwlock_unlock(&c->lock);
    return rc ? rc : (int64_t)end;
}

int64_t ps_get(ps_core *c, const char *key, size_t klen, char *out, size_t cap) {
    if (klen > PS_MAX_KEY) return PS_E_TOO_LARGE;
    if (klen > c->max_key) return PS_E_NOT_FOUND;
    core_rdlock(c);
    PS_REFUSE_IF_CLOSED(c);
    int64_t r = bt_get(c, (const uint8_t *)key, klen, (uint8_t *)out, cap, 0);
    pthread_rwlock_unlock(&c->lock);
    if (r != PS_RETRY) return r;
    core_wrlock(c);
    PS_REFUSE_IF_CLOSED(c);
    r = bt_get(c, (const uint8_t *)key, klen, (uint8_t *)out, cap, 1);
    unpin_op_all(c);
    pthread_rwlock_unlock(&c->lock);
    return r;
}

/* Entries: op u8 (1 put, 2 delete) | klen u32 | vlen u32 | key | value */
static int batch_check(ps_core *c, const uint8_t *b, size_t len, uint64_t *nops) {
    size_t off = 0;
    uint64_t n = 0;
    while (off < len) {
        if (len - off < 9) return PS_E_ARG;
        uint8_t op = b[off];
        uint32_t kl = rd32(b + off + 1), vl = rd32(b + off + 5);
        if ((op != 1 && op != 2) || (op == 2 && vl != 0)) return PS_E_ARG;
        if ((uint64_t)kl + vl > len - off - 9) return PS_E_ARG;
        if (kl > (op == 1 ? c->max_key : PS_MAX_KEY) || vl > PS_MAX_VALUE) return PS_E_TOO_LARGE;
        off += 9 + (size_t)kl + vl;
        n++;
    }
    *nops = n;
    return 0;
}

int64_t ps_apply_batch(ps_core *c, const char *ops, size_t len, uint64_t txid) {
    return core_apply_batch(c, ops, len, txid, NULL);
}

int64_t core_apply_batch(ps_core *c, const char *ops, size_t len, uint64_t txid, const mv_check *chk) {
    const uint8_t *b = (const uint8_t *)ops;
    uint64_t nops, end = 0;
    int rc = batch_check(c, b, len, &nops);
    if (rc) return rc;
    core_wrlock(c);
    PS_REFUSE_IF_CLOSED(c);
    /* a transaction's reads, checked in the same hold that applies its writes */
    if (chk && (rc = mv_validate(c, chk->snap, chk->reads, chk->len)) != 0) {
        pthread_rwlock_unlock(&c->lock);
        return rc;
    }
    if (txid == 0) txid = c->wal_on ? c->sig.wal_end_lsn : 1;
    op_begin(c, 1);
    c->gate_gave_up = 0;
    c->gate_waited = 0;
    int logged = 0;
    uint32_t done = 0;
    size_t at = 0;                              /* the write being applied */
    for (size_t off = 0; off < len;) {
        at = off;
        uint8_t op = b[off];
        uint32_t kl = rd32(b + off + 1), vl = rd32(b + off + 5);
        const char *k = ops + off + 9, *v = k + kl;
        off += 9 + (size_t)kl + vl;
        if (c->mv && (rc = mv_capture(c, k, kl, op == 2)) != 0) break;
        if (op == 1) {
            rc = bt_put(c, (const uint8_t *)k, kl, (const uint8_t *)v, vl, 0, NULL);
        } else if (kl > c->max_key) {
            rc = 0;
        } else {
            rc = bt_delete(c, (const uint8_t *)k, kl, 0, NULL);
            if (rc == PS_E_NOT_FOUND) rc = 0;
        }
        unpin_op_all(c);
        if (rc) break;
        rc = op == 1 ? log_put(c, txid, k, kl, v, vl, NULL) : log_delete(c, txid, k, kl, NULL);
        if (rc) break;
        logged |= c->wal_on;
        done++;
        if (done == c->t_fail_at) {            /* a test's failpoint: memory "full" here */
            rc = PS_E_NOMEM;
            break;
        }
        if (off < len) batch_turn(c, done);
    }
    if (!rc) rc = wal_physical(c);
    if (!rc) {
        uint8_t h[12];
        wr64(h, txid);
        wr32(h + 8, done);
        wpart parts[1] = {{h, 12}};
        rc = wal_append(c, PS_REC_COMMIT, parts, 1, NULL, &end);
    }
    if (rc) {
        /* before the rollback: the pages it holds and the leaves left to change */
        uint64_t need = rc == PS_E_NOMEM ? batch_need(c, b, len, at) : 0;
        op_rollback(c);
        if (need) rollback_need_note(need);
        c->sig.rollback_ops = nops;
        c->sig.rollback_ops_done = done;
        if (logged) {
            uint8_t h[8];
            wr64(h, txid);
            wpart parts[1] = {{h, 8}};
            wal_append(c, PS_REC_ROLLBACK, parts, 1, NULL, NULL);
        }
    } else {
        op_commit(c);
    }
    if (c->mv) mv_op_done(c, !rc);
    if (__atomic_load_n(&c->gate, __ATOMIC_RELAXED)) batch_gate_open(c);
    pthread_rwlock_unlock(&c->lock);
    return rc ? rc : (int64_t)end;
}

int64_t ps_apply_log(ps_core *c, const char *recs, size_t len) {
    const uint8_t *b = (const uint8_t *)recs;
    /* check every record before applying any */
    for (size_t off = 0; off < len;) {
        if (len - off < PS_WAL_REC_HDR) return PS_E_ARG;
        uint32_t rl = rd32(b + off + 4);
        if (rl < PS_WAL_REC_HDR || rl > len - off) return PS_E_ARG;
        uint8_t t = b[off + 16];
        if (t == PS_REC_PUT) {
            if (rl < PS_WAL_REC_HDR + 16) return PS_E_ARG;
            uint32_t kl = rd32(b + off + 25), vl = rd32(b + off + 29);
            if ((uint64_t)PS_WAL_REC_HDR + 16 + kl + vl != rl) return PS_E_ARG;
            if (kl > c->max_key || vl > PS_MAX_VALUE) return PS_E_TOO_LARGE;
        } else if (t == PS_REC_DELETE) {
            if (rl < PS_WAL_REC_HDR + 12) return PS_E_ARG;
            uint32_t kl = rd32(b + off + 25);
            if ((uint64_t)PS_WAL_REC_HDR + 12 + kl != rl) return PS_E_ARG;
        }
        off += rl;
    }
    core_wrlock(c);
    op_begin(c, 1);
    int rc = 0;
    int64_t n = 0;
    for (size_t off = 0; off < len;) {
        uint32_t rl = rd32(b + off + 4);
        uint8_t t = b[off + 16];
        const uint8_t *pl = b + off + PS_WAL_REC_HDR;
        if (t == PS_REC_PUT) {
            uint32_t kl = rd32(pl + 8), vl = rd32(pl + 12);
            rc = bt_put(c, pl + 16, kl, pl + 16 + kl, vl, 0, NULL);
            n++;
        } else if (t == PS_REC_DELETE) {
            uint32_t kl = rd32(pl + 8);
            rc = kl > c->max_key ? 0 : bt_delete(c, pl + 12, kl, 0, NULL);
            if (rc == PS_E_NOT_FOUND) rc = 0;
            n++;
        }
        unpin_op_all(c);
        if (rc) break;
        off += rl;
    }
    if (rc) {
        op_rollback(c);
    } else {
        if (c->physical) wal_physical_unlogged(c);   /* replay logs no page records */
        op_commit(c);
    }
    pthread_rwlock_unlock(&c->lock);
    return rc ? rc : n;
}

int64_t ps_scan(ps_core *c, const char *lo, size_t lolen, int has_lo, int lo_incl,
                const char *hi, size_t hilen, int has_hi, int hi_incl, int reverse,
                size_t max_bytes, char *out, size_t cap, size_t *out_len) {
    core_rdlock(c);
    PS_REFUSE_IF_CLOSED(c);
    int64_t r = bt_scan(c, (const uint8_t *)lo, lolen, has_lo, lo_incl, (const uint8_t *)hi,
                        hilen, has_hi, hi_incl, reverse, max_bytes, (uint8_t *)out, cap,
                        out_len, 0);
    pthread_rwlock_unlock(&c->lock);
    if (r != PS_RETRY) return r;
    core_wrlock(c);
    PS_REFUSE_IF_CLOSED(c);
    r = bt_scan(c, (const uint8_t *)lo, lolen, has_lo, lo_incl, (const uint8_t *)hi, hilen,
                has_hi, hi_incl, reverse, max_bytes, (uint8_t *)out, cap, out_len, 1);
    pthread_rwlock_unlock(&c->lock);
    return r;
}

int64_t ps_log_record(ps_core *c, int type, const char *payload, size_t len) {
    if (type < 1 || type > 255) return PS_E_ARG;
    uint64_t end = 0;
    core_wrlock(c);
    PS_REFUSE_IF_CLOSED(c);
    wpart parts[1] = {{payload, len}};
    int rc = wal_append(c, (uint8_t)type, parts, 1, NULL, &end);
    pthread_rwlock_unlock(&c->lock);
    return rc ? rc : (int64_t)end;
}

int64_t ps_count(ps_core *c) {
    core_rdlock(c);
    PS_REFUSE_IF_CLOSED(c);
    int64_t n = (int64_t)c->meta.key_count;
    pthread_rwlock_unlock(&c->lock);
    return n;
}

int64_t ps_height(ps_core *c) {
    core_rdlock(c);
    PS_REFUSE_IF_CLOSED(c);
    int64_t n = (int64_t)c->meta.height;
    pthread_rwlock_unlock(&c->lock);
    return n;
}

int ps_verify(ps_core *c, ps_verify_info *info) {
    core_wrlock(c);
    PS_REFUSE_IF_CLOSED(c);
    int rc = c->ready ? bt_verify(c, info) : PS_E_ARG;
    pthread_rwlock_unlock(&c->lock);
    return rc;
}

int ps_read_live_page(ps_core *c, uint64_t page_id, uint8_t *out) {
    core_rdlock(c);
    PS_REFUSE_IF_CLOSED(c);
    int64_t s = pt_find(c, page_id);
    if (s >= 0) memcpy(out, slot_page(c, (uint32_t)s), c->page_size);
    pthread_rwlock_unlock(&c->lock);
    return s >= 0 ? PS_OK : PS_E_NOT_FOUND;
}

/* Bulk install of page images read sequentially from the page file (replay
 * prefetch): one call per chunk instead of one read_page callback per miss. */
int64_t ps_preload(ps_core *c, uint64_t first_id, const uint8_t *pages, size_t n) {
    core_wrlock(c);
    int64_t r = c->ready ? page_preload(c, first_id, pages, n) : PS_E_ARG;
    pthread_rwlock_unlock(&c->lock);
    return r;
}

/* Recovery's restore, before open_existing: the restored images become
 * resident clean pages (page_stash). */
int64_t ps_stash_pages(ps_core *c, const uint64_t *ids, const uint8_t *pages, size_t n) {
    core_wrlock(c);
    int64_t r = c->ready ? PS_E_ARG : page_stash(c, ids, pages, n);
    pthread_rwlock_unlock(&c->lock);
    return r;
}

/* ---- checkpoint hooks (DESIGN.md §3 step 1; ignite.md §3) ---------------- */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int ps_ckpt_begin(ps_core *c, uint64_t checkpoint_id, uint64_t **ids_out, uint64_t *n_out, uint64_t *lsn_out) {
    core_wrlock(c);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = PS_E_ARG;
    if (!c->ready || c->ckpt_active) goto out;
    /* the meta fields reach page 0 only here, so page 0 in a checkpoint is
     * always consistent with the pages of that checkpoint */
    int64_t s0 = pt_find(c, 0);
    uint8_t *m = slot_page(c, (uint32_t)s0);
    uint8_t *tmp = c->scratch;
    memcpy(tmp, m, c->page_size);
    meta_to_page(c, tmp);
    if (memcmp(tmp, m, c->page_size) != 0) {
        op_begin(c, 0);
        rc = page_w(c, (uint32_t)s0);
        if (rc) goto out;
        memcpy(m, tmp, c->page_size);
        op_commit(c);
        c->slots[s0].snap = 0;
    }
    /* physical mode: the checkpoint image of every page of this checkpoint
     * that has no PAGE_SNAPSHOT since the previous ckpt_begin (page 0 after
     * the meta update, pages built before the WAL was attached or changed by
     * replay), so that the records between the previous CHECKPOINT record
     * and this one rebuild every page of the checkpoint (physrec.c) */
    if (c->physical && c->wal_on) {
        for (uint32_t s = 0; s < c->fresh; s++) {
            slot_t *sl = &c->slots[s];
            if (!sl->used || !sl->dirty || sl->snap) continue;
            rc = wal_page_snapshot(c, sl->page_id, slot_page(c, s));
            if (rc) goto out;
            sl->snap = 1;
        }
    }
    uint8_t h[8];
    wr64(h, checkpoint_id);
    wpart parts[1] = {{h, 8}};
    uint64_t lsn = 0;
    rc = wal_append(c, PS_REC_CHECKPOINT, parts, 1, &lsn, NULL);
    if (rc) goto out;
    uint64_t n = 0;
    for (uint32_t s = 0; s < c->fresh; s++) {     /* slots beyond were never used */
        slot_t *sl = &c->slots[s];
        sl->snap = 0;
        if (!sl->used || !sl->dirty) continue;
        sl->dirty = 0;
        sl->inckpt = 1;
        c->ckpt_ids[n++] = sl->page_id;
    }
    c->sig.dirty_pages = 0;
    c->sig.ckpt_pages = n;
    prefault_cow(c, n);
    __atomic_store_n(&c->sig.ckpt_written, 0, __ATOMIC_RELAXED);
    c->sig.checkpoint_id = checkpoint_id;
    c->ckpt_active = 1;
    c->ckpt_id = checkpoint_id;
    *ids_out = c->ckpt_ids;
    *n_out = n;
    *lsn_out = lsn;
    update_throttle(c);
    rc = PS_OK;
out:
    clock_gettime(CLOCK_MONOTONIC, &t1);
    c->sig.ckpt_lock_ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u
                           + (uint64_t)t1.tv_nsec - (uint64_t)t0.tv_nsec;
    pthread_rwlock_unlock(&c->lock);
    /* Sorting 100k ids takes milliseconds: done after the lock is released
     * (DESIGN.md §3 step 1 must take microseconds to milliseconds). The array
     * belongs to this checkpoint alone while ckpt_active is set. */
    if (rc == PS_OK)
        qsort(c->ckpt_ids, *n_out, sizeof *c->ckpt_ids, cmp_u64);
    return rc;
}

/* The checkpoint image of page `id` (its copy-on-write copy if a writer
 * changed it since ckpt_begin, else the live page) into dst; read lock held. */
static int copy_ckpt_image(ps_core *c, uint64_t id, uint8_t *dst) {
    int64_t s = pt_find(c, id);
    if (s < 0 || !c->slots[s].inckpt) {
        c->bad_page = id;
        return set_err(c, PS_E_ARG, "page %llu is not part of the running checkpoint",
                       (unsigned long long)id);
    }
    const slot_t *sl = &c->slots[s];
    memcpy(dst, sl->cow >= 0 ? cow_page(c, (uint32_t)sl->cow) : slot_page(c, (uint32_t)s), c->page_size);
    return PS_OK;
}

/* What the page file and the recovery files hold: the checkpoint id and the CRC. */
static void stamp_ckpt_image(const ps_core *c, uint8_t *img) {
    wr64(img + H_CKPT, c->ckpt_id);
    wr32(img + H_CRC, ps_page_crc(img, c->page_size));
}

/* The read lock is taken per page and the CRC stamped outside it: held over
 * a whole chunk (64 pages, ~60 us of copying and CRC) it made every writer
 * that touched a page meanwhile wait for all of it, the bulk of the p99 put
 * latency during a checkpoint's page-write phase. One page's memcpy is the
 * longest a writer now waits for a copier. */
int ps_ckpt_copy(ps_core *c, const uint64_t *ids, size_t n, uint8_t *out) {
    int rc = PS_OK;
    for (size_t i = 0; i < n && rc == PS_OK; i++) {
        uint8_t *dst = out + i * (size_t)c->page_size;
        ckpt_rdlock(c);
        rc = copy_ckpt_image(c, ids[i], dst);
        pthread_rwlock_unlock(&c->lock);
        if (rc == PS_OK) stamp_ckpt_image(c, dst);
    }
    if (rc == PS_OK) __atomic_add_fetch(&c->sig.ckpt_written, n, __ATOMIC_RELAXED);
    return rc;
}

/* ps_ckpt_copy and ps_recframe in one pass: each page is copied (and CRC
 * stamped) into an L1-resident scratch page under the read lock, then framed
 * straight into `out` outside it. The two-call path writes every image to a
 * chunk-sized buffer and reads it back, one more trip through memory per
 * byte of the recovery-file phase. Returns the bytes framed or an error. */
int64_t ps_ckpt_copy_frame(ps_core *c, const uint64_t *ids, size_t n, int codec,
                           uint8_t *out, size_t cap, uint64_t *gap_fallbacks) {
    size_t per = (size_t)c->page_size + PS_RECORD_HEADER_SIZE;
    if (cap < n * per) return PS_E_ARG;
    uint8_t scratch[PS_MAX_PAGE] __attribute__((aligned(64)));   /* per caller: writers run in parallel */
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        ckpt_rdlock(c);
        int rc = copy_ckpt_image(c, ids[i], scratch);
        pthread_rwlock_unlock(&c->lock);
        if (rc != PS_OK) return rc;
        stamp_ckpt_image(c, scratch);
        int64_t got = ps_recframe(scratch, ids + i, 1, c->page_size, codec, out + pos, cap - pos,
                                  gap_fallbacks);
        if (got < 0) return got;
        pos += (size_t)got;
    }
    __atomic_add_fetch(&c->sig.ckpt_written, n, __ATOMIC_RELAXED);
    return (int64_t)pos;
}

/* In-checkpoint pages that hold a copy-on-write image, ascending: found
 * through the buffer's owner map, so the cost is the buffer size, not the
 * page memory size.  out must hold cow_capacity ids. */
int ps_ckpt_pages_with_copy(ps_core *c, uint64_t *out, size_t cap, size_t *n_out) {
    ckpt_rdlock(c);
    size_t n = 0;
    int rc = PS_OK;
    for (uint32_t i = 0; i < c->cow_fresh; i++) {
        uint32_t s = c->cow_owner[i];
        if (s == COW_NONE || !c->slots[s].inckpt) continue;
        if (n == cap) { rc = PS_E_NEED_SPACE; break; }
        out[n++] = c->slots[s].page_id;
    }
    pthread_rwlock_unlock(&c->lock);
    if (rc == PS_OK) qsort(out, n, sizeof *out, cmp_u64);
    *n_out = n;
    return rc;
}

static void release_slot(ps_core *c, slot_t *sl) {
    sl->inckpt = 0;
    if (sl->cow >= 0) {
        c->cow_owner[sl->cow] = COW_NONE;
        c->cow_free[c->ncow_free++] = (uint32_t)sl->cow;
        sl->cow = -1;
        c->sig.cow_used--;
    }
    c->sig.ckpt_pages--;
}

void ps_ckpt_release(ps_core *c, const uint64_t *ids, size_t n) {
    ckpt_wrlock(c);
    for (size_t i = 0; i < n; i++) {
        int64_t s = pt_find(c, ids[i]);
        if (s >= 0 && c->slots[s].inckpt) release_slot(c, &c->slots[s]);
    }
    update_throttle(c);
    pthread_rwlock_unlock(&c->lock);
}

void ps_ckpt_end(ps_core *c) {
    ckpt_wrlock(c);
    for (uint32_t s = 0; s < c->fresh; s++)
        if (c->slots[s].used && c->slots[s].inckpt) release_slot(c, &c->slots[s]);
    c->ckpt_active = 0;
    c->sig.ckpt_pages = 0;
    update_throttle(c);
    pthread_rwlock_unlock(&c->lock);
}
