/* Internal declarations shared by the C files of the pagestore core.
 *
 * Concurrency: one writer-preferring rwlock (the tree lock) guards every
 * structure here.  Readers (get, scan, ckpt_copy) hold the read side and never
 * change the page table; everything else holds the write side.  The only
 * fields readers write are clock ref bits (relaxed atomics, kept in the page
 * table entry that the lookup has already brought into cache) and
 * signals.ckpt_written (atomic add).
 *
 * Failure atomicity: a guarded operation records an undo entry for every page
 * before its first modification (an image, or "new" for a page created by the
 * operation) plus a copy of the meta fields; op_rollback restores them all.
 * Unguarded operations are used only when nothing can fail after the first
 * modification (see the fast paths in btree.c).
 */
#ifndef PS_INTERNAL_H
#define PS_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sys/types.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ps_api.h"
#include "ps_test.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pagestore's C core assumes a little-endian host"
#endif

#define COW_NONE UINT32_MAX
#define PS_PAGE_RESET UINT64_MAX /* page id of the reset record of the physical mode (physrec.c) */
#define PS_RETRY (-100) /* internal: a reader met a page miss; redo under the write lock */

/* common header offsets */
#define H_CRC PS_PH_CRC
#define H_TYPE PS_PH_TYPE
#define H_FORMAT PS_PH_FORMAT
#define H_PAGEID PS_PH_PAGE_ID
#define H_CKPT PS_PH_CHECKPOINT_ID
#define H_FREELO PS_PH_FREE_LO
#define H_FREEHI PS_PH_FREE_HI
#define H_SIZE PS_PAGE_HEADER_SIZE

/* meta page */
#define M_MAGIC PS_MH_MAGIC
#define M_VERSION PS_MH_VERSION
#define M_PAGESIZE PS_MH_PAGE_SIZE
#define M_ROOT PS_MH_ROOT
#define M_PAGECOUNT PS_MH_PAGE_COUNT
#define M_FREEHEAD PS_MH_FREE_HEAD
#define M_KEYCOUNT PS_MH_KEY_COUNT
#define M_HEIGHT PS_MH_HEIGHT
#define M_RESERVE PS_MH_RESERVE
#define M_END PS_MH_END

/* leaf and inner nodes */
#define N_NKEYS 32
#define N_GARBAGE 34
#define LEAF_SLOTS 40
#define INNER_CHILD0 40
#define INNER_SLOTS 48
#define SLOT_SZ 6          /* leaf slot: u16 cell offset, u32 key head */
#define INNER_SLOT_SZ 16   /* inner slot: u32 key head, u16 key offset, u16 key length, u64 child */
#define IS_HEAD 0
#define IS_OFF 4
#define IS_KLEN 6
#define IS_CHILD 8
#define LEAF_CELL_HDR 6
#define INNER_CELL_HDR 10  /* inner entry in flight: u16 klen, u64 child, key */
#define KLEN_OVF 0x8000u

/* overflow and freelist pages */
#define O_NEXT 32
#define O_LEN 40
#define O_DATA 48
#define F_NEXT 32
#define F_COUNT 40
#define F_IDS 48

static inline uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline void wr16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

typedef struct slot {
    uint64_t page_id;
    uint64_t undo_epoch;   /* == core op_epoch: undo entry recorded in this op */
    int32_t cow;           /* checkpoint-buffer slot holding the checkpoint image, or -1 */
    uint32_t pin;
    uint8_t used, dirty, inckpt;
    uint8_t snap;          /* physical mode: a PAGE_SNAPSHOT of this page was logged since the
                            * last ckpt_begin and every change since is covered by PAGE_DELTAs */
} slot_t;

/* Page table: page id -> slot, a two-level direct map.  Page ids are dense
 * (0 .. page_count), so a directory of chunks of PT_CHUNK entries indexed by
 * id is both smaller and faster than a hash: 4 bytes per page id in use,
 * the entries of the hot pages stay in L1/L2, and a lookup is two dependent
 * loads with no probing.  An entry is 0 when the page is not resident, else
 * (slot + 1) with bit 31 the clock reference bit.  Chunks are allocated
 * (under the write lock) before a page of their range is first made
 * resident and live until ps_destroy. */
#define PT_CHUNK_BITS 14
#define PT_CHUNK (1u << PT_CHUNK_BITS)
#define PT_REF 0x80000000u
#define PT_SLOT 0x7FFFFFFFu

