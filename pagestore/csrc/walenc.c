/* WAL encoder: appends records (docs/wal-format.md, version 1) straight into
 * the attached segment buffer at the LSN it reserves under the tree lock.
 *
 *   segment header (block 0): magic "PSWALSEG" @0, version u16 @8, flags u16 @10,
 *     block size u32 @12, segment_size u64 @16, seq u64 @24,
 *     prev_end_lsn u64 @32, crc32c(0..40) u32 @40; rest of block 0 zero
 *     flags: MARK_FLAG always, SEAL_FLAG when sealing
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
 * ps_py_wal_segment and its header names the end LSN of the last record
 * before it (prev_end_lsn).
 *
 * Sealed records (a key set by ps_wal_set_key; segment flags SEAL_FLAG): the
 * header also holds key_id u8 @44, salt 8 @45 (fresh at every header
 * written) and a key-check tag 16 @53, the AES-256-GCM tag of nothing under
 * nonce salt || ff ff ff ff with AAD SEG_AAD || header[0..45).  A record's
 * payload is AES-256-GCM ciphertext followed by its 16-byte tag (len counts
 * it); nonce salt || u32 offset of the record in its segment, AAD the record
 * bytes 4..17; the crc covers the ciphertext and tag. */
#include <sys/mman.h>

#include "ps_internal.h"

#define BLK PS_WAL_BLOCK
#define BHDR PS_WAL_BLOCK_HDR
#define SEAL_FLAG 2
/* Block headers carry the written mark: a process killed mid-append leaves
 * no header whose mark passes the record it was writing, so the reader can
 * tell that torn tail from damage to a complete record (docs/wal-format.md). */
#define MARK_FLAG 4
#define REC_END 8                       /* the END trailer's record type */
#define ENCODING(flags) ((flags) & 3)   /* the flag bits that say how records are stored */
#define TAG 16
#define SEG_AAD "pagestore/walseg/v2" /* with its NUL: 20 bytes */
#define SEG_SEAL_END 45
/* seal_buf's size from ps_wal_set_key on: more than any record of the
 * unguarded fast paths (an inline cell is smaller than a page), see wal_fits */
#define SEAL_BUF_MIN (64u << 10)
/* Records are laid out sealed: by this encoder (seal_ctx), or, with tags
 * reserved (ps_wal_reserve_tags: a key id and no context), by the caller,
 * who seals each record in place before its bytes leave the process. */
#define SEALING(c) ((c)->seal_ctx != NULL || (c)->seal_key_id != 0)
static const uint8_t ZERO_TAG[TAG];

/* The key-check tag of a sealed header whose bytes [0, 45) are in place. */
static int seg_check_tag(ps_core *c, const uint8_t *base, const uint8_t *salt, uint8_t tag[TAG]) {
    uint8_t iv[12], aad[sizeof SEG_AAD + SEG_SEAL_END];
    memcpy(iv, salt, 8);
    memset(iv + 8, 0xFF, 4);
    memcpy(aad, SEG_AAD, sizeof SEG_AAD);
    memcpy(aad + sizeof SEG_AAD, base, SEG_SEAL_END);
    return seal_gcm(c->seal_ctx, iv, aad, sizeof aad, NULL, 0, NULL, tag);
}

