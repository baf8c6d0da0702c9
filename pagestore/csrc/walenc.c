/* WAL record encoder: appends records (docs/wal-format.md, version 1)
 * straight into the attached segment buffer at the LSN it reserves under the
 * tree lock, block headers and the END trailer included, and switches to the
 * next segment when a record does not fit.  The segment header and attaching
 * a segment are walseg.c's; the legacy mode's page records physrec.c's;
 * replay's scanner walscan.c's.
 *
 *   block header (every block >= 1): magic 0x4C575350 u32 @0, version u16 @4,
 *     first_record u16 @6, block_lsn u64 @8, mark u32 @16, crc32c(0..20) u32 @20
 *     mark = block_lsn - W (saturating at 0xFFFFFFFF = unknown), W = the end
 *     of the last complete record when the header is written (sig.wal_end_lsn)
 *   record: crc32c(bytes 4..len) u32 @0, len u32 @4, lsn u64 @8, type u8 @16,
 *     payload @17; block headers inside a record are skipped, not counted
 *   END trailer: a record header alone (len 17, type 8, never sealed), written
 *     after every record at its end E as a record there would be laid out
 *     (a block header first if E starts a block, across the next one if it
 *     does not fit in E's block); the next record overwrites it.  A whole END
 *     proves every record before it complete: the reader reports damage to
 *     the log's last record instead of taking it for a torn tail.
 *
 * A record never spans segments: if it and the END after it do not fit in
 * the rest of the segment, the next segment is fetched through
 * ps_py_wal_segment and its header (walseg.c) names the end LSN of the last
 * record before it (prev_end_lsn).
 *
 * Sealed records (a key set by ps_wal_set_key; segment flags SEAL_FLAG, see
 * walseg.c): a record's payload is AES-256-GCM ciphertext followed by its
 * 16-byte tag (len counts it); nonce salt || u32 offset of the record in its
 * segment, AAD the record bytes 4..17; the crc covers the ciphertext and tag.
 *
 * Entry points (ps_internal.h; ps_api.h / ps_test.h for the ps_ ones):
 *   wal_fits(c, len)   REQUIRES: the tree lock held.  1 when a record of
 *       plaintext length len (header included) fits in the attached segment
 *       without a new segment, more disk blocks or a bigger seal buffer.
 *   wal_append(c, type, parts, nparts, start, end)   REQUIRES: the tree lock
 *       held for writing; parts readable for the call.  CALLS
 *       ps_py_wal_segment, ps_py_wal_grow.  Nothing written on failure.
 *   ps_wal_end_image(end_lsn, out)   REQUIRES: out has PS_WAL_END_MAX bytes.
 *   ps_wal_set_unmap(c, on)   takes the tree lock; REQUIRES: on only for
 *       MAP_SHARED segment buffers. */
#include <sys/mman.h>

#include "ps_internal.h"

#define BLK PS_WAL_BLOCK
#define BHDR PS_WAL_BLOCK_HDR
#define TAG PS_WAL_TAG
#define SEALING PS_WAL_SEALING
#define REC_END 8                       /* the END trailer's record type */
static const uint8_t ZERO_TAG[TAG];

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

/* Physical end offset of a record of `len` bytes at `off` and the END after
 * it, or 0 if they do not fit in the segment. */
static uint64_t end_with_trailer(const ps_core *c, uint64_t off, uint64_t len) {
    uint64_t e = phys_end(c, off, len);
    return e ? phys_end(c, e, PS_WAL_REC_HDR) : 0;
}

/* len: the plaintext record length.  Sealing, it also requires room for the
 * ciphertext in seal_buf, so that the unguarded fast paths (btree.c), which
 * rely on this, never meet an allocation failure in wal_append. */
int wal_fits(const ps_core *c, uint64_t len) {
    if (!c->wal_on) return 1;
    if (c->seal_ctx && len - PS_WAL_REC_HDR > c->seal_cap) return 0;
    uint64_t end = end_with_trailer(c, c->wal_off, len + (SEALING(c) ? TAG : 0));
    return end != 0 && end <= c->wal_alloc_end;
}
/* A block header at b for the block at `blsn` whose first record begins at
 * `first`, with written mark w. */