typedef struct meta {
    uint64_t root, page_count, free_head, key_count;
    uint32_t height;
} meta_t;

/* undo_t.is_new: 1 the operation created the page; UNDO_REREAD the page was
 * as the page file holds it, so no copy was made (page_w) */
#define UNDO_REREAD 2
typedef struct undo {
    uint32_t slot;
    uint8_t is_new;
    uint8_t prior_dirty;
    int32_t prior_cow;
    size_t img_off;
} undo_t;

struct ps_core {
    pthread_rwlock_t lock;
    int closed;             /* set by ps_close under the write lock: user operations refuse */
    int lock_ready;         /* `lock` initialised (ps_create got that far) */
    int freed;              /* ps_close freed the page memory */
    pid_t owner_pid;        /* the creating process: a forked child only marks it closed */
    int wr_intent;          /* writers spinning for the lock: readers hold off */
    /* The batch gate (batchgate.c): 1 while a batch that let the
     * checkpoint in between two of its writes is still open, 2 when someone
     * sleeps on it; only the checkpoint's copy and release calls pass it. */
    int gate;
    int ckpt_waiting;       /* checkpoint copy/release calls waiting for the lock */
    int gate_gave_up;       /* this batch waited for the checkpoint long enough: no more waits */
    uint64_t gate_waited;   /* ns this batch waited for room so far */
    /* test failpoints of batches (ps_test_batch_failpoints; 0: off) */
    uint64_t t_hold_at, t_fail_at;
    int t_hold;             /* 1 armed, 2 a batch waits at t_hold_at for ps_test_batch_go */
    uint32_t page_size, reserve, usable;
    uint32_t max_key, max_cell, leaf_inline_max;
    int physical;
    int snap_codec;        /* PAGE_SNAPSHOT codec: PS_CODEC_DISABLED or PS_CODEC_SKIP_GARBAGE */
    int phys_reset;        /* the reset record is still to be logged before the first page record */
    int phys_logged;       /* the running guarded op has logged page records */
    void *handle;
    int page_fd;           /* >= 0: page misses pread here, no Python callback (ps_set_page_fd) */
    /* the page file mapped read-only for misses (pageio.c): the map, its
     * length, the file's length as last measured, and the fd it maps */
    const uint8_t *page_map;
    size_t page_map_len, page_map_file;
    int page_map_fd;

    /* the leaves gets read in place last (btree.c, read_in_place): two
     * 32-bit tags of page ids per set, the newer first */
    uint32_t (*seen)[2];

    /* page memory */
    uint8_t *mem;
    uint32_t nslots;
    slot_t *slots;
    uint32_t *free_slots;  /* slots given back; never-used slots are not listed (see fresh) */
    uint32_t nfree;
    uint32_t fresh;        /* slots [0, fresh) have been used: the rest of page memory and of
                            * the per-slot arrays is reserved but never touched (slot_take) */
    uint32_t clock_hand;
    uint32_t **pt_dir;     /* page table directory (see PT_CHUNK) */
    uint64_t pt_ndir;

    /* checkpoint buffer */
    uint8_t *cow_mem;
    uint32_t ncow;
    uint32_t *cow_free;
    uint32_t ncow_free;
    uint32_t cow_fresh;    /* buffer pages [0, cow_fresh) have been used, the rest untouched */
    uint32_t *cow_owner;   /* slot whose checkpoint image each buffer page holds (COW_NONE: free) */

    meta_t meta;
    int ready;

    /* operation state (write lock) */
    int guarded;
    uint64_t op_epoch;
    uint64_t op_frees;      /* pages the operation returned to the freelist */
    int split_open;          /* a split began rewriting pages and has not linked its new page yet */
    undo_t *undo;
    size_t nundo, undo_cap;
    uint8_t *undo_img;
    size_t undo_img_used, undo_img_cap;
    meta_t meta_saved;
    uint32_t *pins;
    size_t npins, pins_cap;
    uint8_t *scratch;      /* 2 pages: page copy, new cell */
    uint8_t *cellbuf[2];   /* separator cells moving up during splits (by level parity) */
    uint8_t *splitbuf;     /* entries of an inner node being split, in flight form */
    const uint8_t **cellp; /* cells of a node being split */
    uint32_t *cells;
    uint8_t *zero_page;

