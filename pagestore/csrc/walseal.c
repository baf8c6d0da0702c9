/* AES-256-GCM for the sealed WAL records of walenc.c, through the system's
 * libcrypto loaded at run time (dlopen, like liblz4 in recframe.c): no
 * OpenSSL headers at build time, so the few prototypes are declared here
 * with opaque pointers.  libcrypto.so.3 is there wherever Python's ssl module
 * is.  One EVP context per core, keyed once; each record only sets its IV
 * (the default 12-byte GCM IV), ~230 ns for a 150-byte record.  The WAL
 * scanner (ps_wal_scan with a key) opens records with a decrypting context of
 * its own, one per call, so concurrent scans share nothing mutable. */
#include <dlfcn.h>
#include <errno.h>
#include <sys/random.h>

#include "ps_internal.h"

#define EVP_CTRL_GCM_GET_TAG 0x10
#define EVP_CTRL_GCM_SET_TAG 0x11
#define CHUNK (1 << 30)   /* EVP lengths are int */

typedef void *(*ctx_new_fn)(void);
typedef void (*ctx_free_fn)(void *ctx);
typedef const void *(*cipher_fn)(void);
typedef int (*init_fn)(void *ctx, const void *cipher, void *engine, const unsigned char *key,
                       const unsigned char *iv);
typedef int (*update_fn)(void *ctx, unsigned char *out, int *outl, const unsigned char *in,
                         int inl);
typedef int (*final_fn)(void *ctx, unsigned char *out, int *outl);
typedef int (*ctrl_fn)(void *ctx, int type, int arg, void *ptr);
/* OpenSSL 3's OSSL_PARAM (openssl/core.h, a stable ABI) */
typedef struct {
    const char *key;
    unsigned int data_type;
    void *data;
    size_t data_size;
    size_t return_size;
} ossl_param;
#define OSSL_PARAM_OCTET_STRING 5
typedef int (*params_fn)(void *ctx, ossl_param *params);

static struct {
    ctx_new_fn ctx_new;
    ctx_free_fn ctx_free;
    cipher_fn aes_256_gcm;
    init_fn init;
    update_fn update;
    final_fn final;
    ctrl_fn ctrl;
    init_fn dinit;
    update_fn dupdate;
    final_fn dfinal;
    params_fn get_params;   /* OpenSSL 3: the tag without ctrl's translation */
    params_fn set_params;
} evp;
static int evp_ok;
static pthread_once_t evp_once = PTHREAD_ONCE_INIT;

static void evp_load(void) {
    void *h = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcrypto.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    evp.ctx_new = (ctx_new_fn)dlsym(h, "EVP_CIPHER_CTX_new");
    evp.ctx_free = (ctx_free_fn)dlsym(h, "EVP_CIPHER_CTX_free");
    evp.aes_256_gcm = (cipher_fn)dlsym(h, "EVP_aes_256_gcm");
    evp.init = (init_fn)dlsym(h, "EVP_EncryptInit_ex");
    evp.update = (update_fn)dlsym(h, "EVP_EncryptUpdate");
    evp.final = (final_fn)dlsym(h, "EVP_EncryptFinal_ex");
    evp.ctrl = (ctrl_fn)dlsym(h, "EVP_CIPHER_CTX_ctrl");
    evp.dinit = (init_fn)dlsym(h, "EVP_DecryptInit_ex");
    evp.dupdate = (update_fn)dlsym(h, "EVP_DecryptUpdate");
    evp.dfinal = (final_fn)dlsym(h, "EVP_DecryptFinal_ex");
    evp.get_params = (params_fn)dlsym(h, "EVP_CIPHER_CTX_get_params");
    evp.set_params = (params_fn)dlsym(h, "EVP_CIPHER_CTX_set_params");
    if (!evp.get_params || !evp.set_params) evp.get_params = evp.set_params = NULL;
    evp_ok = evp.ctx_new && evp.ctx_free && evp.aes_256_gcm && evp.init && evp.update &&
             evp.final && evp.ctrl && evp.dinit && evp.dupdate && evp.dfinal;
}

int ps_wal_seal_available(void) {
    pthread_once(&evp_once, evp_load);
    return evp_ok;
}

/* An EVP context keyed once for encrypting, or decrypting (open_gcm).  The
 * init function is picked after the load. */
static void *evp_new(int decrypt, const uint8_t key[32]) {
    if (!ps_wal_seal_available()) return NULL;
    init_fn init = decrypt ? evp.dinit : evp.init;
    void *ctx = evp.ctx_new();
    if (ctx && init(ctx, evp.aes_256_gcm(), NULL, key, NULL) != 1) {
        evp.ctx_free(ctx);
        ctx = NULL;
    }
    return ctx;
}

/* A sealing context also holds the AES-NI sealer of aesni.c where the CPU and
 * libcrypto allow it (seal_gcm prefers it); opening always goes through EVP. */
typedef struct gcm_ctx {
    void *evp;
    void *fast;
} gcm_ctx;

