/* Recovery-file records in bulk: the plain (no cipher) disabled / skip_garbage
 * framing of checkpoint/recovery_file.py, one call per batch of pages.
 *
 * The record layout is checkpoint/format.py's (docs/recovery-files.md):
 *
 *     off size field
 *       0    8 page id
 *       8    1 codec applied: 0 disabled (whole page), 1 skip_garbage
 *       9    1 flags: bit 0 GAP_SKIPPED (set exactly when codec is 1)
 *      10    4 stored length n
 *      14    4 crc32c of bytes 0..14, then of the n payload bytes
 *      18    n payload
 *
 * The Python framing stays the reference (and the only path for the
 * compressing codecs and for encryption); tests compare the two byte for
 * byte.  These run without the GIL (cffi drops it around every call), so the
 * checkpoint's writer threads frame their chunks in parallel.
 *
 * The gap [free_lo, free_hi) of a page (u16 at 24 and 26) is dropped only when
 * 32 <= free_lo < free_hi <= page_size and it is all zeros: the rebuilt page
 * is then byte-identical.  Any other page is stored whole (a "gap fallback").
 */
#include "ps_internal.h"

#define REC_HEAD 18
#define REC_CRC_SPAN 14
#define PAGE_HEAD 32
#define CODEC_DISABLED 0
#define CODEC_SKIP 1
#define GAP_SKIPPED 1
#define MAX_OVER_PAGE 64

static int all_zero(const uint8_t *p, size_t n) {
    /* word-wise: gaps run to kilobytes, a byte loop would dominate the framing */
    while (n && ((uintptr_t)p & 7)) { if (*p++) return 0; n--; }
    uint64_t acc = 0;
    for (; n >= 64; p += 64, n -= 64)
        acc |= rd64(p) | rd64(p + 8) | rd64(p + 16) | rd64(p + 24) |
               rd64(p + 32) | rd64(p + 40) | rd64(p + 48) | rd64(p + 56);
    if (acc) return 0;
    for (; n >= 8; p += 8, n -= 8) if (rd64(p)) return 0;
    while (n--) if (*p++) return 0;
    return 1;
}

static void put_head(uint8_t *r, uint64_t pid, uint8_t codec, uint8_t flags, uint32_t n) {
    wr64(r, pid);
    r[8] = codec;
    r[9] = flags;
    wr32(r + 10, n);
}

int64_t ps_recframe(const uint8_t *images, const uint64_t *ids, size_t n, uint32_t page_size,
                    int skip_garbage, uint8_t *out, size_t cap, uint64_t *gap_fallbacks) {
    if (page_size < PAGE_HEAD || cap < n * ((size_t)page_size + REC_HEAD)) return PS_E_ARG;
    uint8_t *r = out;
    uint64_t fallbacks = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *pg = images + i * (size_t)page_size;
        uint8_t *d = r + REC_HEAD;
        uint32_t len = page_size;
        uint8_t codec = CODEC_DISABLED, flags = 0;
        if (skip_garbage) {
            uint32_t lo = rd16(pg + 24), hi = rd16(pg + 26);
            if (PAGE_HEAD <= lo && lo < hi && hi <= page_size && all_zero(pg + lo, hi - lo)) {
                len = page_size - (hi - lo);
                codec = CODEC_SKIP;
                flags = GAP_SKIPPED;
                memcpy(d, pg, lo);
                memcpy(d + lo, pg + hi, page_size - hi);
            } else {
                fallbacks++;
            }
        }
        if (codec == CODEC_DISABLED) memcpy(d, pg, page_size);
        put_head(r, ids[i], codec, flags, len);
        wr32(r + REC_CRC_SPAN, ps_crc32c(ps_crc32c(0, r, REC_CRC_SPAN), d, len));
        r = d + len;
    }
    if (gap_fallbacks) *gap_fallbacks += fallbacks;
    return (int64_t)(r - out);
}

int64_t ps_recparse(const uint8_t *buf, size_t len, uint32_t page_size, uint8_t *images,
                    uint64_t *ids, size_t max_pages, size_t *consumed) {
    /* Stops (without error) at the first record that is incomplete in buf or
     * that is not a valid plain record: the caller's Python reader takes that
     * one, which decodes what C does not (codecs, ciphers) and raises the
     * exact error for what is damaged. */
    size_t pos = 0, got = 0;
    if (page_size < PAGE_HEAD) return PS_E_ARG;
    while (got < max_pages && len - pos >= REC_HEAD) {
        const uint8_t *r = buf + pos, *d = r + REC_HEAD;
        uint8_t codec = r[8], flags = r[9];
        uint32_t n = rd32(r + 10);
        if (n > page_size + MAX_OVER_PAGE || len - pos - REC_HEAD < n) break;
        if (ps_crc32c(ps_crc32c(0, r, REC_CRC_SPAN), d, n) != rd32(r + REC_CRC_SPAN)) break;
        uint8_t *img = images + got * (size_t)page_size;
        if (codec == CODEC_DISABLED && flags == 0 && n == page_size) {
            memcpy(img, d, page_size);
        } else if (codec == CODEC_SKIP && flags == GAP_SKIPPED && n >= PAGE_HEAD) {
            uint32_t lo = rd16(d + 24), hi = rd16(d + 26);
            if (!(PAGE_HEAD <= lo && lo < hi && hi <= page_size && n == page_size - (hi - lo))) break;
            memcpy(img, d, lo);
            memset(img + lo, 0, hi - lo);
            memcpy(img + hi, d + lo, page_size - hi);
        } else {
            break;
        }
        ids[got++] = rd64(r);
        pos += REC_HEAD + n;
    }
    *consumed = pos;
    return (int64_t)got;
}
