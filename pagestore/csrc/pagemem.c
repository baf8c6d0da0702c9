/* Page memory: one aligned region cut into page slots, a page table
 * (page id -> slot, a two-level direct map, see ps_internal.h), clock
 * replacement, the checkpoint buffer (copy-on-write), page
 * allocation through the freelist, and the undo log of guarded operations.
 *
 * Invariant (DESIGN.md §4.6): replacement evicts only clean, unpinned pages
 * that are not part of the running checkpoint; it never writes anything.
 * The meta page (page 0) is pinned for the life of the core. */
#include <stdarg.h>
#include <stdio.h>

#include "ps_internal.h"

int set_err(ps_core *c, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    return code;
}

/* Make sure page id has a page-table entry (allocates its chunk). */
int pt_reserve(ps_core *c, uint64_t id) {
    uint64_t d = id >> PT_CHUNK_BITS;
    if (d >= c->pt_ndir) {
        uint64_t n = c->pt_ndir ? c->pt_ndir : 16;
        while (n <= d) n *= 2;
        uint32_t **nd = realloc(c->pt_dir, n * sizeof *nd);
        if (!nd) return PS_E_NOMEM;
        memset(nd + c->pt_ndir, 0, (n - c->pt_ndir) * sizeof *nd);
        c->pt_dir = nd;
        c->pt_ndir = n;
    }
    if (!c->pt_dir[d]) {
        c->pt_dir[d] = calloc(PT_CHUNK, sizeof **c->pt_dir);
        if (!c->pt_dir[d]) return PS_E_NOMEM;
    }
    return 0;
}

void pt_insert(ps_core *c, uint64_t id, uint32_t s) {
    *pt_ent(c, id) = (s + 1) | PT_REF;
}

void pt_remove(ps_core *c, uint64_t id) {
    uint32_t *e = pt_ent(c, id);
    if (e) *e = 0;
}

/* A slot with nothing in it: one given back, else the next never-used one
 * (index order, so page memory and the per-slot arrays are touched from the
 * start up, as far as the store has grown); -1 when neither is left. */
static int64_t slot_take(ps_core *c) {
    if (c->nfree) return c->free_slots[--c->nfree];
    if (c->fresh == c->nslots) return -1;
    uint32_t s = c->fresh++;
    c->sig.slots_touched = c->fresh;
    /* a checkpoint lists up to `fresh` ids: the list's memory is faulted in
     * here, a page per 512 slots, not by a large ckpt_begin under the write
     * lock (100k dirty pages: ~200 first-touch faults inside the hold) */
    if (s % 512 == 0) c->ckpt_ids[s] = 0;
    prefault_need(c, s);
    return s;
}

static int slot_available(const ps_core *c) { return c->nfree || c->fresh < c->nslots; }

/* A free slot: an empty one, else by clock replacement of a clean page. */
int64_t slot_alloc(ps_core *c) {
    int64_t fresh = slot_take(c);
    if (fresh >= 0) return fresh;
    uint64_t limit = 2 * (uint64_t)c->nslots + 1;
    for (uint64_t i = 0; i < limit; i++) {
        uint32_t s = c->clock_hand;
        c->clock_hand = s + 1 == c->nslots ? 0 : s + 1;
        slot_t *sl = &c->slots[s];
        if (!sl->used || sl->dirty || sl->inckpt || sl->pin) continue;
        uint32_t *e = pt_ent(c, sl->page_id);
        if (*e & PT_REF) { *e &= ~PT_REF; continue; }
        pt_remove(c, sl->page_id);
        sl->used = 0;
        c->sig.evictions++;
        c->sig.slots_used--;
        return s;
    }
    return PS_E_NOMEM;
}

static void slot_release(ps_core *c, uint32_t s) {
    c->slots[s].used = 0;
    c->free_slots[c->nfree++] = s;
    c->sig.slots_used--;
}

void slot_claim(ps_core *c, uint32_t s, uint64_t id) {
    slot_t *sl = &c->slots[s];
    sl->page_id = id;
    sl->undo_epoch = 0;
    sl->cow = -1;
    sl->pin = 0;
    sl->used = 1;
    sl->dirty = 0;
    sl->inckpt = 0;
    sl->snap = 0;
    c->sig.slots_used++;
    pt_insert(c, id, s);
}

void pin_op(ps_core *c, uint32_t s) {
    if (c->npins == c->pins_cap) {
        size_t n = c->pins_cap ? c->pins_cap * 2 : 64;
        uint32_t *np = realloc(c->pins, n * sizeof *np);
        if (!np) abort();
        c->pins = np;
        c->pins_cap = n;
    }
    c->pins[c->npins++] = s;
    c->slots[s].pin++;
}

