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
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) { c = _mm_crc32_u8((uint32_t)c, *p++); n--; }
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
