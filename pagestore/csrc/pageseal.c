/* AES-256-GCM over page images and recovery-file records in bulk: the two
 * formats of pagestore/cipher.py (sealed page) and checkpoint/format.py
 * (ENCRYPTED record), one call per chunk of a checkpoint's writer thread.
 *
 * Why here and not in cipher.py: sealing a page in Python (cryptography's
 * AESGCM) holds the GIL for the bytes objects around each 4 KiB encryption,
 * so a checkpoint's writer threads took turns; an encrypted checkpoint of
 * ~8,700 pages cost 287 ms against 78 ms plain.  cffi drops the GIL around
 * these calls, the threads overlap, and each page costs one EVP pass (AES-NI
 * here).  cipher.py stays the reference: tests open what these seal with it.
 *
 * Sealed page (P = page size, U = P - 32): ciphertext of [0, U) | key_id |
 * 3 zero bytes | 12-byte nonce | 16-byte tag; associated data = the caller's
 * prefix ("pagestore/page/v1\0" | u16 len | page context) | u64 page id |
 * the 4 trailer bytes at U.  The plain page's [U, P) must be zero.
 *
 * Sealed record: header (u64 page id, u8 codec, u8 flags | ENCRYPTED, u32
 * length n + 29, u32 crc32c of header bytes 0..14 then the payload) and the
 * payload key_id | nonce | ciphertext | tag; associated data =
 * "pagestore/record/v1\0" | key_id | "PSRECOVR" | u64 checkpoint | u16 writer
 * | u64 file offset of the record | u64 page id | u8 codec | u8 flags.
 *
 * Nonces are 96 random bits (getrandom), never derived: see cipher.py.
 *
 * ps_open_pages opens sealed pages in place (the replay's preload of an
 * encrypted store), page_open one page of a miss or a scan's readahead with
 * the keys ps_set_page_key gave the core; what does not authenticate is
 * reported, zeroed or read again by the caller, never handed on as
 * plaintext. */
#include "ps_internal.h"

/* the format facts of ps_api.h under this file's short names */
#define RESERVE PS_SEALED_PAGE_TRAILER
#define REC_HEAD PS_RECORD_HEADER_SIZE
#define REC_CRC_SPAN PS_RECORD_CRC_SPAN
#define REC_SEAL PS_RECORD_SEAL_OVERHEAD
#define ENCRYPTED PS_RECORD_ENCRYPTED
#define AD_MAX 512

static const char RECORD_AD[] = "pagestore/record/v1";   /* sizeof includes the NUL */

int64_t ps_seal_pages(const uint8_t *key, uint32_t key_id, const uint8_t *ad_prefix,
                      size_t prefix_len, const uint64_t *ids, size_t n, const uint8_t *src,
                      uint8_t *dst, uint32_t page_size, uint64_t *bad) {
    if (key_id < 1 || key_id > 255 || page_size <= RESERVE || prefix_len + 12 > AD_MAX)
        return PS_E_ARG;
    size_t u = page_size - RESERVE;
    for (size_t i = 0; i < n; i++)
        for (size_t k = u; k < page_size; k++)
            if (src[i * page_size + k]) {
                *bad = i;                    /* the trailer would overwrite data */
                return PS_E_CORRUPT;
            }
    void *ctx = seal_ctx_new(key);
    if (!ctx) return PS_E_IO;
    uint8_t ad[AD_MAX];
    memcpy(ad, ad_prefix, prefix_len);
    int64_t rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        uint8_t *out = dst + i * page_size;
        uint8_t *trailer = out + u;
        memset(trailer, 0, 4);
        trailer[0] = (uint8_t)key_id;
        wr64(ad + prefix_len, ids[i]);
        memcpy(ad + prefix_len + 8, trailer, 4);
        wpart part = {src + i * page_size, u};
        if (seal_random(trailer + 4, 12) ||
            seal_gcm(ctx, trailer + 4, ad, prefix_len + 12, &part, 1, out, trailer + 16))
            rc = PS_E_IO;
    }
    seal_ctx_free(ctx);
    return rc;
}