static void block_header_at(uint8_t *b, uint16_t first, uint64_t blsn, uint64_t w) {
    /* a mark past the block would claim records not yet written: claim the block's start */
    uint64_t back = w <= blsn ? blsn - w : 0;
    wr32(b, 0x4C575350u);
    wr16(b + 4, 1);
    wr16(b + 6, first);
    wr64(b + 8, blsn);
    wr32(b + 16, back < 0xFFFFFFFFu ? (uint32_t)back : 0xFFFFFFFFu);
    wr32(b + 20, ps_crc32c(0, b, 20));
}

static void write_block_header(ps_core *c) {
    uint16_t first;
    if (c->wal_rec_left == c->wal_rec_total) {
        first = BHDR;                      /* a record begins right here */
    } else {
        uint64_t end = BHDR + c->wal_rec_left;
        first = end < BLK ? (uint16_t)end : 0xFFFF;
    }
    block_header_at(c->wal_base + c->wal_off, first, c->wal_seq * c->wal_seg_size + c->wal_off,
                    c->sig.wal_end_lsn);
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

size_t ps_wal_end_image(uint64_t end_lsn, uint8_t *out) {
    uint64_t lsn = end_lsn;
    size_t n = 0;
    if (lsn % BLK == 0) {                  /* the next record's block: its header first */
        block_header_at(out, BHDR, lsn, end_lsn);
        lsn += BHDR;
        n = BHDR;
    }
    uint8_t e[PS_WAL_REC_HDR];
    wr32(e + 4, PS_WAL_REC_HDR);
    wr64(e + 8, lsn);
    e[16] = REC_END;
    wr32(e, ps_crc32c(0, e + 4, PS_WAL_REC_HDR - 4));
    size_t room = BLK - lsn % BLK;
    if (room >= PS_WAL_REC_HDR) {
        memcpy(out + n, e, PS_WAL_REC_HDR);
        return n + PS_WAL_REC_HDR;
    }
    /* across the next block header, as a record of 17 bytes would run */
    memcpy(out + n, e, room);
    block_header_at(out + n + room, (uint16_t)(BHDR + PS_WAL_REC_HDR - room), lsn + room, end_lsn);
    memcpy(out + n + room + BHDR, e + room, PS_WAL_REC_HDR - room);
    return n + room + BHDR + PS_WAL_REC_HDR - room;
}

/* The END trailer at the write position, which stays where it is: the next
 * record begins there.  wal_fits kept room for it in the segment. */
static void write_end(ps_core *c) {
    ps_wal_end_image(c->wal_seq * c->wal_seg_size + c->wal_off, c->wal_base + c->wal_off);
}

/* Unmap what the encoder has written of the attached segment, up to `upto`
 * (rounded down to UNMAP_STEP unless it is the segment's end).  A shared file
 * mapping keeps every page the writer touched mapped until the segment is
 * released; each fdatasync of the WAL (the checkpoint's, the fsync mode's,
 * the kernel's writeback) then write-protects every mapped dirty page with a
 * TLB shoot-down IPI to the other core, where the writer runs: ~8,000 IPIs
 * for 30 MB of log, each stalling the writer, ~90% of the checkpoint
 * thread's time in the WAL flush, and the writer's p99 put latency during a
 * checkpoint went to ~70 us.  The data stays in the page cache (zapping a
 * dirty shared PTE dirties the page), so a later read just faults it back. */
#define UNMAP_STEP (1u << 20)
static void wal_unmap_upto(ps_core *c, uint64_t upto, int to_end) {
    if (!to_end) upto -= upto % UNMAP_STEP;
    if (upto <= c->wal_unmapped) return;
    /* best effort: a failure only leaves the pages mapped */
    (void)madvise(c->wal_base + c->wal_unmapped, upto - c->wal_unmapped, MADV_DONTNEED);
    c->wal_unmapped = upto;
}

void ps_wal_set_unmap(ps_core *c, int on) {
    core_wrlock(c);
    c->wal_unmap = on != 0;
    pthread_rwlock_unlock(&c->lock);
}

/* Append one record; with the WAL disabled, succeed without writing.
 * On PS_E_WAL_FULL / PS_E_TOO_LARGE / PS_E_NOMEM nothing has been written. */
int wal_append(ps_core *c, uint8_t type, const wpart *parts, int nparts,
               uint64_t *start_lsn, uint64_t *end_lsn) {
    if (!c->wal_on) {
        if (start_lsn) *start_lsn = 0;
        if (end_lsn) *end_lsn = 0;
        return 0;
    }
    uint64_t plen = 0;
    for (int i = 0; i < nparts; i++) plen += parts[i].n;
    uint64_t len = PS_WAL_REC_HDR + plen + (SEALING(c) ? TAG : 0);
    if (len > 0xFFFFFFFFull || end_with_trailer(c, BLK, len) == 0) return PS_E_TOO_LARGE;
    if (c->seal_ctx && plen > c->seal_cap) {
        uint8_t *nb = realloc(c->seal_buf, plen);
        if (!nb) return PS_E_NOMEM;
        c->seal_buf = nb;
        c->seal_cap = plen;
    }
    if (end_with_trailer(c, c->wal_off, len) == 0) {
        uint8_t *nb = NULL, salt[8];
        if (c->seal_ctx && seal_random(salt, 8))
            return set_err(c, PS_E_IO, "getrandom failed: no salt for a sealed WAL segment");
        uint64_t prev_end = c->wal_seq * c->wal_seg_size + c->wal_off;
        if (ps_py_wal_segment(c->handle, c->wal_seq + 1, &nb) != 0 || nb == NULL)
            return PS_E_WAL_FULL;
        if (c->wal_unmap) wal_unmap_upto(c, c->wal_seg_size, 1);
        c->wal_unmapped = 0;
        c->wal_alloc_end = BLK;            /* its header block is allocated; ask for the rest */
        c->wal_seq++;
        c->wal_base = nb;
        c->wal_off = BLK;
        int rc = write_seg_header(c, nb, c->wal_seq, prev_end, salt);
        if (rc) return rc;
    }
    /* A sparse segment mapped shared: a write to a page without disk blocks
     * makes the kernel allocate one, and on a full disk it sends SIGBUS.  So
     * no record passes the allocated end until the WAL has allocated further
     * (or refused, with nothing written). */
    uint64_t need = end_with_trailer(c, c->wal_off, len);
    if (need > c->wal_alloc_end) {
        uint64_t got = 0;
        if (ps_py_wal_grow(c->handle, c->wal_seq, need, &got) != 0 || got < need)
            return PS_E_WAL_FULL;
        c->wal_alloc_end = got;
    }
    uint64_t off = c->wal_off;
    if (off % BLK == 0) off += BHDR;
    uint64_t lsn = c->wal_seq * c->wal_seg_size + off;
    uint8_t hdr[PS_WAL_REC_HDR], tag[TAG];
    wr32(hdr + 4, (uint32_t)len);
    wr64(hdr + 8, lsn);
    hdr[16] = type;
    uint32_t crc = ps_crc32c(0, hdr + 4, PS_WAL_REC_HDR - 4);
    wpart sealed[1] = {{c->seal_buf, plen}};
    if (c->seal_ctx) {
        /* offsets fit in u32: ps_wal_attach refuses sealing larger segments */
        uint8_t iv[12];
        memcpy(iv, c->seal_salt, 8);
        wr32(iv + 8, (uint32_t)off);
        if (seal_gcm(c->seal_ctx, iv, hdr + 4, PS_WAL_REC_HDR - 4, parts, nparts,
                     c->seal_buf, tag))
            return set_err(c, PS_E_IO, "AES-GCM failed on a WAL record");
        parts = sealed;
        nparts = 1;
    }
    for (int i = 0; i < nparts; i++) crc = ps_crc32c(crc, parts[i].p, parts[i].n);
    if (c->seal_ctx) crc = ps_crc32c(crc, tag, TAG);
    wr32(hdr, crc);
    c->wal_rec_total = c->wal_rec_left = len;
    put_bytes(c, hdr, PS_WAL_REC_HDR);
    for (int i = 0; i < nparts; i++) put_bytes(c, parts[i].p, parts[i].n);
    if (SEALING(c)) put_bytes(c, c->seal_ctx ? tag : ZERO_TAG, TAG);
    uint64_t end = c->wal_seq * c->wal_seg_size + c->wal_off;
    c->sig.wal_end_lsn = end;
    write_end(c);
    if (c->wal_unmap && c->wal_off - c->wal_unmapped >= 2 * UNMAP_STEP) wal_unmap_upto(c, c->wal_off, 0);
    if (start_lsn) *start_lsn = lsn;
    if (end_lsn) *end_lsn = end;
    return 0;
}
