/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as used by pages
 * and WAL records.  Hardware SSE4.2 crc32 instructions when the CPU has them,
 * otherwise slicing-by-8 tables.  Chaining works like zlib's crc32:
 * ps_crc32c(ps_crc32c(0, a), b) == ps_crc32c(0, a + b). */
#include "ps_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define PS_HAVE_X86 1
#endif

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static int hw_state = -1;

static void table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xFF];
}

uint32_t ps_crc32c_sw(uint32_t crc, const uint8_t *p, size_t n) {
    pthread_once(&table_once, table_init);
    uint32_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) { c = (c >> 8) ^ table[0][(c ^ *p++) & 0xFF]; n--; }
    while (n >= 8) {
        uint64_t w = rd64(p) ^ c;
        c = table[7][w & 0xFF] ^ table[6][(w >> 8) & 0xFF] ^ table[5][(w >> 16) & 0xFF] ^
            table[4][(w >> 24) & 0xFF] ^ table[3][(w >> 32) & 0xFF] ^
            table[2][(w >> 40) & 0xFF] ^ table[1][(w >> 48) & 0xFF] ^ table[0][w >> 56];
        p += 8; n -= 8;
    }
    while (n--) c = (c >> 8) ^ table[0][(c ^ *p++) & 0xFF];
    return ~c;
}

#ifdef PS_HAVE_X86
/* Three streams at once.  The crc32 instruction takes 3 cycles and can start
 * one a cycle, so one chain of them runs at a third of the CPU's pace: a 4 KiB
 * page cost ~0.5 us, a noticeable part of a page miss (docs/page-memory.md).
 * Each 3 * STREAM-byte block is three chains, the second and third started
 * from 0, joined with shift(): the raw CRC register is linear, so running
 * STREAM more bytes after state r yields shift(r) ^ (their CRC from 0),
 * shift(r) being r * x^(8 * STREAM) mod P, taken from 4 tables of 256. */
#define STREAM 256
static uint32_t shift_tab[4][256];

/* a * b modulo the polynomial, both reflected (bit 31 is x^0) */
static uint32_t mulmod(uint32_t a, uint32_t b) {
    uint32_t p = 0;
    for (uint32_t m = 1u << 31; m; m >>= 1) {
        if (a & m) p ^= b;
        b = (b >> 1) ^ (0x82F63B78u & (0u - (b & 1)));
    }
    return p;
}

static void shift_init(void) {
    uint32_t xn = 1u << 31;                       /* x^0 */
    for (int i = 0; i < 8 * STREAM; i++) xn = (xn >> 1) ^ (0x82F63B78u & (0u - (xn & 1)));
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) shift_tab[k][b] = mulmod(xn, b << (8 * k));
}
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

static inline uint32_t shift(uint32_t r) {
    return shift_tab[0][r & 0xFF] ^ shift_tab[1][(r >> 8) & 0xFF] ^ shift_tab[2][(r >> 16) & 0xFF] ^
           shift_tab[3][r >> 24];
}

__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) { c = _mm_crc32_u8((uint32_t)c, *p++); n--; }
    if (n >= 3 * STREAM) pthread_once(&shift_once, shift_init);
    while (n >= 3 * STREAM) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < STREAM; i += 8) {
            c = _mm_crc32_u64(c, rd64(p + i));
            c1 = _mm_crc32_u64(c1, rd64(p + STREAM + i));
            c2 = _mm_crc32_u64(c2, rd64(p + 2 * STREAM + i));
        }
        c = shift(shift((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
        p += 3 * STREAM; n -= 3 * STREAM;
    }
    while (n >= 32) {
        c = _mm_crc32_u64(c, rd64(p));
        c = _mm_crc32_u64(c, rd64(p + 8));
        c = _mm_crc32_u64(c, rd64(p + 16));
        c = _mm_crc32_u64(c, rd64(p + 24));
        p += 32; n -= 32;
    }
    while (n >= 8) { c = _mm_crc32_u64(c, rd64(p)); p += 8; n -= 8; }
    while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

int ps_crc32c_hw_available(void) {
#ifdef PS_HAVE_X86
    if (hw_state < 0) {
        __builtin_cpu_init();
        hw_state = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    }
    return hw_state;
#else
    return 0;
#endif
}

uint32_t ps_crc32c(uint32_t crc, const uint8_t *p, size_t n) {
#ifdef PS_HAVE_X86
    if (hw_state > 0 || (hw_state < 0 && ps_crc32c_hw_available())) return crc_hw(crc, p, n);
#endif
    return ps_crc32c_sw(crc, p, n);
}

/* CRC of a page with its crc field (bytes 0..4) taken as zero. */
uint32_t ps_page_crc(const uint8_t *page, uint32_t page_size) {
    static const uint8_t zero4[4] = {0, 0, 0, 0};
    uint32_t c = ps_crc32c(0, zero4, 4);
    return ps_crc32c(c, page + 4, page_size - 4);
}

void ps_seal_page(uint8_t *page, uint32_t page_size, uint64_t page_id) {
    wr64(page + H_PAGEID, page_id);
    wr32(page + H_CRC, ps_page_crc(page, page_size));
}

int ps_check_page(const uint8_t *page, uint32_t page_size, uint64_t page_id) {
    return rd32(page + H_CRC) == ps_page_crc(page, page_size) &&
           rd64(page + H_PAGEID) == page_id;
}