    /* WAL */
    int wal_on;
    uint8_t *wal_base;
    uint64_t wal_seg_size, wal_seq, wal_off;
    uint64_t wal_rec_left;  /* bytes of the record being written not yet placed */
    int wal_unmap;          /* segments are shared file mappings: drop written ranges (walenc.c) */
    uint64_t wal_unmapped;  /* [0, this) of the attached segment is no longer mapped */
    uint64_t wal_alloc_end; /* [0, this) of the attached segment has disk blocks: no record
                             * goes past it before ps_py_wal_grow moved it (walenc.c) */
    uint64_t wal_rec_total;
    void *seal_ctx;         /* EVP AES-256-GCM context keyed for sealed records, or NULL */
    uint8_t seal_key_id;
    uint8_t seal_salt[8];   /* salt of the attached segment's header */
    uint8_t *seal_buf;      /* ciphertext of the record being appended */
    size_t seal_cap;

    /* prefault.c: page memory populated ahead of the fresh-slot frontier */
    int pf_on, pf_stop;
    pid_t pf_pid;              /* the process whose thread it is (a fork has none) */
    pthread_t pf_thread;
    pthread_mutex_t pf_mu;
    pthread_cond_t pf_cv;
    size_t pf_goal, pf_done;   /* under pf_mu */
    size_t pf_asked;           /* under the tree write lock */
    size_t pf_cow_goal, pf_cow_done;   /* checkpoint buffer bytes to populate, populated; under pf_mu */

    /* checkpoint */
    int ckpt_active;
    uint64_t ckpt_id;
    uint64_t *ckpt_ids;

    uint64_t bad_page, blocked_page;
    char errmsg[256];
    ps_signals sig;        /* read by Python through ps_get_signals, without the lock */
    uint64_t thr_cow, thr_dirty;
    struct mv_state *mv;   /* mvcc.c: snapshots' undo log, NULL until the first snapshot */
    struct page_keys *page_keys; /* pageseal.c: keys that open sealed pages on a miss, or NULL */
    uint32_t readahead;    /* pages a scan loads ahead when it crosses into a missing leaf */
    int direct_only;       /* set under the write lock: a miss the fd cannot serve is PS_RETRY,
                            * not a call into Python (fasttable.c's waiting get) */
};

/* A checkpoint-buffer page can be taken: a given-back one or a never-used one. */
static inline int cow_available(const ps_core *c) {
    return c->ncow_free || c->cow_fresh < c->ncow;
}

/* CRC of a page with its crc field (bytes 0..4) taken as zero (crc32c.c) */
uint32_t ps_page_crc(const uint8_t *page, uint32_t page_size);

/* callbacks implemented in Python (extern "Python+C" in the cdef) */
int ps_py_read_page(void *handle, uint64_t page_id, uint8_t *buf);
int ps_py_wal_segment(void *handle, uint64_t seq, uint8_t **base_out);
int ps_py_wal_grow(void *handle, uint64_t seq, uint64_t need, uint64_t *alloc_out);

/* The core lock, taken with a short spin before sleeping.  Every hold is
 * short (one operation, or one page copied by a checkpoint writer), but a
 * holder on the other core makes a plain pthread lock sleep in the kernel
 * and the unlock pay a futex wake-up: a few microseconds per collision on a
 * VM.  During a checkpoint a writer's put collided with the copiers' per-page
 * read locks on most operations, which took its median from ~1.5 to ~8 us
 * and its p99 to ~100 us (docs/architecture.md, "the core lock").
 *
 * A writer spins longer (PS_WRLOCK_SPINS, ~125 us here) and announces itself
 * in wr_intent while it does: readers (the checkpoint's copiers, not latency
 * critical) hold off until it has the lock.  With 256 spins and no intent,
 * one copier's read locks back to back left a writer's trylocks no gap about
 * once per 150 puts of the recovery-file phase; it then slept, and its wake-up
 * on the VM took 20 us to ms (380 blocked waits per three checkpoints in one
 * run, 2-4 with the intent and the longer spin). */
