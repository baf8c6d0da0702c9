/* WAL encoder: appends records (docs/wal-format.md, version 1) straight into
 * the attached segment buffer at the LSN it reserves under the tree lock.
 *
 *   segment header (block 0): magic "PSWALSEG" @0, version u16 @8, 0 u16 @10,
 *     block size u32 @12, segment_size u64 @16, seq u64 @24,
 *     prev_end_lsn u64 @32, crc32c(0..40) u32 @40; rest of block 0 zero
 *   block header (every block >= 1): magic 0x4C575350 u32 @0, version u16 @4,
 *     first_record u16 @6, block_lsn u64 @8, 0 u32 @16, crc32c(0..20) u32 @20
 *   record: crc32c(bytes 4..len) u32 @0, len u32 @4, lsn u64 @8, type u8 @16,
 *     payload @17; block headers inside a record are skipped, not counted
 *
 * A record never spans segments: if it does not fit in the rest of the
 * segment, the next segment is fetched through ps_py_wal_segment and its
 * header names the end LSN of the last record before it (prev_end_lsn). */
#include "ps_internal.h"

#define BLK PS_WAL_BLOCK
#define BHDR PS_WAL_BLOCK_HDR

static void write_seg_header(ps_core *c, uint8_t *base, uint64_t seq, uint64_t prev_end) {
    memset(base, 0, BLK);
    memcpy(base, "PSWALSEG", 8);
    wr16(base + 8, 1);
    wr16(base + 10, 0);
    wr32(base + 12, BLK);
    wr64(base + 16, c->wal_seg_size);
    wr64(base + 24, seq);
    wr64(base + 32, prev_end);
    wr32(base + 40, ps_crc32c(0, base, 40));
}

/* Physical end offset of a record of `len` bytes starting at `off`, or 0 if
 * it does not fit in the segment. */
static uint64_t phys_end(const ps_core *c, uint64_t off, uint64_t len) {
    uint64_t pos = off, rem = len;
    if (pos % BLK == 0) pos += BHDR;
    uint64_t room = BLK - pos % BLK;
    if (rem <= room) {
        pos += rem;
    } else {
        rem -= room;
        pos += room;
        uint64_t per = BLK - BHDR, full = (rem - 1) / per;
        pos += full * BLK + BHDR + (rem - full * per);
    }
    return pos <= c->wal_seg_size ? pos : 0;
}

int wal_fits(const ps_core *c, uint64_t len) {
    return !c->wal_on || phys_end(c, c->wal_off, len) != 0;
}

static void write_block_header(ps_core *c) {
    uint8_t *b = c->wal_base + c->wal_off;
    uint16_t first;
    if (c->wal_rec_left == c->wal_rec_total) {
        first = BHDR;                      /* a record begins right here */
    } else {
        uint64_t end = BHDR + c->wal_rec_left;
        first = end < BLK ? (uint16_t)end : 0xFFFF;
    }
    wr32(b, 0x4C575350u);
    wr16(b + 4, 1);
    wr16(b + 6, first);
    wr64(b + 8, c->wal_seq * c->wal_seg_size + c->wal_off);
    wr32(b + 16, 0);
    wr32(b + 20, ps_crc32c(0, b, 20));
    c->wal_off += BHDR;
}

static void put_bytes(ps_core *c, const uint8_t *src, size_t n) {
    while (n) {
        if (c->wal_off % BLK == 0) write_block_header(c);
        size_t room = BLK - c->wal_off % BLK;
        size_t k = n < room ? n : room;
        memcpy(c->wal_base + c->wal_off, src, k);
        c->wal_off += k;
        src += k;
        n -= k;
        c->wal_rec_left -= k;
    }
}

/* Append one record; with the WAL disabled, succeed without writing.
 * On PS_E_WAL_FULL / PS_E_TOO_LARGE nothing has been written. */
