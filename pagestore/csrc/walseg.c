/* WAL segment header: written when the encoder (walenc.c) switches to a
 * new segment or a segment is attached, checked when one is attached with
 * its header in place; and the WAL's key (sealed records) or reserved tags.
 *
 *   segment header (block 0): magic "PSWALSEG" @0, version u16 @8, flags u16 @10,
 *     block size u32 @12, segment_size u64 @16, seq u64 @24,
 *     prev_end_lsn u64 @32, crc32c(0..40) u32 @40; rest of block 0 zero
 *     flags: MARK_FLAG always, SEAL_FLAG when sealing
 *
 * Sealed records (a key set by ps_wal_set_key; segment flags SEAL_FLAG): the
 * header also holds key_id u8 @44, salt 8 @45 (fresh at every header
 * written) and a key-check tag 16 @53, the AES-256-GCM tag of nothing under
 * nonce salt || ff ff ff ff with AAD SEG_AAD || header[0..45).  The salt
 * seeds the nonces of the segment's records (walenc.c).
 *
 * Entry points (ps_internal.h; ps_api.h for the ps_ ones):
 *   write_seg_header(c, base, seq, prev_end, salt)   REQUIRES: the tree lock
 *       held for writing; base has a block; c->wal_seg_size is the segment's
 *       size; salt 8 bytes when a key is set (c->seal_ctx), else ignored.
 *   ps_wal_attach, ps_wal_set_key, ps_wal_reserve_tags, ps_wal_disable:
 *       take the tree lock; REQUIRES: as ps_api.h states (a key or reserved
 *       tags only while no WAL is attached). */
#include "ps_internal.h"

#define BLK PS_WAL_BLOCK
#define TAG PS_WAL_TAG
#define SEALING PS_WAL_SEALING
#define SEAL_FLAG 2
/* Block headers carry the written mark: a process killed mid-append leaves
 * no header whose mark passes the record it was writing, so the reader can
 * tell that torn tail from damage to a complete record (docs/wal-format.md). */
#define MARK_FLAG 4
#define ENCODING(flags) ((flags) & 3)   /* the flag bits that say how records are stored */
#define SEG_AAD "pagestore/walseg/v2" /* with its NUL: 20 bytes */
#define SEG_SEAL_END 45
/* seal_buf's size from ps_wal_set_key on: more than any record of the
 * unguarded fast paths (an inline cell is smaller than a page), see wal_fits */
#define SEAL_BUF_MIN (64u << 10)

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
int write_seg_header(ps_core *c, uint8_t *base, uint64_t seq, uint64_t prev_end,
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