static int fast_enabled = 1;    /* ps_gcm_set_fast: tests compare the two paths */

static void *ctx_new(int decrypt, const uint8_t key[32]) {
    gcm_ctx *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    if (!(g->evp = evp_new(decrypt, key))) {
        free(g);
        return NULL;
    }
    if (!decrypt && __atomic_load_n(&fast_enabled, __ATOMIC_RELAXED)) g->fast = fastgcm_new(key);
    return g;
}

void *seal_ctx_new(const uint8_t key[32]) { return ctx_new(0, key); }

void *open_ctx_new(const uint8_t key[32]) { return ctx_new(1, key); }

void seal_ctx_free(void *ctx) {
    gcm_ctx *g = ctx;
    if (!g) return;
    evp.ctx_free(g->evp);   /* cleanses the key schedule */
    fastgcm_free(g->fast);
    free(g);
}

void ps_gcm_set_fast(int on) { __atomic_store_n(&fast_enabled, on != 0, __ATOMIC_RELAXED); }

int ps_gcm_fast_available(void) { return fastgcm_available(); }

static int update(update_fn fn, void *ctx, uint8_t *out, const uint8_t *in, size_t n) {
    while (n) {
        int k = n < CHUNK ? (int)n : CHUNK, got;
        if (fn(ctx, out, &got, in, k) != 1 || (out && got != k)) return -1;
        if (out) out += k;
        in += k;
        n -= k;
    }
    return 0;
}

/* The GCM tag in or out.  OpenSSL 3 turns a ctrl into a parameter lookup of
 * its own (string compares, ~110 ns a call); asking for the parameter directly
 * halves that, and a record pays it once per seal or open. */
static int tag_param(params_fn fn, int ctrl, void *ctx, uint8_t tag[16]) {
    if (!fn) return evp.ctrl(ctx, ctrl, 16, tag);
    ossl_param p[2] = {{"tag", OSSL_PARAM_OCTET_STRING, tag, 16, 0}, {NULL, 0, NULL, 0, 0}};
    return fn(ctx, p);
}

int seal_gcm(void *gctx, const uint8_t iv[12], const uint8_t *aad, size_t aad_len,
             const wpart *parts, int nparts, uint8_t *out, uint8_t tag[16]) {
    gcm_ctx *g = gctx;
    void *ctx = g->evp;
    int got;
    size_t n = 0;
    /* gathered first and encrypted in place: one EVP call instead of one per
     * part (a put has three), each costing more than the copy */
    for (int i = 0; i < nparts; i++) {
        memcpy(out + n, parts[i].p, parts[i].n);
        n += parts[i].n;
    }
    if (g->fast) return fastgcm_seal(g->fast, iv, aad, aad_len, out, n, tag);
    /* GCM's final step outputs nothing: tag is only a valid pointer for it */
    if (evp.init(ctx, NULL, NULL, NULL, iv) != 1 || update(evp.update, ctx, NULL, aad, aad_len) ||
        update(evp.update, ctx, out, out, n) || evp.final(ctx, tag, &got) != 1 || got != 0)
        return -1;
    return tag_param(evp.get_params, EVP_CTRL_GCM_GET_TAG, ctx, tag) == 1 ? 0 : -1;
}

int open_gcm(void *gctx, const uint8_t iv[12], const uint8_t *aad, size_t aad_len, uint8_t *buf,
             size_t n, const uint8_t tag[16]) {
    void *ctx = ((gcm_ctx *)gctx)->evp;
    int got;
    uint8_t t[16], end[16];
    memcpy(t, tag, 16);                  /* ctrl and params take a non-const pointer */
    if (evp.dinit(ctx, NULL, NULL, NULL, iv) != 1 || update(evp.dupdate, ctx, NULL, aad, aad_len) ||
        update(evp.dupdate, ctx, buf, buf, n) || tag_param(evp.set_params, EVP_CTRL_GCM_SET_TAG, ctx, t) != 1)
        return -1;
    /* the tag is compared here: <= 0 when it does not authenticate */
    return evp.dfinal(ctx, end, &got) == 1 && got == 0;
}

int seal_random(uint8_t *p, size_t n) {
    while (n) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* One seal through the chosen path (1: aesni.c, 0: EVP), for the tests that
 * hold both to `cryptography`'s output.  PS_E_ARG if that path is missing. */
int ps_gcm_seal(const uint8_t *key, const uint8_t *iv, const uint8_t *aad, size_t aad_len,
                const uint8_t *in, size_t n, uint8_t *out, uint8_t *tag, int fast) {
    gcm_ctx g = {evp_new(0, key), fast ? fastgcm_new(key) : NULL};
    int rc = PS_E_ARG;
    if (g.evp && (!fast || g.fast)) {
        wpart part = {in, n};
        rc = seal_gcm(&g, iv, aad, aad_len, &part, 1, out, tag) ? PS_E_IO : PS_OK;
    }
    if (g.evp) evp.ctx_free(g.evp);
    fastgcm_free(g.fast);
    return rc;
}
