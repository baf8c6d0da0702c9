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
 * The Python framing stays the reference (and the only path for snappy,
 * zstd, lz4 high-compression levels and for encryption); tests compare the
 * two byte for byte.  These run without the GIL (cffi drops it around every
 * call), so the checkpoint's writer threads frame their chunks in parallel.
 *
 * lz4 (codec 4, fast mode) is framed and parsed here too when the system's
 * liblz4.so.1 can be loaded (dlopen; no headers needed, the two functions'
 * signatures are LZ4's stable API): its payload is cramjam's lz4 block, a
 * u32 little-endian uncompressed length and then LZ4_compress_fast's output,
 * taken only when shorter than the (compacted) page, as the Python codec
 * decides.  Without the library the Python codec (cramjam) does it.  The
 * codec argument's bits 8-23 carry LZ4's acceleration (0 or 1: the default
 * mode, LZ4_compress_default's bytes, which the Python codec reproduces; 2
 * and up scan faster for a slightly larger block, any LZ4 decoder reads it).
 *
 * The gap [free_lo, free_hi) of a page (u16 at 24 and 26) is dropped only when
 * 32 <= free_lo < free_hi <= page_size and it is all zeros: the rebuilt page
 * is then byte-identical.  Any other page is stored whole (a "gap fallback").
 */
#include <dlfcn.h>
#include <pthread.h>

#include "ps_internal.h"

/* the format facts of ps_api.h under this file's short names */
#define REC_HEAD PS_RECORD_HEADER_SIZE
#define REC_CRC_SPAN PS_RECORD_CRC_SPAN
#define PAGE_HEAD PS_PAGE_HEADER_SIZE
#define CODEC_DISABLED PS_CODEC_DISABLED
#define CODEC_SKIP PS_CODEC_SKIP_GARBAGE
#define CODEC_LZ4 PS_CODEC_LZ4
#define GAP_SKIPPED PS_RECORD_GAP_SKIPPED
#define MAX_OVER_PAGE PS_RECORD_MAX_OVER_PAGE

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

typedef int (*lz4_compress_fn)(const char *src, char *dst, int src_size, int dst_capacity,
                               int acceleration);
typedef int (*lz4_decompress_fn)(const char *src, char *dst, int src_size, int dst_capacity);
static lz4_compress_fn lz4_compress;
static lz4_decompress_fn lz4_decompress;
static pthread_once_t lz4_once = PTHREAD_ONCE_INIT;

static void lz4_load(void) {
    void *h = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    lz4_compress_fn c = (lz4_compress_fn)dlsym(h, "LZ4_compress_fast");
    lz4_decompress_fn d = (lz4_decompress_fn)dlsym(h, "LZ4_decompress_safe");
    if (c && d) {
        lz4_compress = c;
        lz4_decompress = d;
    }
}

int ps_lz4_available(void) {
    pthread_once(&lz4_once, lz4_load);
    return lz4_compress != NULL;
}

/* Header and CRC of the record at r whose n payload bytes follow the header. */
static void finish_record(uint8_t *r, uint64_t pid, uint8_t codec, uint8_t flags, uint32_t n) {
    wr64(r, pid);
    r[8] = codec;
    r[9] = flags;
    wr32(r + 10, n);
    wr32(r + REC_CRC_SPAN, ps_crc32c(ps_crc32c(0, r, REC_CRC_SPAN), r + REC_HEAD, n));
}

/* The skip_garbage form of page pg into dst: GAP_SKIPPED with the zero gap
 * dropped, or 0 with the page whole (a gap fallback); its length in *len. */
static uint8_t compact_page(const uint8_t *pg, uint32_t page_size, uint8_t *dst, uint32_t *len) {
    uint32_t lo = rd16(pg + 24), hi = rd16(pg + 26);
    if (PAGE_HEAD <= lo && lo < hi && hi <= page_size && all_zero(pg + lo, hi - lo)) {
        memcpy(dst, pg, lo);
        memcpy(dst + lo, pg + hi, page_size - hi);
        *len = page_size - (hi - lo);
        return GAP_SKIPPED;
    }
    memcpy(dst, pg, page_size);
    *len = page_size;
    return 0;
}

int64_t ps_recframe(const uint8_t *images, const uint64_t *ids, size_t n, uint32_t page_size,
                    int codec, uint8_t *out, size_t cap, uint64_t *gap_fallbacks) {
    if (page_size < PAGE_HEAD || page_size > PS_MAX_PAGE || cap < n * ((size_t)page_size + REC_HEAD))
        return PS_E_ARG;
    int accel = (codec >> 8) & 0xFFFF;      /* LZ4's acceleration: 0 and 1 both mean the default */
    if (codec & ~0xFFFFFF || (accel && (codec & 0xFF) != CODEC_LZ4)) return PS_E_ARG;
    codec &= 0xFF;
    if (codec != CODEC_DISABLED && codec != CODEC_SKIP && codec != CODEC_LZ4) return PS_E_ARG;
    if (codec == CODEC_LZ4 && !ps_lz4_available()) return PS_E_ARG;
    uint8_t compact[PS_MAX_PAGE] __attribute__((aligned(64)));   /* lz4's input; per caller */
    uint8_t *r = out;
    uint64_t fallbacks = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *pg = images + i * (size_t)page_size;
        uint8_t *d = r + REC_HEAD;
        /* lz4 compresses the compacted page from `compact`; the others write
         * it straight to the record */
        uint8_t *c = codec == CODEC_LZ4 ? compact : d;
        uint32_t len = page_size;
        uint8_t flags = 0;
        if (codec == CODEC_DISABLED) {
            memcpy(c, pg, page_size);
        } else {
            flags = compact_page(pg, page_size, c, &len);
            fallbacks += !flags;
        }
        uint8_t used = flags ? CODEC_SKIP : CODEC_DISABLED;
        if (codec == CODEC_LZ4) {
            /* kept only if shorter than the input, size prefix included */
            int k = len > 5 ? lz4_compress((const char *)c, (char *)d + 4, (int)len, (int)len - 5,
                                           accel ? accel : 1) : 0;
            if (k > 0) {
                wr32(d, len);
                len = 4 + (uint32_t)k;
                used = CODEC_LZ4;
            } else {
                memcpy(d, c, len);
            }
        }
        finish_record(r, ids[i], used, flags, len);
        r = d + len;
    }
    if (gap_fallbacks) *gap_fallbacks += fallbacks;
    return (int64_t)(r - out);
}