#define PS_LOCK_SPINS 256
#define PS_WRLOCK_SPINS 4096
static inline void ps_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}
static inline void core_wrlock_raw(ps_core *c) {
    if (pthread_rwlock_trywrlock(&c->lock) == 0) return;
    __atomic_add_fetch(&c->wr_intent, 1, __ATOMIC_SEQ_CST);
    int i = 0;
    while (i < PS_WRLOCK_SPINS && pthread_rwlock_trywrlock(&c->lock) != 0) {
        ps_cpu_relax();
        i++;
    }
    __atomic_sub_fetch(&c->wr_intent, 1, __ATOMIC_RELEASE);
    if (i == PS_WRLOCK_SPINS) pthread_rwlock_wrlock(&c->lock);
}
/* After taking the lock in a user operation: a closed core has no page memory
 * left, so the operation must go no further (ps_close). */
#define PS_REFUSE_IF_CLOSED(c) \
    do { if ((c)->closed) { pthread_rwlock_unlock(&(c)->lock); return PS_E_CLOSED; } } while (0)
static inline void core_rdlock_raw(ps_core *c) {
    for (int i = 0; i < PS_WRLOCK_SPINS && __atomic_load_n(&c->wr_intent, __ATOMIC_ACQUIRE); i++)
        ps_cpu_relax();
    for (int i = 0; i < PS_LOCK_SPINS; i++) {
        if (pthread_rwlock_tryrdlock(&c->lock) == 0) return;
        ps_cpu_relax();
    }
    pthread_rwlock_rdlock(&c->lock);
}

/* batchgate.c */
void gate_wait(ps_core *c);
void batch_turn(ps_core *c, uint64_t done);
void batch_gate_open(ps_core *c);

/* batchneed.c */
void rollback_need_note(uint64_t pages);
uint64_t batch_need(ps_core *c, const uint8_t *b, size_t len, size_t from);
uint64_t put_need(const ps_core *c, size_t vlen);

/* The core lock for everything but the checkpoint's copy and release calls:
 * held, and no batch open that let the checkpoint in (batchgate.c).
 * The batch sets and clears the gate under the write lock; a waiter marks it
 * (1 -> 2) under none, so it is read atomically. */
static inline void core_wrlock(ps_core *c) {
    for (;;) {
        core_wrlock_raw(c);
        if (__builtin_expect(!__atomic_load_n(&c->gate, __ATOMIC_RELAXED), 1)) return;
        pthread_rwlock_unlock(&c->lock);
        gate_wait(c);
    }
}
static inline void core_rdlock(ps_core *c) {
    for (;;) {
        core_rdlock_raw(c);
        if (__builtin_expect(!__atomic_load_n(&c->gate, __ATOMIC_RELAXED), 1)) return;
        pthread_rwlock_unlock(&c->lock);
        gate_wait(c);
    }
}
/* The checkpoint's copy and release calls: they pass an open gate, and say
 * that they wait, so that a batch lets them in between two of its writes.
 * REQUIRES: what they touch under it is a page's checkpoint image and its
 * in-checkpoint state, which no write of an open batch changes (page_w
 * copies the image first; op_rollback leaves a released page released). */
static inline void ckpt_rdlock(ps_core *c) {
    __atomic_add_fetch(&c->ckpt_waiting, 1, __ATOMIC_SEQ_CST);
    core_rdlock_raw(c);
    __atomic_sub_fetch(&c->ckpt_waiting, 1, __ATOMIC_RELEASE);
}
static inline void ckpt_wrlock(ps_core *c) {
    __atomic_add_fetch(&c->ckpt_waiting, 1, __ATOMIC_SEQ_CST);
    core_wrlock_raw(c);
    __atomic_sub_fetch(&c->ckpt_waiting, 1, __ATOMIC_RELEASE);
}

/* pagemem.c */
static inline uint8_t *slot_page(const ps_core *c, uint32_t s) {
    return c->mem + (size_t)s * c->page_size;
}
static inline uint8_t *cow_page(const ps_core *c, uint32_t i) {
    return c->cow_mem + (size_t)i * c->page_size;
}
/* the page-table entry of id, or NULL if its chunk does not exist */
static inline uint32_t *pt_ent(const ps_core *c, uint64_t id) {
    uint64_t d = id >> PT_CHUNK_BITS;
    if (__builtin_expect(d >= c->pt_ndir, 0)) return NULL;
    uint32_t *ch = c->pt_dir[d];
    return ch ? ch + (id & (PT_CHUNK - 1)) : NULL;
}
static inline int64_t pt_find(const ps_core *c, uint64_t id) {
    const uint32_t *e = pt_ent(c, id);
    uint32_t v = e ? *e & PT_SLOT : 0;
    return (int64_t)v - 1;
}
/* lookup that marks the page recently used (safe under the read lock: the
 * bit is set with an atomic OR, and only when it is clear) */
