/* AES-256-GCM sealing of short records without OpenSSL 3's EVP layer.
 *
 * Why: a sealed WAL record is ~150 bytes, and through EVP each one paid
 * ~300 ns, mostly provider plumbing (an IV-length parameter lookup with
 * string compares on every EVP_EncryptInit_ex, the tag through a ctrl
 * translated into parameters) rather than the cipher; a plain put costs
 * ~1.1 us here, so that alone was a 25-30 % cost of encryption.
 *
 * What is ours and what is OpenSSL's: the GCM mode itself -- GHASH (with
 * PCLMULQDQ, picked by OpenSSL at load), the counter handling, the tag -- is
 * libcrypto's CRYPTO_gcm128_* (openssl/modes.h), loaded at run time like the
 * rest of walseal.c.  This file only supplies the block cipher those
 * functions take: AES-256 with the AES-NI instructions (the key schedule of
 * Intel's AES-NI white paper, Gueron 2010) and a 4-way counter-mode stream.
 * AES-NI rounds take constant time; nothing here branches on key or data.
 * Used only where the CPU has AES-NI and libcrypto exports the functions;
 * tests compare every output byte with `cryptography`'s AESGCM. */
#include <dlfcn.h>
#include <immintrin.h>
#include <pthread.h>

#include "ps_internal.h"

#define TARGET __attribute__((target("aes,sse4.1")))

typedef void (*block128_f)(const unsigned char in[16], unsigned char out[16], const void *key);
typedef void (*ctr128_f)(const unsigned char *in, unsigned char *out, size_t blocks, const void *key,
                         const unsigned char ivec[16]);

static struct {
    void *(*gcm_new)(void *key, block128_f block);
    void (*gcm_setiv)(void *ctx, const unsigned char *iv, size_t len);
    int (*gcm_aad)(void *ctx, const unsigned char *aad, size_t len);
    int (*gcm_encrypt_ctr32)(void *ctx, const unsigned char *in, unsigned char *out, size_t len,
                             ctr128_f stream);
    void (*gcm_tag)(void *ctx, unsigned char *tag, size_t len);
    void (*gcm_release)(void *ctx);
} lc;
static int fast_ok;
static pthread_once_t fast_once = PTHREAD_ONCE_INIT;

static void fast_load(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("aes") || !__builtin_cpu_supports("sse4.1")) return;
    void *h = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    *(void **)&lc.gcm_new = dlsym(h, "CRYPTO_gcm128_new");
    *(void **)&lc.gcm_setiv = dlsym(h, "CRYPTO_gcm128_setiv");
    *(void **)&lc.gcm_aad = dlsym(h, "CRYPTO_gcm128_aad");
    *(void **)&lc.gcm_encrypt_ctr32 = dlsym(h, "CRYPTO_gcm128_encrypt_ctr32");
    *(void **)&lc.gcm_tag = dlsym(h, "CRYPTO_gcm128_tag");
    *(void **)&lc.gcm_release = dlsym(h, "CRYPTO_gcm128_release");
    fast_ok = lc.gcm_new && lc.gcm_setiv && lc.gcm_aad && lc.gcm_encrypt_ctr32 && lc.gcm_tag &&
              lc.gcm_release;
}

typedef struct fastgcm {
    __m128i rk[15];          /* first: the block functions get a pointer to it */
    void *gcm;
} fastgcm;

/* x ^ x<<32 ^ x<<64 ^ x<<96: the running XOR of a round key's four words */
TARGET static __m128i prefix_xor(__m128i x) {
    x = _mm_xor_si128(x, _mm_slli_si128(x, 4));
    return _mm_xor_si128(x, _mm_slli_si128(x, 8));
}

/* the even round keys: the previous one, and the rotated, substituted last word
 * of the odd one with the round constant (aeskeygenassist's word 3) */
TARGET static __m128i expand_a(__m128i a, __m128i assist) {
    return _mm_xor_si128(prefix_xor(a), _mm_shuffle_epi32(assist, 0xff));
}

/* the odd round keys: the substituted (not rotated) last word of the even one */
TARGET static __m128i expand_b(__m128i a, __m128i b) {
    return _mm_xor_si128(prefix_xor(b), _mm_shuffle_epi32(_mm_aeskeygenassist_si128(a, 0x00), 0xaa));
}

#define ROUND_KEYS(i, rcon)                                              \
    a = expand_a(a, _mm_aeskeygenassist_si128(b, rcon));                 \
    rk[i] = a;                                                           \
    if (i + 1 < 15) rk[i + 1] = b = expand_b(a, b);

TARGET static void expand_key(const uint8_t key[32], __m128i rk[15]) {
    __m128i a = _mm_loadu_si128((const __m128i *)key);
    __m128i b = _mm_loadu_si128((const __m128i *)(key + 16));
    rk[0] = a;
    rk[1] = b;
    ROUND_KEYS(2, 0x01)
    ROUND_KEYS(4, 0x02)
    ROUND_KEYS(6, 0x04)
    ROUND_KEYS(8, 0x08)
    ROUND_KEYS(10, 0x10)
    ROUND_KEYS(12, 0x20)
    a = expand_a(a, _mm_aeskeygenassist_si128(b, 0x40));
    rk[14] = a;
}

