/* pagestore C core: the API that pagestore/_build.py hands to cffi (cdef) and
 * that every C file of the core includes.  This file must stay parsable by
 * cffi's cdef: no preprocessor conditionals, no includes, only declarations.
 *
 * Page layout (docs/page-format.md has the full text; all integers are
 * little-endian; P = page_size, U = P - page_reserve = usable end):
 *
 *   common header, every page type
 *   off size field
 *     0   4  crc32c over the whole page with this field zeroed; 0 in page
 *            memory, stamped only in copies headed to disk
 *     4   2  type: 1 meta, 2 leaf, 3 inner, 4 overflow, 5 freelist
 *     6   2  format = 1
 *     8   8  page_id
 *    16   8  checkpoint_id (stamped in copies headed to disk)
 *    24   2  free_lo  } the unused gap [free_lo, free_hi): always all zeros,
 *    26   2  free_hi  } so compression may drop it; exact for every page type
 *    28   4  reserved = 0
 *   [U, P)   page_reserve bytes, never used (encryption nonce and tag)
 *
 *   meta (page 0, also the file header)       leaf
 *    32   8  magic "PAGESTOR"                  32  2  nkeys n
 *    40   4  format version = 1                34  2  garbage (bytes of dead cells)
 *    44   4  page_size                         36  4  reserved
 *    48   8  root page id                      40 6n  slots in key order: u16 cell
 *    56   8  page_count                               offset, u32 key head
 *    64   8  freelist head (0 = none)          free_lo = 40 + 6n, free_hi = cell area start
 *    72   8  key count                         cell: u16 klen (bit 15: value in an
 *    80   4  tree height (1 = root is a leaf)        overflow chain), u32 vlen, key,
 *    84   4  page_reserve                            value or u64 first overflow id
 *    88      free_lo = 88, free_hi = U
 *
 *   inner                                      overflow
 *    32   2  nkeys n                           32  8  next page id (0 = last)
 *    34   2  garbage                           40  4  data length in this page
 *    36   4  reserved                          44  4  reserved
 *    40   8  child 0 (keys < key 0)            48     data; free_lo = 48 + len, free_hi = U
 *    48 16n  slots: u32 key head, u16 key offset, u16 key length,
 *            u64 child (keys >= key); child c at 40 + 16c
 *            free_lo = 48 + 16n, free_hi = cell area start
 *    cell: the key bytes only
 *
 *   freelist
 *    32   8  next freelist page id (0 = last)
 *    40   4  count n of free page ids held
 *    44   4  reserved
 *    48 8n   free page ids; free_lo = 48 + 8n, free_hi = U
 *
 *   key head: the first 4 key bytes as a big-endian number, zero-padded.
 *   Keys compare by memcmp, a proper prefix first.  The meta fields reach
 *   page 0 only at ckpt_begin (page memory keeps them in the core).
 *
 * Validity: a page read from disk is accepted only if its crc32c matches and
 * its page_id field equals the id it was read for (PS_E_CORRUPT otherwise).
 */

enum {
    PS_OK = 0,
    PS_E_NOMEM = -1,
    PS_E_CKPT_FULL = -2,
    PS_E_CORRUPT = -3,
    PS_E_IO = -4,
    PS_E_TOO_LARGE = -5,
    PS_E_ARG = -6,
    PS_E_WAL_FULL = -7,
    PS_E_NOT_FOUND = -8,
    PS_E_NEED_SPACE = -9,
    PS_E_CLOSED = -10
};

enum {
    PS_MAX_KEY = 1024,
    PS_MAX_VALUE = 16777216,
    PS_MIN_PAGE = 1024,
    PS_MAX_PAGE = 16384,
    PS_PAGE_FORMAT = 1,
    PS_META_VERSION = 1,
    PS_WAL_BLOCK = 4096,
    PS_WAL_BLOCK_HDR = 24,
    PS_WAL_REC_HDR = 17
};