int wal_append(ps_core *c, uint8_t type, const wpart *parts, int nparts,
               uint64_t *start_lsn, uint64_t *end_lsn) {
    if (!c->wal_on) {
        if (start_lsn) *start_lsn = 0;
        if (end_lsn) *end_lsn = 0;
        return 0;
    }
    uint64_t len = PS_WAL_REC_HDR;
    for (int i = 0; i < nparts; i++) len += parts[i].n;
    if (len > 0xFFFFFFFFull || phys_end(c, BLK, len) == 0) return PS_E_TOO_LARGE;
    if (phys_end(c, c->wal_off, len) == 0) {
        uint8_t *nb = NULL;
        uint64_t prev_end = c->wal_seq * c->wal_seg_size + c->wal_off;
        if (ps_py_wal_segment(c->handle, c->wal_seq + 1, &nb) != 0 || nb == NULL)
            return PS_E_WAL_FULL;
        c->wal_seq++;
        c->wal_base = nb;
        write_seg_header(c, nb, c->wal_seq, prev_end);
        c->wal_off = BLK;
    }
    uint64_t off = c->wal_off;
    if (off % BLK == 0) off += BHDR;
    uint64_t lsn = c->wal_seq * c->wal_seg_size + off;
    uint8_t hdr[PS_WAL_REC_HDR];
    wr32(hdr + 4, (uint32_t)len);
    wr64(hdr + 8, lsn);
    hdr[16] = type;
    uint32_t crc = ps_crc32c(0, hdr + 4, PS_WAL_REC_HDR - 4);
    for (int i = 0; i < nparts; i++) crc = ps_crc32c(crc, parts[i].p, parts[i].n);
    wr32(hdr, crc);
    c->wal_rec_total = c->wal_rec_left = len;
    put_bytes(c, hdr, PS_WAL_REC_HDR);
    for (int i = 0; i < nparts; i++) put_bytes(c, parts[i].p, parts[i].n);
    uint64_t end = c->wal_seq * c->wal_seg_size + c->wal_off;
    c->sig->wal_end_lsn = end;
    if (start_lsn) *start_lsn = lsn;
    if (end_lsn) *end_lsn = end;
    return 0;
}

int ps_wal_attach(ps_core *c, uint8_t *base, uint64_t seg_size, uint64_t seq,
                  uint64_t offset, uint64_t prev_end_lsn, int write_header) {
    if (!base || seg_size < (1u << 20) || seg_size % BLK || offset < BLK || offset > seg_size)
        return PS_E_ARG;
    pthread_rwlock_wrlock(&c->lock);
    c->wal_base = base;
    c->wal_seg_size = seg_size;
    c->wal_seq = seq;
    c->wal_off = offset;
    c->wal_on = 1;
    if (write_header) write_seg_header(c, base, seq, prev_end_lsn);
    c->sig->wal_end_lsn = seq * seg_size + offset;
    pthread_rwlock_unlock(&c->lock);
    return 0;
}

void ps_wal_disable(ps_core *c) {
    pthread_rwlock_wrlock(&c->lock);
    c->wal_on = 0;
    c->wal_base = NULL;
    pthread_rwlock_unlock(&c->lock);
}

/* Physical records of the legacy mode for every page the guarded operation
 * modified: PAGE_SNAPSHOT with the before-image if the page was clean before
 * (its first modification since the last checkpoint began), then PAGE_DELTA
 * with the changed byte ranges (ranges closer than MERGE_GAP are merged). */
#define MERGE_GAP 16
int wal_physical(ps_core *c) {
    if (!c->wal_on || !c->physical) return 0;
    uint32_t P = c->page_size;
    for (size_t i = 0; i < c->nundo; i++) {
        undo_t *u = &c->undo[i];
        const uint8_t *before = u->is_new ? c->zero_page : c->undo_img + u->img_off;
        const uint8_t *after = slot_page(c, u->slot);
        uint64_t pid = c->slots[u->slot].page_id;
        if (!u->prior_dirty) {
            uint8_t h[13];
            wr64(h, pid);
            h[8] = 0;
            wr32(h + 9, P);
            wpart parts[2] = {{h, 13}, {before, P}};
            int rc = wal_append(c, PS_REC_PAGE_SNAPSHOT, parts, 2, NULL, NULL);
            if (rc) return rc;
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