TARGET static inline __m128i encrypt1(const __m128i *rk, __m128i x) {
    x = _mm_xor_si128(x, rk[0]);
    for (int r = 1; r < 14; r++) x = _mm_aesenc_si128(x, rk[r]);
    return _mm_aesenclast_si128(x, rk[14]);
}

TARGET static void block_fn(const unsigned char in[16], unsigned char out[16], const void *key) {
    _mm_storeu_si128((__m128i *)out, encrypt1(key, _mm_loadu_si128((const __m128i *)in)));
}

/* counter block i: ivec with its last 32 bits (big endian) advanced by i */
static inline __m128i counter(const unsigned char ivec[16], uint32_t i) {
    unsigned char cb[16];
    memcpy(cb, ivec, 12);
    uint32_t ctr = ((uint32_t)ivec[12] << 24 | (uint32_t)ivec[13] << 16 | (uint32_t)ivec[14] << 8 |
                    ivec[15]) + i;
    cb[12] = (unsigned char)(ctr >> 24);
    cb[13] = (unsigned char)(ctr >> 16);
    cb[14] = (unsigned char)(ctr >> 8);
    cb[15] = (unsigned char)ctr;
    return _mm_loadu_si128((const __m128i *)cb);
}

TARGET static void ctr32_fn(const unsigned char *in, unsigned char *out, size_t blocks, const void *key,
                            const unsigned char ivec[16]) {
    const __m128i *rk = key;
    size_t i = 0;
    for (; i + 4 <= blocks; i += 4) {            /* four blocks in flight: the rounds pipeline */
        __m128i x0 = _mm_xor_si128(counter(ivec, (uint32_t)i), rk[0]);
        __m128i x1 = _mm_xor_si128(counter(ivec, (uint32_t)i + 1), rk[0]);
        __m128i x2 = _mm_xor_si128(counter(ivec, (uint32_t)i + 2), rk[0]);
        __m128i x3 = _mm_xor_si128(counter(ivec, (uint32_t)i + 3), rk[0]);
        for (int r = 1; r < 14; r++) {
            x0 = _mm_aesenc_si128(x0, rk[r]);
            x1 = _mm_aesenc_si128(x1, rk[r]);
            x2 = _mm_aesenc_si128(x2, rk[r]);
            x3 = _mm_aesenc_si128(x3, rk[r]);
        }
        x0 = _mm_aesenclast_si128(x0, rk[14]);
        x1 = _mm_aesenclast_si128(x1, rk[14]);
        x2 = _mm_aesenclast_si128(x2, rk[14]);
        x3 = _mm_aesenclast_si128(x3, rk[14]);
        const __m128i *src = (const __m128i *)(in + 16 * i);
        __m128i *dst = (__m128i *)(out + 16 * i);
        _mm_storeu_si128(dst, _mm_xor_si128(_mm_loadu_si128(src), x0));
        _mm_storeu_si128(dst + 1, _mm_xor_si128(_mm_loadu_si128(src + 1), x1));
        _mm_storeu_si128(dst + 2, _mm_xor_si128(_mm_loadu_si128(src + 2), x2));
        _mm_storeu_si128(dst + 3, _mm_xor_si128(_mm_loadu_si128(src + 3), x3));
    }
    for (; i < blocks; i++) {
        __m128i x = encrypt1(rk, counter(ivec, (uint32_t)i));
        _mm_storeu_si128((__m128i *)(out + 16 * i),
                         _mm_xor_si128(_mm_loadu_si128((const __m128i *)(in + 16 * i)), x));
    }
}

int fastgcm_available(void) {
    pthread_once(&fast_once, fast_load);
    return fast_ok;
}

void *fastgcm_new(const uint8_t key[32]) {
    if (!fastgcm_available()) return NULL;
    fastgcm *f = aligned_alloc(64, (sizeof(fastgcm) + 63) & ~(size_t)63);
    if (!f) return NULL;
    expand_key(key, f->rk);
    f->gcm = lc.gcm_new(f->rk, block_fn);   /* keeps the pointer: rk lives as long as f */
    if (!f->gcm) {
        free(f);
        return NULL;
    }
    return f;
}

int fastgcm_seal(void *ctx, const uint8_t iv[12], const uint8_t *aad, size_t aad_len, uint8_t *buf,
                 size_t n, uint8_t tag[16]) {
    fastgcm *f = ctx;
    lc.gcm_setiv(f->gcm, iv, 12);
    if (aad_len && lc.gcm_aad(f->gcm, aad, aad_len)) return -1;
    if (n && lc.gcm_encrypt_ctr32(f->gcm, buf, buf, n, ctr32_fn)) return -1;
    lc.gcm_tag(f->gcm, tag, 16);
    return 0;
}

void fastgcm_free(void *ctx) {
    fastgcm *f = ctx;
    if (!f) return;
    lc.gcm_release(f->gcm);   /* cleanses the GHASH key */
    volatile uint8_t *p = (volatile uint8_t *)f->rk;
    for (size_t i = 0; i < sizeof f->rk; i++) p[i] = 0;
    free(f);
}