enum {
    PS_PAGE_META = 1,
    PS_PAGE_LEAF = 2,
    PS_PAGE_INNER = 3,
    PS_PAGE_OVERFLOW = 4,
    PS_PAGE_FREELIST = 5
};

enum {
    PS_REC_PUT = 1,
    PS_REC_DELETE = 2,
    PS_REC_COMMIT = 3,
    PS_REC_CHECKPOINT = 4,
    PS_REC_PAGE_SNAPSHOT = 5,
    PS_REC_PAGE_DELTA = 6,
    PS_REC_ROLLBACK = 7
};

/* PAGE_SNAPSHOT codec byte (checkpoint/pagerecords.py): low 7 bits the codec
 * id of checkpoint/compression.py, bit 7 "free gap dropped".  The C encoder
 * applies only these two; the general codecs run in Python. */
enum {
    PS_SNAP_DISABLED = 0,
    PS_SNAP_SKIP_GARBAGE = 1,
    PS_SNAP_GAP_BIT = 0x80
};

typedef struct ps_core ps_core;

/* Counters the core keeps; Python reads them through a pointer, no lock. */
typedef struct ps_signals {
    uint64_t pages_dirtied;   /* monotonic count of clean -> dirty */
    uint64_t dirty_pages;
    uint64_t ckpt_pages;      /* pages still flagged in-checkpoint */
    uint64_t ckpt_written;    /* pages copied by ps_ckpt_copy in this checkpoint */
    uint64_t cow_used;
    uint64_t cow_capacity;
    uint64_t cow_peak;
    uint64_t slots_total;
    uint64_t slots_used;
    uint64_t page_loads;
    uint64_t evictions;
    uint64_t wal_end_lsn;
    uint64_t throttle_hint;
    uint64_t rollbacks;
    uint64_t cow_copies;
    uint64_t checkpoint_id;
    uint64_t ckpt_lock_ns;    /* how long the last ps_ckpt_begin held the tree write lock */
    uint64_t prefaulted_bytes; /* page memory populated ahead of use (prefault.c) */
    uint64_t cow_prefaulted_bytes; /* checkpoint buffer populated for checkpoints (prefault.c) */
} ps_signals;

typedef struct ps_verify_info {
    uint64_t leaf_pages;
    uint64_t inner_pages;
    uint64_t overflow_pages;
    uint64_t freelist_pages;
    uint64_t free_ids;
    uint64_t keys;
    uint64_t height;
    uint64_t page_count;
} ps_verify_info;

uint32_t ps_crc32c(uint32_t crc, const uint8_t *buf, size_t n);
uint32_t ps_crc32c_sw(uint32_t crc, const uint8_t *buf, size_t n);
int ps_crc32c_hw_available(void);
uint32_t ps_page_crc(const uint8_t *page, uint32_t page_size);
void ps_seal_page(uint8_t *page, uint32_t page_size, uint64_t page_id);
int ps_check_page(const uint8_t *page, uint32_t page_size, uint64_t page_id);

/* signals: a struct the caller owns and keeps alive past ps_destroy (NULL: internal) */
int ps_create(uint32_t page_size, uint64_t memory_size, uint64_t ckpt_buffer_size,
              uint32_t page_reserve, int physical_wal, void *handle, ps_signals *signals,
              ps_core **out);
/* ps_shut: wait for the operations holding the core's lock and refuse every
 * later user operation (put, get, delete, apply_batch, scan, count, height,
 * verify, read_live_page, log_record: PS_E_CLOSED); checkpoint calls still run.
 * ps_close: ps_shut, then free the page memory; the struct stays valid for late
 * callers until ps_destroy (which closes first if needed). */
void ps_shut(ps_core *c);
void ps_close(ps_core *c);
void ps_destroy(ps_core *c);
ps_signals *ps_get_signals(ps_core *c);
uint64_t ps_bad_page(ps_core *c);
uint64_t ps_blocked_page(ps_core *c);
const char *ps_errmsg(ps_core *c);
uint32_t ps_max_key(ps_core *c);
uint32_t ps_max_inline(ps_core *c);