void unpin_op_all(ps_core *c) {
    while (c->npins) c->slots[c->pins[--c->npins]].pin--;
}

static int undo_reserve(ps_core *c, size_t img) {
    if (c->nundo == c->undo_cap) {
        size_t n = c->undo_cap ? c->undo_cap * 2 : 64;
        undo_t *nu = realloc(c->undo, n * sizeof *nu);
        if (!nu) return PS_E_NOMEM;
        c->undo = nu;
        c->undo_cap = n;
    }
    if (c->undo_img_used + img > c->undo_img_cap) {
        size_t n = c->undo_img_cap ? c->undo_img_cap : (size_t)c->page_size * 16;
        while (n < c->undo_img_used + img) n *= 2;
        uint8_t *ni = realloc(c->undo_img, n);
        if (!ni) return PS_E_NOMEM;
        c->undo_img = ni;
        c->undo_img_cap = n;
    }
    return 0;
}

/* Make slot s writable: undo image (guarded ops), checkpoint copy-on-write,
 * dirty flag.  Must be called before every modification of a page. */
int page_w(ps_core *c, uint32_t s) {
    slot_t *sl = &c->slots[s];
    if (c->guarded && sl->undo_epoch != c->op_epoch) {
        /* A page as the page file holds it (clean, in no checkpoint, not the
         * meta page, which stays resident) needs no copy: a rollback drops
         * it and the next access reads it again.  A batch of random writes
         * on a store larger than its page memory touches mostly such pages,
         * and the copies were a quarter of its time.  Physical mode keeps
         * the copy: its page records are deltas from it (physrec.c). */
        int reread = !c->physical && !sl->dirty && !sl->inckpt && sl->page_id != 0;
        int rc = undo_reserve(c, reread ? 0 : c->page_size);
        if (rc) return rc;
        undo_t *u = &c->undo[c->nundo++];
        u->slot = s;
        u->is_new = reread ? UNDO_REREAD : 0;
        u->prior_dirty = sl->dirty;
        u->prior_cow = sl->cow;
        u->img_off = c->undo_img_used;
        if (!reread) {
            memcpy(c->undo_img + u->img_off, slot_page(c, s), c->page_size);
            c->undo_img_used += c->page_size;
        }
        sl->undo_epoch = c->op_epoch;
    }
    if (sl->inckpt && sl->cow < 0) {
        if (!cow_available(c)) {
            c->blocked_page = sl->page_id;
            return PS_E_CKPT_FULL;
        }
        /* buffer pages given back first, else never-used ones from 0 up (the
         * order prefault_cow populates them in) */
        uint32_t i = c->ncow_free ? c->cow_free[--c->ncow_free] : c->cow_fresh++;
        if (i + 1 > c->sig.cow_touched) c->sig.cow_touched = i + 1;
        memcpy(cow_page(c, i), slot_page(c, s), c->page_size);
        sl->cow = (int32_t)i;
        c->cow_owner[i] = s;
        c->sig.cow_used++;
        c->sig.cow_copies++;
        if (c->sig.cow_used > c->sig.cow_peak) c->sig.cow_peak = c->sig.cow_used;
    }
    if (!sl->dirty) {
        sl->dirty = 1;
        c->sig.dirty_pages++;
        c->sig.pages_dirtied++;
    }
    return 0;
}

/* A slot for page `id` whose old contents do not matter (a page being
 * (re)allocated or turned into a freelist page); it is writable on return. */
static int64_t page_slot_for_new(ps_core *c, uint64_t id) {
    int64_t s = pt_find(c, id);
    if (s >= 0) {
        int rc = page_w(c, (uint32_t)s);
        return rc ? rc : s;
    }
    if (c->guarded) {
        int rc = undo_reserve(c, 0);
        if (rc) return rc;
    }
    if (pt_reserve(c, id)) return PS_E_NOMEM;
    s = slot_alloc(c);
    if (s < 0) return s;
    slot_claim(c, (uint32_t)s, id);   /* the callers initialise the whole page */
    slot_t *sl = &c->slots[s];
    sl->dirty = 1;
    c->sig.dirty_pages++;
    c->sig.pages_dirtied++;
    if (c->guarded) {
        undo_t *u = &c->undo[c->nundo++];
        u->slot = (uint32_t)s;
        u->is_new = 1;
        u->prior_dirty = 0;
        u->prior_cow = -1;
        u->img_off = 0;
        sl->undo_epoch = c->op_epoch;
    }
    return s;
}

static void page_header(ps_core *c, uint8_t *p, uint16_t type, uint64_t id) {
    memset(p, 0, H_SIZE);
    wr16(p + H_TYPE, type);
    wr16(p + H_FORMAT, PS_PAGE_FORMAT);
    wr64(p + H_PAGEID, id);
    (void)c;
}