/* For the compressing codecs (whose compressors live in Python, cramjam):
 * the per-page work around the compressor call, in bulk.  ps_compact_pages
 * writes each page's skip_garbage form (the gap dropped when it is all zeros,
 * as above) to out at a stride of page_size, its length to lens[i] and
 * GAP_SKIPPED or 0 to flags[i]; returns the gap fallbacks.  After the caller
 * has put each payload of lens[i] bytes (codec codecs[i]) behind an 18-byte
 * gap, ps_frame_heads fills in every record header and CRC. */
int64_t ps_compact_pages(const uint8_t *images, size_t n, uint32_t page_size, uint8_t *out,
                         uint32_t *lens, uint8_t *flags) {
    if (page_size < PAGE_HEAD) return PS_E_ARG;
    int64_t fallbacks = 0;
    for (size_t i = 0; i < n; i++) {
        flags[i] = compact_page(images + i * (size_t)page_size, page_size, out + i * (size_t)page_size,
                                &lens[i]);
        fallbacks += !flags[i];
    }
    return fallbacks;
}

int64_t ps_frame_heads(uint8_t *buf, size_t cap, size_t n, const uint64_t *ids,
                       const uint8_t *codecs, const uint8_t *flags, const uint32_t *lens) {
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        if (cap - pos < REC_HEAD || cap - pos - REC_HEAD < lens[i]) return PS_E_ARG;
        finish_record(buf + pos, ids[i], codecs[i], flags[i], lens[i]);
        pos += REC_HEAD + lens[i];
    }
    return (int64_t)pos;
}

int64_t ps_recparse(const uint8_t *buf, size_t len, uint32_t page_size, uint8_t *images,
                    uint64_t *ids, size_t max_pages, size_t *consumed) {
    /* Stops (without error) at the first record that is incomplete in buf or
     * that is not a valid plain record: the caller's Python reader takes that
     * one, which decodes what C does not (codecs, ciphers) and raises the
     * exact error for what is damaged. */
    size_t pos = 0, got = 0;
    if (page_size < PAGE_HEAD || page_size > PS_MAX_PAGE) return PS_E_ARG;
    uint8_t unpacked[PS_MAX_PAGE] __attribute__((aligned(64)));
    while (got < max_pages && len - pos >= REC_HEAD) {
        const uint8_t *r = buf + pos, *d = r + REC_HEAD;   /* d: the payload, or its unpacked form */
        uint8_t codec = r[8], flags = r[9];
        uint32_t n = rd32(r + 10);
        if (n > page_size + MAX_OVER_PAGE || len - pos - REC_HEAD < n) break;
        if (ps_crc32c(ps_crc32c(0, r, REC_CRC_SPAN), d, n) != rd32(r + REC_CRC_SPAN)) break;
        uint8_t *img = images + got * (size_t)page_size;
        if (codec == CODEC_LZ4 && (flags == 0 || flags == GAP_SKIPPED) && n > 4 &&
            ps_lz4_available()) {
            /* decompress the payload as the Python codec would, then treat it
             * as that codec's disabled / skip_garbage payload */
            uint32_t u = rd32(d);
            if (u > page_size || u < PAGE_HEAD) break;
            if (lz4_decompress((const char *)d + 4, (char *)unpacked, (int)n - 4, (int)u) != (int)u) break;
            d = unpacked;
            n = u;
            codec = flags ? CODEC_SKIP : CODEC_DISABLED;
        }
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
        pos += REC_HEAD + rd32(r + 10);     /* the stored length (n may be the unpacked one) */
    }
    *consumed = pos;
    return (int64_t)got;
}