/* salt: the new segment's (sealing on), drawn before anything is written */
static int write_seg_header(ps_core *c, uint8_t *base, uint64_t seq, uint64_t prev_end,
                            const uint8_t *salt) {
    memset(base, 0, BLK);
    memcpy(base, "PSWALSEG", 8);
    wr16(base + 8, 1);
    wr16(base + 10, (SEALING(c) ? SEAL_FLAG : 0) | MARK_FLAG);
    wr32(base + 12, BLK);
    wr64(base + 16, c->wal_seg_size);
    wr64(base + 24, seq);
    wr64(base + 32, prev_end);
    wr32(base + 40, ps_crc32c(0, base, 40));
    if (!SEALING(c)) return 0;
    base[44] = c->seal_key_id;
    if (!c->seal_ctx) return 0;            /* tags reserved: salt and key check are the caller's */
    memcpy(base + 45, salt, 8);
    memcpy(c->seal_salt, salt, 8);
    if (seg_check_tag(c, base, salt, base + SEG_SEAL_END + 8))
        return set_err(c, PS_E_IO, "AES-GCM failed on the WAL segment header");
    return 0;
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

/* Sealing on: the header written (write_header) or found at base must be a
 * sealed one of this key; its salt seeds the records' nonces. */
static int attach_seal(ps_core *c, uint8_t *base, uint64_t seg_size, uint64_t seq,
                       uint64_t prev_end_lsn, int write_header) {
    if (!c->seal_ctx && c->seal_key_id) {
        /* tags reserved: the header is ours (write_header) or one the caller sealed */
        if (write_header) return write_seg_header(c, base, seq, prev_end_lsn, NULL);
        if (memcmp(base, "PSWALSEG", 8) != 0 || ENCODING(rd16(base + 10)) != SEAL_FLAG ||
            base[44] != c->seal_key_id)
            return set_err(c, PS_E_ARG, "WAL segment %llu is not a sealed-records segment of key id %u",
                           (unsigned long long)seq, c->seal_key_id);
        return 0;
    }
    if (!c->seal_ctx) {
        /* plain records must not land in a sealed segment */
        if (!write_header && memcmp(base, "PSWALSEG", 8) == 0 && ENCODING(rd16(base + 10)) == SEAL_FLAG)
            return set_err(c, PS_E_ARG, "WAL segment %llu is sealed but no key is set",
                           (unsigned long long)seq);
        return write_header ? write_seg_header(c, base, seq, prev_end_lsn, NULL) : 0;
    }
    if (seg_size > 0xFFFFFFFFull)
        return set_err(c, PS_E_ARG, "sealed WAL records need segment_size <= 4 GiB - 1");
    if (write_header) {
        uint8_t salt[8];
        if (seal_random(salt, 8))
            return set_err(c, PS_E_IO, "getrandom failed: no salt for a sealed WAL segment");
        return write_seg_header(c, base, seq, prev_end_lsn, salt);
    }
    uint8_t tag[TAG];
    if (memcmp(base, "PSWALSEG", 8) != 0 || ENCODING(rd16(base + 10)) != SEAL_FLAG)
        return set_err(c, PS_E_ARG, "WAL segment %llu is not a sealed-records segment",
                       (unsigned long long)seq);
    if (base[44] != c->seal_key_id)
        return set_err(c, PS_E_ARG, "WAL segment %llu is sealed with key id %u, not %u",
                       (unsigned long long)seq, base[44], c->seal_key_id);
    if (seg_check_tag(c, base, base + 45, tag) || memcmp(tag, base + SEG_SEAL_END + 8, TAG))
        return set_err(c, PS_E_ARG, "WAL segment %llu: key check failed (wrong key)",
                       (unsigned long long)seq);
    memcpy(c->seal_salt, base + 45, 8);
    return 0;
}

int ps_wal_attach(ps_core *c, uint8_t *base, uint64_t seg_size, uint64_t seq,
                  uint64_t offset, uint64_t prev_end_lsn, int write_header) {
    if (!base || seg_size < (1u << 20) || seg_size % BLK || offset < BLK || offset > seg_size)
        return PS_E_ARG;
    core_wrlock(c);
    uint64_t old_size = c->wal_seg_size;
    c->wal_seg_size = seg_size;            /* write_seg_header reads it */
    int rc = attach_seal(c, base, seg_size, seq, prev_end_lsn, write_header);
    if (rc) {
        c->wal_seg_size = old_size;        /* a WAL attached before stays as it was */
    } else {
        c->wal_base = base;
        c->wal_seq = seq;
        c->wal_off = offset;
        c->wal_unmapped = 0;
        c->wal_alloc_end = offset;         /* what lies before is written; ask for the rest */
        c->wal_on = 1;
        c->phys_reset = c->physical;
        c->sig.wal_end_lsn = seq * seg_size + offset;
    }
    pthread_rwlock_unlock(&c->lock);
    return rc;
}

int ps_wal_set_key(ps_core *c, const uint8_t *key, uint32_t key_len, uint32_t key_id) {
    if (key_id > 255 || (key_id && key_len != 32))
        return set_err(c, PS_E_ARG, "WAL key: 32 bytes and key id 1..255 (0: no key)");
    if (key_id && !ps_wal_seal_available())
        return set_err(c, PS_E_ARG, "WAL sealing needs libcrypto, which could not be loaded");
    core_wrlock(c);
    int rc = 0;
    void *ctx = NULL;
    if (c->wal_on) {
        /* the attached segment's header decides whether its records are sealed */
        rc = set_err(c, PS_E_ARG, "WAL key: set it before wal_attach (wal_disable first)");
    } else if (key_id) {
        ctx = seal_ctx_new(key);
        if (!ctx) {
            rc = set_err(c, PS_E_NOMEM, "cannot create the AES-GCM context");
        } else if (c->seal_cap < SEAL_BUF_MIN) {
            uint8_t *buf = realloc(c->seal_buf, SEAL_BUF_MIN);
            if (buf) {
                c->seal_buf = buf;
                c->seal_cap = SEAL_BUF_MIN;
            } else {
                seal_ctx_free(ctx);
                rc = PS_E_NOMEM;
            }
        }
    }
    if (!rc) {
        seal_ctx_free(c->seal_ctx);
        c->seal_ctx = ctx;
        c->seal_key_id = (uint8_t)key_id;
        if (!ctx) {
            free(c->seal_buf);
            c->seal_buf = NULL;
            c->seal_cap = 0;
        }
    }
    pthread_rwlock_unlock(&c->lock);
    return rc;
}

int ps_wal_reserve_tags(ps_core *c, uint32_t key_id) {
    if (key_id > 255) return set_err(c, PS_E_ARG, "WAL key id: 1..255 (0: no tags reserved)");
    core_wrlock(c);
    int rc = 0;
    if (c->wal_on || c->seal_ctx)
        rc = set_err(c, PS_E_ARG, "WAL tags: reserve them before wal_attach, with no key set");
    else
        c->seal_key_id = (uint8_t)key_id;
    pthread_rwlock_unlock(&c->lock);
    return rc;
}

void ps_wal_disable(ps_core *c) {
    core_wrlock(c);
    c->wal_on = 0;
    c->wal_base = NULL;
    pthread_rwlock_unlock(&c->lock);
}

int ps_set_snapshot_codec(ps_core *c, int codec) {
    if (codec != PS_CODEC_DISABLED && codec != PS_CODEC_SKIP_GARBAGE) return PS_E_ARG;
    core_wrlock(c);
    c->snap_codec = codec;
    pthread_rwlock_unlock(&c->lock);
    return 0;
}

/* ---- physical records of the legacy mode (recovery_data="wal") ------------
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

/* ---- scanner: the valid prefix of simple records (replay's fast path) ----
 *
 * ps_wal_scan reads one segment buffer from offset `off` (where the Python
 * reader would read next) and copies records while each one is valid by the
 * validity rule of docs/wal-format.md (every block header it touches has the
 * magic, version, crc and block_lsn of its place; 17 <= length; it fits in
 * the segment; its lsn field equals its LSN; its crc32c matches; its payload
 * has the shape of its type) AND is simple:
 *   - a PUT or DELETE with txid 0, or
 *   - a whole transaction written in one piece: PUT/DELETE records of one
 *     txid T != 0 followed at once by COMMIT(T) whose nops equals their
 *     number (put_many, Transaction: ps_apply_batch logs them under the tree
 *     lock, so they are adjacent).  Its operations are copied, its COMMIT is
 *     consumed; `committed_raw` would apply them at that COMMIT, the same
 *     place.  A transaction broken by any other record, cut by the end of
 *     the valid log, or whose nops differs (part of it was read before) is
 *     left to the Python reader from its first record.
 * Block headers are removed, so `out` holds the contiguous raw PUT/DELETE
 * records that ps_apply_log takes.  It stops before the first record that is
 * invalid, not simple, or does not fit in `cap`, and never decides anything
 * else: the Python reader (wal/reader.py) reads on from *end_off and remains
 * the authority on where the log stops.  Returns the number of records
 * consumed (a transaction's COMMIT included); *out_len may be 0 for
 * transactions with no operation.  *tx_too_big says it stopped at `off`
 * because a record, or a transaction valid so far, outgrew `cap` (worth a
 * call with a bigger buffer).
 *
 * ps_wal_scan with a key reads a record-sealed segment (SEAL_FLAG;
 * its header's key check is the caller's: wal/recseal.py record_opener).
 * Each record is checked as above on its stored bytes (crc over ciphertext
 * and tag), must be at least 17 + 16 bytes, and its tag must authenticate
 * (nonce salt || u32 offset, AAD stored bytes 4..17); it is copied in
 * plaintext form (len - 16, crc recomputed), and the shape, transaction and
 * cap rules apply to that form.  The same records wal/reader.py read_record
 * accepts with the opener, and the same bytes it returns. */

/* a sealed scan's key and salt; its decrypting context is the call's own,
 * made at the first record that needs it */
typedef struct {
    const uint8_t *key, *salt;
    void *ctx;
} scan_key;

static int scan_block_ok(const uint8_t *seg, uint64_t b, uint64_t base) {
    const uint8_t *h = seg + b;
    return rd32(h) == 0x4C575350u && rd16(h + 4) == 1 && rd64(h + 8) == base + b &&
           rd32(h + 20) == ps_crc32c(0, h, 20);
}

/* the segment offset just past `len` record bytes from `off` (in a record area) */
static uint64_t scan_phys_end(uint64_t off, uint64_t len) {
    uint64_t room = BLK - off % BLK;
    if (len <= room) return off + len;
    uint64_t rest = len - room, per = BLK - BHDR;
    uint64_t blocks = (rest + per - 1) / per;
    return (off / BLK + blocks) * BLK + BHDR + rest - (blocks - 1) * per;
}

/* n record bytes from off into dst, checking each block header entered
 * (*ok caches the last block found valid); 0 on a bad block header */
static int scan_gather(const uint8_t *seg, uint64_t base, uint64_t off, uint64_t n,
                       uint8_t *dst, uint64_t *ok) {
    while (n) {
        uint64_t b = off - off % BLK;
        if (off == b) {
            if (b != *ok) {
                if (!scan_block_ok(seg, b, base)) return 0;
                *ok = b;
            }
            off += BHDR;
        }
        uint64_t take = b + BLK - off;
        if (take > n) take = n;
        memcpy(dst, seg + off, take);
        dst += take;
        off += take;
        n -= take;
    }
    return 1;
}

/* One valid PUT / DELETE / COMMIT record at segment offset *pos, copied to
 * dst (at most room bytes); its type, and *pos advanced past it.  0 when the
 * next record is invalid or of another type, -1 when it does not fit. */
static int scan_one(const uint8_t *seg, uint64_t seg_size, uint64_t base, uint64_t *pos,
                    uint8_t *dst, size_t room, uint64_t *ok, uint32_t *len_out, scan_key *sk) {
    uint64_t o = *pos;
    if (o < BLK + BHDR) o = BLK + BHDR;
    else if (o % BLK == 0) o += BHDR;
    if (o >= seg_size || o % BLK < BHDR) return 0;
    uint64_t b = o - o % BLK;
    if (b != *ok) {
        if (!scan_block_ok(seg, b, base)) return 0;
        *ok = b;
    }
    uint8_t hdr[PS_WAL_REC_HDR];
    if (scan_phys_end(o, PS_WAL_REC_HDR) > seg_size) return 0;
    if (!scan_gather(seg, base, o, PS_WAL_REC_HDR, hdr, ok)) return 0;
    uint32_t crc = rd32(hdr), len = rd32(hdr + 4);
    uint8_t type = hdr[16];
    if (rd64(hdr + 8) != base + o || len < PS_WAL_REC_HDR) return 0;
    if (type != PS_REC_PUT && type != PS_REC_DELETE && type != PS_REC_COMMIT) return 0;
    if (sk && len < PS_WAL_REC_HDR + TAG) return 0;
    uint64_t end = scan_phys_end(o, len);
    if (end > seg_size) return 0;
    if (!sk) {
        if (len > room) return -1;
        if (!scan_gather(seg, base, o, len, dst, ok)) return 0;
        if (ps_crc32c(0, dst + 4, len - 4) != crc) return 0;
    } else {
        /* the record but its tag into dst, the tag aside; crc over both as stored */
        uint32_t plen = len - TAG;
        uint8_t tag[TAG], iv[12];
        if (plen > room) return -1;
        if (!scan_gather(seg, base, o, plen, dst, ok) ||
            !scan_gather(seg, base, scan_phys_end(o, plen), TAG, tag, ok))
            return 0;
        if (ps_crc32c(ps_crc32c(0, dst + 4, plen - 4), tag, TAG) != crc) return 0;
        if (!sk->ctx && !(sk->ctx = open_ctx_new(sk->key))) return 0;
        memcpy(iv, sk->salt, 8);
        wr32(iv + 8, (uint32_t)o);
        /* AAD: the stored len, lsn, type, still in dst */
        if (open_gcm(sk->ctx, iv, dst + 4, PS_WAL_REC_HDR - 4, dst + PS_WAL_REC_HDR,
                     plen - PS_WAL_REC_HDR, tag) != 1)
            return 0;
        len = plen;
        wr32(dst + 4, len);
        wr32(dst, ps_crc32c(0, dst + 4, len - 4));
    }
    if (type == PS_REC_PUT) {
        if (len < 33 || 33 + (uint64_t)rd32(dst + 25) + rd32(dst + 29) != len) return 0;
    } else if (type == PS_REC_DELETE) {
        if (len < 29 || 29 + (uint64_t)rd32(dst + 25) != len) return 0;
    } else if (len != 29) {
        return 0;
    }
    *pos = end;
    *len_out = len;
    return type;
}

static int64_t scan_run(const uint8_t *seg, uint64_t seg_size, uint64_t base_lsn, uint64_t off,
                        uint8_t *out, size_t cap, size_t *out_len, uint64_t *end_off,
                        int *tx_too_big, scan_key *sk) {
    size_t used = 0;
    *tx_too_big = 0;
    int64_t n = 0;
    uint64_t ok = UINT64_MAX;
    uint8_t commit[29];
    *out_len = 0;
    *end_off = off;
    if (seg_size % BLK || seg_size < 2 * BLK) return PS_E_ARG;
    for (;;) {
        uint64_t pos = *end_off;
        uint32_t len;
        int type = scan_one(seg, seg_size, base_lsn, &pos, out + used, cap - used, &ok, &len, sk);
        if (type == -1 && used == 0) *tx_too_big = 1;
        if (type != PS_REC_PUT && type != PS_REC_DELETE) break;
        uint64_t txid = rd64(out + used + 17);
        if (txid == 0) {                        /* a simple record */
            used += len;
            n++;
            *end_off = pos;
            continue;
        }
        /* a transaction: its adjacent records up to COMMIT(txid), or nothing */
        size_t gused = used + len;
        uint64_t nops = 1;
        for (;;) {
            uint32_t l;
            uint8_t *dst = out + gused;
            type = scan_one(seg, seg_size, base_lsn, &pos, dst, cap - gused, &ok, &l, sk);
            if (type == PS_REC_COMMIT) {
                /* scan_one copied it into out; keep it aside, it is not applied */
                memcpy(commit, dst, sizeof commit);
                break;
            }
            if ((type != PS_REC_PUT && type != PS_REC_DELETE) || rd64(dst + 17) != txid) {
                /* out of room: only worth a bigger buffer if it starts the call */
                if (type == -1 && used == 0) *tx_too_big = 1;
                type = 0;
                break;
            }
            gused += l;
            nops++;
        }
        if (type != PS_REC_COMMIT || rd64(commit + 17) != txid || rd32(commit + 25) != nops)
            break;
        used = gused;
        n += (int64_t)nops + 1;
        *end_off = pos;
    }
    *out_len = used;
    return n;
}

int64_t ps_wal_scan(const uint8_t *seg, uint64_t seg_size, uint64_t base_lsn, uint64_t off,
                    uint8_t *out, size_t cap, size_t *out_len, uint64_t *end_off,
                    int *tx_too_big, const uint8_t *key, const uint8_t *salt) {
    if (key && (!salt || seg_size > 0xFFFFFFFFull || !ps_wal_seal_available())) {
        *out_len = 0;
        *end_off = off;
        *tx_too_big = 0;
        return PS_E_ARG;
    }
    scan_key sk = {key, salt, NULL};
    int64_t n = scan_run(seg, seg_size, base_lsn, off, out, cap, out_len, end_off, tx_too_big,
                         key ? &sk : NULL);
    seal_ctx_free(sk.ctx);
    return n;
}