/* Allocate a page (freelist first, else grow the file), initialised with a
 * common header of `type` and an empty gap; returns its slot. */
int64_t page_new(ps_core *c, uint16_t type, uint64_t *id_out) {
    uint64_t id;
    if (c->meta.free_head == 0) {
        id = c->meta.page_count++;
    } else {
        int64_t hs = page_fetch(c, c->meta.free_head, 1);
        if (hs < 0) return hs;
        uint8_t *h = slot_page(c, (uint32_t)hs);
        uint32_t n = rd32(h + F_COUNT);
        if (n > 0) {
            int rc = page_w(c, (uint32_t)hs);
            if (rc) return rc;
            id = rd64(h + F_IDS + 8 * (size_t)(n - 1));
            memset(h + F_IDS + 8 * (size_t)(n - 1), 0, 8);   /* joins the gap */
            wr32(h + F_COUNT, n - 1);
            wr16(h + H_FREELO, (uint16_t)(F_IDS + 8 * (n - 1)));
        } else {
            id = c->meta.free_head;
            c->meta.free_head = rd64(h + F_NEXT);
        }
    }
    int64_t s = page_slot_for_new(c, id);
    if (s < 0) return s;
    uint8_t *p = slot_page(c, (uint32_t)s);
    memset(p, 0, c->page_size);
    page_header(c, p, type, id);
    *id_out = id;
    return s;
}

/* Return page `id` to the freelist. */
int page_free(ps_core *c, uint64_t id) {
    c->op_frees++;
    if (c->meta.free_head != 0) {
        int64_t hs = page_fetch(c, c->meta.free_head, 1);
        if (hs < 0) return (int)hs;
        uint8_t *h = slot_page(c, (uint32_t)hs);
        uint32_t n = rd32(h + F_COUNT);
        uint32_t cap = (c->usable - F_IDS) / 8;
        if (n < cap) {
            int rc = page_w(c, (uint32_t)hs);
            if (rc) return rc;
            wr64(h + F_IDS + 8 * (size_t)n, id);
            wr32(h + F_COUNT, n + 1);
            wr16(h + H_FREELO, (uint16_t)(F_IDS + 8 * (n + 1)));
            return 0;
        }
    }
    int64_t s = page_slot_for_new(c, id);
    if (s < 0) return (int)s;
    uint8_t *p = slot_page(c, (uint32_t)s);
    memset(p, 0, c->page_size);
    page_header(c, p, PS_PAGE_FREELIST, id);
    wr64(p + F_NEXT, c->meta.free_head);
    wr32(p + F_COUNT, 0);
    wr16(p + H_FREELO, F_IDS);
    wr16(p + H_FREEHI, (uint16_t)c->usable);
    c->meta.free_head = id;
    return 0;
}

void op_begin(ps_core *c, int guarded) {
    c->guarded = guarded;
    c->phys_logged = 0;
    c->op_frees = 0;
    c->split_open = 0;
    if (guarded) {
        c->op_epoch++;
        c->nundo = 0;
        c->undo_img_used = 0;
        c->meta_saved = c->meta;
    }
}

void update_throttle(ps_core *c) {
    int hint = (c->thr_cow && c->sig.cow_used >= c->thr_cow) ||
               (c->thr_dirty && c->sig.dirty_pages >= c->thr_dirty);
    if ((uint64_t)hint != c->sig.throttle_hint) c->sig.throttle_hint = (uint64_t)hint;
}

void op_commit(ps_core *c) {
    unpin_op_all(c);
    c->nundo = 0;
    c->undo_img_used = 0;
    c->guarded = 0;
    update_throttle(c);
}