int64_t ps_seal_records(const uint8_t *key, uint32_t key_id, uint64_t checkpoint_id,
                        uint32_t writer, uint64_t offset, uint8_t *buf, size_t len, size_t cap) {
    if (key_id < 1 || key_id > 255) return PS_E_ARG;
    /* find the records first: the sealed ones are longer, so the output
     * must fit before anything is overwritten */
    size_t records = 0, at = 0;
    while (at < len) {
        if (len - at < REC_HEAD) return PS_E_CORRUPT;
        size_t n = rd32(buf + at + 10);
        if (n > len - at - REC_HEAD || (buf[at + 9] & ENCRYPTED)) return PS_E_CORRUPT;
        at += REC_HEAD + n;
        records++;
    }
    size_t out_len = len + records * REC_SEAL;
    if (out_len > cap) return PS_E_NEED_SPACE;
    uint8_t *plain = malloc(len ? len : 1);
    void *ctx = plain ? seal_ctx_new(key) : NULL;
    if (!ctx) {
        free(plain);
        return plain ? PS_E_IO : PS_E_NOMEM;
    }
    memcpy(plain, buf, len);
    uint8_t ad[sizeof RECORD_AD + 1 + 36];
    memcpy(ad, RECORD_AD, sizeof RECORD_AD);
    uint8_t *c = ad + sizeof RECORD_AD;
    c[0] = (uint8_t)key_id;
    memcpy(c + 1, "PSRECOVR", 8);
    wr64(c + 9, checkpoint_id);
    c[17] = (uint8_t)writer;
    c[18] = (uint8_t)(writer >> 8);
    int64_t rc = 0;
    size_t in = 0, out = 0;
    while (in < len && !rc) {
        const uint8_t *r = plain + in;
        uint8_t *w = buf + out;
        size_t n = rd32(r + 10);
        memcpy(w, r, 10);                   /* page id, codec, flags */
        w[9] |= ENCRYPTED;
        wr32(w + 10, (uint32_t)(n + REC_SEAL));
        wr64(c + 19, offset + out);
        memcpy(c + 27, w, 8);               /* page id */
        c[35] = w[8];
        c[36] = w[9];
        uint8_t *p = w + REC_HEAD;
        p[0] = (uint8_t)key_id;
        wpart part = {r + REC_HEAD, n};
        if (seal_random(p + 1, 12) ||
            seal_gcm(ctx, p + 1, ad, sizeof ad, &part, 1, p + 13, p + 13 + n)) {
            rc = PS_E_IO;
            break;
        }
        wr32(w + REC_CRC_SPAN, ps_crc32c(ps_crc32c(0, w, REC_CRC_SPAN), p, n + REC_SEAL));
        in += REC_HEAD + n;
        out += REC_HEAD + n + REC_SEAL;
    }
    seal_ctx_free(ctx);
    free(plain);
    return rc ? rc : (int64_t)out_len;
}