static inline int64_t pt_find_touch(const ps_core *c, uint64_t id) {
    uint32_t *e = pt_ent(c, id);
    if (__builtin_expect(!e, 0)) return -1;
    uint32_t v = __atomic_load_n(e, __ATOMIC_RELAXED);
    if (__builtin_expect(!(v & PT_REF), 0) && v) __atomic_fetch_or(e, PT_REF, __ATOMIC_RELAXED);
    return (int64_t)(v & PT_SLOT) - 1;
}
int pt_reserve(ps_core *c, uint64_t id);
void pt_insert(ps_core *c, uint64_t id, uint32_t s);  /* after pt_reserve(id) */
void pt_remove(ps_core *c, uint64_t id);
/* pagemem.c: a free slot (an empty one, else a clean page evicted by the
 * clock), or PS_E_NOMEM; slot_claim makes it page id's, clean */
int64_t slot_alloc(ps_core *c);
void slot_claim(ps_core *c, uint32_t s, uint64_t id);
/* btree.c: sets of the table of leaves read in place (ps_core.seen) */
#define PS_SEEN_SET_BITS 11

/* pageio.c */
/* Copy page `id` from the map of the page file into buf (page_size bytes)
 * and check it (crc32c and page id), under either lock; nothing in page
 * memory changes.  For gets that miss only their leaf (btree.c).  RETURNS 1
 * when buf holds the page, checked; 0 when the map cannot serve it (no map
 * yet, a page beyond the file as last measured, sealed pages, a device error
 * under the map) or the copy fails its checks (a write of that page under way
 * at that moment, or a damaged page): the caller then takes the ordinary
 * load, which reads it again and names the file if it is damaged. */
int page_read_mapped(ps_core *c, uint64_t id, uint8_t *buf);
int64_t page_load(ps_core *c, uint64_t id);
void page_fd_set(ps_core *c, int fd);   /* ps_set_page_fd's work: a new fd, the old map dropped */
void page_map_drop(ps_core *c);
/* Scan readahead (pageio.c): the leaves a scan loads at once when it crosses
 * into one not in memory, at most (docs/page-memory.md) */