void op_rollback(ps_core *c) {
    /* what a write too large for page memory had taken when it failed, for
     * the error that tells the user how much it needs (a batch then sets
     * the ops figures itself) */
    c->sig.rollback_pages = c->nundo;
    c->sig.rollback_ops = 1;
    c->sig.rollback_ops_done = 0;
    rollback_need_note(c->nundo + 1);    /* a batch sets its own bound after this */
    while (c->nundo) {
        undo_t *u = &c->undo[--c->nundo];
        slot_t *sl = &c->slots[u->slot];
        if (u->is_new) {            /* created, or the page file has it as it was */
            if (sl->dirty) c->sig.dirty_pages--;
            pt_remove(c, sl->page_id);
            slot_release(c, u->slot);
            continue;
        }
        memcpy(slot_page(c, u->slot), c->undo_img + u->img_off, c->page_size);
        if (sl->cow >= 0 && u->prior_cow < 0) {
            c->cow_owner[sl->cow] = COW_NONE;
            c->cow_free[c->ncow_free++] = (uint32_t)sl->cow;
            c->sig.cow_used--;
        }
        /* released by the checkpoint while the batch was open (batchgate.c):
         * the copy prior_cow names is free, and the page stays released */
        sl->cow = sl->inckpt ? u->prior_cow : -1;
        if (sl->dirty && !u->prior_dirty) c->sig.dirty_pages--;
        sl->dirty = u->prior_dirty;
        sl->undo_epoch = 0;
        if (c->phys_logged) {
            /* page records of the undone change are in the WAL already: the
             * page must be logged whole again and be part of the next
             * checkpoint, whose ckpt_begin logs its image if nothing else
             * does (physrec.c) */
            sl->snap = 0;
            if (!sl->dirty) {
                sl->dirty = 1;
                c->sig.dirty_pages++;
                c->sig.pages_dirtied++;
            }
        }
    }
    c->phys_logged = 0;
    c->meta = c->meta_saved;
    c->sig.rollbacks++;
    unpin_op_all(c);
    c->undo_img_used = 0;
    c->guarded = 0;
    update_throttle(c);
}

void meta_to_page(const ps_core *c, uint8_t *p) {
    memcpy(p + M_MAGIC, "PAGESTOR", 8);
    wr32(p + M_VERSION, PS_META_VERSION);
    wr32(p + M_PAGESIZE, c->page_size);
    wr64(p + M_ROOT, c->meta.root);
    wr64(p + M_PAGECOUNT, c->meta.page_count);
    wr64(p + M_FREEHEAD, c->meta.free_head);
    wr64(p + M_KEYCOUNT, c->meta.key_count);
    wr32(p + M_HEIGHT, c->meta.height);
    wr32(p + M_RESERVE, c->reserve);
    wr16(p + H_FREELO, M_END);
    wr16(p + H_FREEHI, (uint16_t)c->usable);
}

/* Put one checked on-disk image of page `id` into a free slot as a clean
 * page: 1 installed, 0 skipped (no free slot, or the image fails its checks:
 * a later miss reads it and reports the file). */
static int64_t install_image(ps_core *c, uint64_t id, const uint8_t *src) {
    if (!slot_available(c) || !ps_check_page(src, c->page_size, id)) return 0;
    if (pt_reserve(c, id)) return PS_E_NOMEM;
    uint32_t s = (uint32_t)slot_take(c);
    uint8_t *p = slot_page(c, s);
    memcpy(p, src, c->page_size);
    wr32(p + H_CRC, 0);
    slot_claim(c, s, id);
    return 1;
}

/* Install on-disk images of pages first_id.. (n images of page_size bytes)
 * into free slots, as a miss would load them, without evicting anything:
 * pages already resident, beyond page_count or failing their checks are
 * skipped (a later miss reads and reports them).  Stops when no slot is
 * free.  Returns the number installed (write lock held). */
int64_t page_preload(ps_core *c, uint64_t first_id, const uint8_t *pages, size_t n) {
    int64_t done = 0;
    for (size_t i = 0; i < n && slot_available(c); i++) {
        uint64_t id = first_id + i;
        if (id >= c->meta.page_count) break;
        if (pt_find(c, id) >= 0) continue;
        int64_t r = install_image(c, id, pages + i * (size_t)c->page_size);
        if (r < 0) return r;
        done += r;
    }
    return done;
}

/* Before the meta page is read (recovery's restore): keep the images just
 * written in place as clean resident pages, so the replay that follows finds
 * the interrupted checkpoint's pages in memory instead of missing on each
 * (Ignite restores into page memory the same way).  An id seen again
 * replaces the older image.  Returns the number installed (write lock held). */
int64_t page_stash(ps_core *c, const uint64_t *ids, const uint8_t *pages, size_t n) {
    int64_t done = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t old = pt_find(c, ids[i]);
        if (old >= 0) {
            pt_remove(c, ids[i]);
            slot_release(c, (uint32_t)old);
        }
        if (!slot_available(c)) break;
        int64_t r = install_image(c, ids[i], pages + i * (size_t)c->page_size);
        if (r < 0) return r;
        done += r;
    }
    return done;
}

/* After the meta page is read: drop stashed pages the tree cannot reach
 * (ids at or beyond page_count), so a later page_new of such an id cannot
 * find a stale image resident. */
void page_drop_beyond(ps_core *c, uint64_t page_count) {
    for (uint32_t s = 0; s < c->fresh; s++) {
        slot_t *sl = &c->slots[s];
        if (sl->used && sl->page_id >= page_count) {
            pt_remove(c, sl->page_id);
            slot_release(c, s);
        }
    }
}
