/* Physical page records of the legacy mode (recovery_data="wal"):
 * PAGE_SNAPSHOT and PAGE_DELTA records (docs/wal-format.md, their payloads;
 * docs/recovery-data-modes.md, the rule below), appended through the
 * encoder's wal_append (walenc.c).
 *
 * Entry points (ps_internal.h; ps_api.h for ps_set_snapshot_codec):
 *   wal_physical(c)   REQUIRES: the tree lock held for writing, at the end of
 *       a guarded operation whose undo entries (c->undo) name the pages it
 *       modified.  Nothing to do unless the core is physical.
 *   wal_physical_unlogged(c)   REQUIRES: as wal_physical; the operation's
 *       pages changed without records.
 *   wal_page_snapshot(c, page_id, img)   REQUIRES: the tree lock held for
 *       writing; img a whole page (c->page_size bytes).
 *   ps_set_snapshot_codec(c, codec)   takes the tree lock.
 *
 * Rule: the pages of checkpoint N are rebuilt from the page records between
 * checkpoint N-1's CHECKPOINT record and N's (recovery/physical.py).  So
 * every page dirty at ckpt_begin N has, in that range, a PAGE_SNAPSHOT
 * followed by PAGE_DELTAs covering every later change:
 *   - a guarded operation logs, for each page it modified, the before-image
 *     as a PAGE_SNAPSHOT if the page has none since the last ckpt_begin
 *     (slot.snap), then a PAGE_DELTA of the ranges it changed;
 *   - a page changed without records (format_new before the WAL exists,
 *     replay, the meta fields written into page 0 by ckpt_begin, a rollback
 *     after page records were logged) has slot.snap cleared, and ckpt_begin
 *     logs its image (the checkpoint image) before the CHECKPOINT record.
 * Records logged by an earlier incarnation of page memory (a crashed
 * process, or operations that never committed before the crash) may sit in
 * the same range; the first page record of a core after wal_attach is
 * preceded by a reset record (PAGE_DELTA of page id PS_PAGE_RESET with no
 * range) after which the rebuild forgets every image it holds. */
#include "ps_internal.h"

int ps_set_snapshot_codec(ps_core *c, int codec) {
    if (codec != PS_CODEC_DISABLED && codec != PS_CODEC_SKIP_GARBAGE) return PS_E_ARG;
    core_wrlock(c);
    c->snap_codec = codec;
    pthread_rwlock_unlock(&c->lock);
    return 0;
}

/* The reset record (see above), once per wal_attach. */
static int wal_phys_reset(ps_core *c) {
    if (!c->phys_reset) return 0;
    uint8_t h[10];
    wr64(h, PS_PAGE_RESET);
    wr16(h + 8, 0);
    wpart parts[1] = {{h, 10}};
    int rc = wal_append(c, PS_REC_PAGE_DELTA, parts, 1, NULL, NULL);
    if (!rc) c->phys_reset = 0;
    return rc;
}

/* PAGE_SNAPSHOT of img: page_id u64, codec u8, len u32, image.  With
 * skip_garbage the free gap [free_lo, free_hi) is left out when the header
 * describes one and it is all zeros (always, docs/page-format.md); the
 * reader puts the zeros back, so the page CRC still holds. */
int wal_page_snapshot(ps_core *c, uint64_t page_id, const uint8_t *img) {
    int rc = wal_phys_reset(c);
    if (rc) return rc;
    uint32_t P = c->page_size;
    uint8_t h[13];
    wr64(h, page_id);
    wpart parts[3] = {{h, 13}, {img, P}, {NULL, 0}};
    int nparts = 2;
    h[8] = PS_CODEC_DISABLED;
    wr32(h + 9, P);
    if (c->snap_codec == PS_CODEC_SKIP_GARBAGE) {
        uint32_t lo = rd16(img + H_FREELO), hi = rd16(img + H_FREEHI);
        if (H_SIZE <= lo && lo < hi && hi <= P && memcmp(img + lo, c->zero_page, hi - lo) == 0) {
            h[8] = PS_CODEC_SKIP_GARBAGE | PS_SNAP_GAP_BIT;
            wr32(h + 9, P - (hi - lo));
            parts[1].n = lo;
            parts[2].p = img + hi;
            parts[2].n = P - hi;
            nparts = 3;
        }
    }
    return wal_append(c, PS_REC_PAGE_SNAPSHOT, parts, nparts, NULL, NULL);
}

/* The running operation changed its pages without logging them. */
void wal_physical_unlogged(ps_core *c) {
    for (size_t i = 0; i < c->nundo; i++) c->slots[c->undo[i].slot].snap = 0;
}

/* Page records for every page the guarded operation modified (see the rule
 * above); ranges of a delta closer than MERGE_GAP are merged. */
#define MERGE_GAP 16
int wal_physical(ps_core *c) {
    if (!c->physical) return 0;
    if (!c->wal_on) {
        wal_physical_unlogged(c);
        return 0;
    }
    uint32_t P = c->page_size;
    for (size_t i = 0; i < c->nundo; i++) {
        undo_t *u = &c->undo[i];
        slot_t *sl = &c->slots[u->slot];
        const uint8_t *before = u->is_new ? c->zero_page : c->undo_img + u->img_off;
        const uint8_t *after = slot_page(c, u->slot);
        uint64_t pid = sl->page_id;
        c->phys_logged = 1;
        if (!sl->snap) {
            int rc = wal_page_snapshot(c, pid, before);
            if (rc) return rc;
            sl->snap = 1;
        }
        /* delta body: nranges u16, then off u16, len u16, bytes; it is built
         * in a malloc'd buffer since the worst case exceeds a page */
        size_t cap = 2 + (size_t)P * 2;
        uint8_t *body = malloc(cap);
        if (!body) return PS_E_NOMEM;
        size_t bl = 2;
        uint16_t nr = 0;
        uint32_t x = 0;
        while (x < P) {
            if (before[x] == after[x]) { x++; continue; }
            uint32_t start = x, end = x + 1, y = x + 1;
            while (y < P) {
                if (before[y] != after[y]) { end = y + 1; y++; continue; }
                if (y - end >= MERGE_GAP) break;
                y++;
            }
            wr16(body + bl, (uint16_t)start);
            wr16(body + bl + 2, (uint16_t)(end - start));
            memcpy(body + bl + 4, after + start, end - start);
            bl += 4 + (end - start);
            nr++;
            x = end;
        }
        wr16(body, nr);
        uint8_t h[8];
        wr64(h, pid);
        wpart parts[2] = {{h, 8}, {body, bl}};
        int rc = nr ? wal_append(c, PS_REC_PAGE_DELTA, parts, 2, NULL, NULL) : 0;
        free(body);
        if (rc) return rc;
    }
    return 0;
}