#define PS_SCAN_READAHEAD 16
int64_t page_readahead(ps_core *c, uint64_t *ids, size_t n, const uint64_t *next, size_t nnext);
int64_t page_preload(ps_core *c, uint64_t first_id, const uint8_t *pages, size_t n);
int64_t page_stash(ps_core *c, const uint64_t *ids, const uint8_t *pages, size_t n);
void page_drop_beyond(ps_core *c, uint64_t page_count);
/* the slot of page id, loading it on a miss if may_load (else PS_RETRY) */
static inline int64_t page_fetch(ps_core *c, uint64_t id, int may_load) {
    int64_t s = pt_find_touch(c, id);
    if (__builtin_expect(s >= 0, 1)) return s;
    if (!may_load) return PS_RETRY;
    return page_load(c, id);
}
void pin_op(ps_core *c, uint32_t s);
void unpin_op_all(ps_core *c);
int page_w(ps_core *c, uint32_t s);
int64_t page_new(ps_core *c, uint16_t type, uint64_t *id_out);
int page_free(ps_core *c, uint64_t id);
void op_begin(ps_core *c, int guarded);
void op_commit(ps_core *c);
void op_rollback(ps_core *c);
void update_throttle(ps_core *c);
void meta_to_page(const ps_core *c, uint8_t *p);
int set_err(ps_core *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* walenc.c */
typedef struct wpart { const void *p; size_t n; } wpart;
int wal_fits(const ps_core *c, uint64_t len);
int wal_append(ps_core *c, uint8_t type, const wpart *parts, int nparts,
               uint64_t *start_lsn, uint64_t *end_lsn);
/* physrec.c */
int wal_physical(ps_core *c);
void wal_physical_unlogged(ps_core *c);
int wal_page_snapshot(ps_core *c, uint64_t page_id, const uint8_t *img);
/* walseg.c: the segment header (salt: the new segment's, sealing on) */
int write_seg_header(ps_core *c, uint8_t *base, uint64_t seq, uint64_t prev_end,
                     const uint8_t *salt);
/* The WAL's record layout facts shared by walenc.c, walseg.c and walscan.c. */
#define PS_WAL_TAG 16   /* a sealed record's AES-GCM tag, counted in its len */
/* Records are laid out sealed: by the encoder (seal_ctx), or, with tags
 * reserved (ps_wal_reserve_tags: a key id and no context), by the caller,
 * who seals each record in place before its bytes leave the process. */
#define PS_WAL_SEALING(c) ((c)->seal_ctx != NULL || (c)->seal_key_id != 0)

/* walseal.c: AES-256-GCM through the run-time loaded libcrypto.  seal_gcm
 * encrypts the parts back to back into out and yields the tag; -1 on a
 * libcrypto failure (seal_ctx_free frees either kind of context). */
void *seal_ctx_new(const uint8_t key[32]);
/* pageseal.c: open sealed page `id` in place with the core's page keys (write
 * lock): 1 opened, 0 it does not authenticate, < 0 libcrypto failed */
int page_open(ps_core *c, uint64_t id, uint8_t *page);
void page_keys_free(struct page_keys *k);
void seal_ctx_free(void *ctx);
int seal_gcm(void *ctx, const uint8_t iv[12], const uint8_t *aad, size_t aad_len,
             const wpart *parts, int nparts, uint8_t *out, uint8_t tag[16]);
int seal_random(uint8_t *p, size_t n);   /* getrandom, all n bytes or -1: salts, nonces */
/* open_gcm decrypts buf in place with a context from open_ctx_new: 1 if the
 * tag authenticates, 0 if not, -1 on a libcrypto failure. */
void *open_ctx_new(const uint8_t key[32]);
int open_gcm(void *ctx, const uint8_t iv[12], const uint8_t *aad, size_t aad_len, uint8_t *buf,
             size_t n, const uint8_t tag[16]);

/* aesni.c: AES-256-GCM sealing through libcrypto's CRYPTO_gcm128 with an
 * AES-NI block cipher; fastgcm_new is NULL where the CPU or libcrypto lacks it */
int fastgcm_available(void);
void *fastgcm_new(const uint8_t key[32]);
int fastgcm_seal(void *f, const uint8_t iv[12], const uint8_t *aad, size_t aad_len, uint8_t *buf,
                 size_t n, uint8_t tag[16]);
void fastgcm_free(void *f);

/* prefault.c: huge-page page memory populated by a thread ahead of use */
void prefault_start(ps_core *c);
void prefault_need(ps_core *c, uint32_t s);
void prefault_cow(ps_core *c, uint64_t pages);
void prefault_stop(ps_core *c);

/* btree.c */
int bt_put(ps_core *c, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen,
           int allow_fast, int *fast_used);
int bt_delete(ps_core *c, const uint8_t *key, size_t klen, int allow_fast, int *fast_used);
int64_t bt_get(ps_core *c, const uint8_t *key, size_t klen, uint8_t *out, size_t cap,
               int may_load);
int64_t bt_scan(ps_core *c, const uint8_t *lo, size_t lolen, int has_lo, int lo_incl,
                const uint8_t *hi, size_t hilen, int has_hi, int hi_incl, int reverse,
                size_t max_bytes, uint8_t *out, size_t cap, size_t *out_len, int may_load);
int bt_verify(ps_core *c, ps_verify_info *info);
typedef struct bt_target { uint64_t leaf; int resident, owned; int64_t used, grow; uint32_t old_vlen; } bt_target;
int bt_put_target(ps_core *c, const uint8_t *key, size_t klen, size_t vlen, bt_target *t);
void leaf_init(ps_core *c, uint8_t *p);

/* mvcc.c: snapshots and validated commits.  The write paths call mv_capture
 * before each change and mv_op_done after op_commit / op_rollback, when c->mv
 * is set, all under the tree write lock. */
typedef struct mv_check { uint64_t snap; const uint8_t *reads; size_t len; } mv_check;
int mv_capture(ps_core *c, const char *key, size_t klen, int is_delete);
void mv_op_done(ps_core *c, int committed);
void mv_free(ps_core *c);
int mv_validate(ps_core *c, uint64_t id, const uint8_t *reads, size_t len);
/* ps_apply_batch with the reads of chk (if any) validated first, in the same hold */
int64_t core_apply_batch(ps_core *c, const char *ops, size_t len, uint64_t txid, const mv_check *chk);

#endif