int ps_format_new(ps_core *c);
int ps_open_existing(ps_core *c, uint64_t page_count);
int ps_wal_attach(ps_core *c, uint8_t *base, uint64_t seg_size, uint64_t seq,
                  uint64_t offset, uint64_t prev_end_lsn, int write_header);
void ps_wal_disable(ps_core *c);
/* on = 1 only when every segment buffer is a MAP_SHARED mapping of its file:
 * the encoder then unmaps (MADV_DONTNEED) the ranges it has finished writing.
 * On any other buffer that would zero the data. */
void ps_wal_set_unmap(ps_core *c, int on);
/* Per-record AES-256-GCM sealing of the WAL (walenc.c, walseal.c): a 32-byte
 * key and key_id 1..255, or key_id 0 to stop sealing; only while no WAL is
 * attached.  Needs libcrypto (ps_wal_seal_available). */
int ps_wal_seal_available(void);
/* sealing prefers the AES-NI path of aesni.c where it loads (ps_gcm_fast_available);
 * ps_gcm_set_fast(0) makes new contexts use EVP only; ps_gcm_seal seals once
 * through the chosen path (fast 1 / EVP 0): PS_OK, PS_E_ARG if that path is missing */
int ps_gcm_fast_available(void);
void ps_gcm_set_fast(int on);
int ps_gcm_seal(const uint8_t *key, const uint8_t *iv, const uint8_t *aad, size_t aad_len,
                const uint8_t *in, size_t n, uint8_t *out, uint8_t *tag, int fast);
int ps_wal_set_key(ps_core *c, const uint8_t *key, uint32_t key_len, uint32_t key_id);
int ps_set_snapshot_codec(ps_core *c, int codec);

int64_t ps_put(ps_core *c, const char *key, size_t klen, const char *val, size_t vlen);
int64_t ps_get(ps_core *c, const char *key, size_t klen, char *out, size_t cap);
int64_t ps_delete(ps_core *c, const char *key, size_t klen);
int64_t ps_apply_batch(ps_core *c, const char *ops, size_t len, uint64_t txid);
int64_t ps_apply_log(ps_core *c, const char *recs, size_t len);
int64_t ps_scan(ps_core *c, const char *lo, size_t lolen, int has_lo, int lo_incl,
                const char *hi, size_t hilen, int has_hi, int hi_incl, int reverse,
                size_t max_bytes, char *out, size_t cap, size_t *out_len);
int64_t ps_log_record(ps_core *c, int type, const char *payload, size_t len);
int64_t ps_count(ps_core *c);
int64_t ps_height(ps_core *c);
int ps_verify(ps_core *c, ps_verify_info *info);
int ps_read_live_page(ps_core *c, uint64_t page_id, uint8_t *out);
int64_t ps_preload(ps_core *c, uint64_t first_id, const uint8_t *pages, size_t n);
int64_t ps_stash_pages(ps_core *c, const uint64_t *ids, const uint8_t *pages, size_t n);

/* replay's fast path over one WAL segment buffer (walenc.c); with key (32
 * bytes) and the header's salt (8 bytes) over a record-sealed segment, whose
 * records come out in plaintext form (key NULL: a plain segment).  PS_E_ARG
 * for a key without libcrypto (ps_wal_seal_available) or without a salt. */
int64_t ps_wal_scan(const uint8_t *seg, uint64_t seg_size, uint64_t base_lsn, uint64_t off,
                    uint8_t *out, size_t cap, size_t *out_len, uint64_t *end_off,
                    int *tx_too_big, const uint8_t *key, const uint8_t *salt);

int ps_ckpt_begin(ps_core *c, uint64_t checkpoint_id, const char *payload, size_t plen,
                  uint64_t **ids_out, uint64_t *n_out, uint64_t *lsn_out);
int ps_ckpt_copy(ps_core *c, const uint64_t *ids, size_t n, uint8_t *out);
/* ps_ckpt_copy + ps_recframe per page, no intermediate buffer; bytes framed or PS_E_* */
int64_t ps_ckpt_copy_frame(ps_core *c, const uint64_t *ids, size_t n, int codec,
                           uint8_t *out, size_t cap, uint64_t *gap_fallbacks);