int64_t ps_open_pages(const uint8_t *keytab, const uint8_t *ad_prefix, size_t prefix_len,
                      uint64_t first_id, size_t n, uint8_t *buf, uint32_t page_size,
                      int zero_bad, uint64_t *bad) {
    if (page_size <= RESERVE || prefix_len + 12 > AD_MAX) return PS_E_ARG;
    size_t u = page_size - RESERVE;
    void *ctx[256] = {NULL};
    uint8_t ad[AD_MAX];
    memcpy(ad, ad_prefix, prefix_len);
    /* decrypted beside the page and copied back only once the tag holds, so a
     * page that fails keeps its sealed bytes for the caller's error report */
    uint8_t *plain = malloc(u);
    if (!plain) return PS_E_NOMEM;
    int64_t rc = 0, opened = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        uint8_t *page = buf + i * page_size, *trailer = page + u;
        uint8_t kid = trailer[0];
        int ok = 0;
        /* key id 0 never seals; an unknown id is the caller's to explain */
        if (kid && keytab[256 * 32 + kid]) {
            if (!ctx[kid] && !(ctx[kid] = open_ctx_new(keytab + (size_t)kid * 32))) {
                rc = PS_E_IO;
                break;
            }
            wr64(ad + prefix_len, first_id + i);
            memcpy(ad + prefix_len + 8, trailer, 4);
            uint8_t iv[12], tag[16];
            memcpy(iv, trailer + 4, 12);
            memcpy(tag, trailer + 16, 16);
            memcpy(plain, page, u);
            int r = open_gcm(ctx[kid], iv, ad, prefix_len + 12, plain, u, tag);
            if (r < 0) {
                rc = PS_E_IO;
                break;
            }
            ok = r == 1;
        }
        if (ok) {
            memcpy(page, plain, u);
            memset(trailer, 0, RESERVE);
            opened++;
        } else if (zero_bad) {
            memset(page, 0, page_size);        /* fails the page check: a miss reports it */
        } else {
            *bad = i;                          /* still sealed, as read */
            rc = PS_E_CORRUPT;
        }
    }
    for (int k = 0; k < 256; k++) seal_ctx_free(ctx[k]);
    free(plain);
    return rc ? rc : opened;
}

/* ---- page misses of an encrypted store --------------------------------- */

/* The keys a miss opens sealed pages with (ps_set_page_key): a copy of the
 * caller's key table and associated-data prefix, and one decrypting context
 * per key id, made on its first use.  Used only under the tree write lock
 * (page_load and a scan's readahead), so the contexts and `ad` are shared
 * by nothing else. */
struct page_keys {
    uint8_t keytab[256 * 32 + 256];
    uint8_t ad[AD_MAX];
    size_t prefix_len;
    void *ctx[256];
};

void page_keys_free(struct page_keys *k) {
    if (!k) return;
    for (int i = 0; i < 256; i++) seal_ctx_free(k->ctx[i]);
    volatile uint8_t *p = k->keytab;     /* key material does not outlive its use */
    for (size_t i = 0; i < sizeof k->keytab; i++) p[i] = 0;
    free(k);
}

int ps_set_page_key(ps_core *c, const uint8_t *keytab, const uint8_t *ad_prefix, size_t prefix_len) {
    struct page_keys *k = NULL;
    if (keytab) {
        if (prefix_len + 12 > AD_MAX || !ps_wal_seal_available()) return PS_E_ARG;
        if (!(k = calloc(1, sizeof *k))) return PS_E_NOMEM;
        memcpy(k->keytab, keytab, sizeof k->keytab);
        memcpy(k->ad, ad_prefix, prefix_len);
        k->prefix_len = prefix_len;
    }
    core_wrlock(c);
    struct page_keys *old = c->page_keys;
    c->page_keys = k;
    pthread_rwlock_unlock(&c->lock);
    page_keys_free(old);
    return PS_OK;
}

/* Open sealed page `id` in place, as ps_open_pages does one page.  On 0 (it
 * does not authenticate, or names a key id not held) the bytes are neither
 * the sealed image nor plaintext: the caller must not use them. */
int page_open(ps_core *c, uint64_t id, uint8_t *page) {
    struct page_keys *k = c->page_keys;
    size_t u = c->page_size - RESERVE;
    uint8_t *trailer = page + u;
    uint8_t kid = trailer[0];
    if (!kid || !k->keytab[256 * 32 + kid]) return 0;
    if (!k->ctx[kid] && !(k->ctx[kid] = open_ctx_new(k->keytab + (size_t)kid * 32))) return PS_E_IO;
    wr64(k->ad + k->prefix_len, id);
    memcpy(k->ad + k->prefix_len + 8, trailer, 4);
    uint8_t iv[12], tag[16];
    memcpy(iv, trailer + 4, 12);
    memcpy(tag, trailer + 16, 16);
    int r = open_gcm(k->ctx[kid], iv, k->ad, k->prefix_len + 12, page, u, tag);
    if (r < 0) return PS_E_IO;
    if (r == 1) memset(trailer, 0, RESERVE);
    return r;
}