int ps_ckpt_release(ps_core *c, const uint64_t *ids, size_t n);
int ps_ckpt_end(ps_core *c);
int ps_ckpt_pages_with_copy(ps_core *c, uint64_t *out, size_t cap, size_t *n_out);
void ps_set_throttle_thresholds(ps_core *c, double cow_fraction, double dirty_fraction);
/* page misses read the page file through this fd (plain posix page file), -1: the callback */
void ps_set_page_fd(ps_core *c, int fd);
/* write page images in place (ids ascending; adjacent runs in one pwrite); bytes or -errno */
int64_t ps_pwrite_pages(int fd, const uint64_t *ids, size_t n, const uint8_t *images, uint32_t page_size);

/* AES-256-GCM in bulk (pageseal.c; formats in pagestore/cipher.py and
 * checkpoint/format.py), needs ps_wal_seal_available.  ps_seal_pages seals n
 * plain pages of src into dst: 0, PS_E_CORRUPT with *bad the index of a page
 * whose last 32 bytes are not zero, PS_E_ARG, or PS_E_IO (libcrypto, random).
 * ps_seal_records seals, in place, the plain records in buf[0, len) whose
 * first byte sits at file `offset`: the new length, PS_E_NEED_SPACE when it
 * would exceed cap (buf untouched), PS_E_CORRUPT for malformed or already
 * sealed records, PS_E_ARG, PS_E_NOMEM or PS_E_IO. */
int64_t ps_seal_pages(const uint8_t *key, uint32_t key_id, const uint8_t *ad_prefix,
                      size_t prefix_len, const uint64_t *ids, size_t n, const uint8_t *src,
                      uint8_t *dst, uint32_t page_size, uint64_t *bad);
int64_t ps_seal_records(const uint8_t *key, uint32_t key_id, uint64_t checkpoint_id,
                        uint32_t writer, uint64_t offset, uint8_t *buf, size_t len, size_t cap);
/* ps_open_pages opens n sealed pages (ids first_id..) in buf in place; keytab
 * holds 256 keys of 32 bytes (key id k at k * 32) then 256 flags (1: held).
 * Returns the number opened; a page that does not authenticate (or names a
 * key id not held) is zeroed when zero_bad, else PS_E_CORRUPT with *bad its
 * index (pages before it are open, it and those after are not). */
int64_t ps_open_pages(const uint8_t *keytab, const uint8_t *ad_prefix, size_t prefix_len,
                      uint64_t first_id, size_t n, uint8_t *buf, uint32_t page_size,
                      int zero_bad, uint64_t *bad);

/* recovery-file records in bulk, no cipher, codec 0 disabled / 1 skip_garbage /
 * 4 lz4 (fast mode; only when ps_lz4_available: the system's liblz4.so.1)
 * (recframe.c; the format is checkpoint/format.py's).  ps_recframe frames n
 * page images into out (cap >= n * (page_size + 18)) and returns the bytes
 * written; ps_recparse decodes whole valid records of those codecs from buf
 * into page images, stopping at the first one it does not take, and returns
 * the count */
int ps_lz4_available(void);
int64_t ps_recframe(const uint8_t *images, const uint64_t *ids, size_t n, uint32_t page_size,
                    int codec, uint8_t *out, size_t cap, uint64_t *gap_fallbacks);
int64_t ps_compact_pages(const uint8_t *images, size_t n, uint32_t page_size, uint8_t *out,
                         uint32_t *lens, uint8_t *flags);
int64_t ps_frame_heads(uint8_t *buf, size_t cap, size_t n, const uint64_t *ids,
                       const uint8_t *codecs, const uint8_t *flags, const uint32_t *lens);
int64_t ps_recparse(const uint8_t *buf, size_t len, uint32_t page_size, uint8_t *images,
                    uint64_t *ids, size_t max_pages, size_t *consumed);
