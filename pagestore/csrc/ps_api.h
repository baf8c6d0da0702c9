/* pagestore C core: the product API that pagestore/_build.py hands to cffi
 * (cdef) and that every C file of the core includes.  Entry points only tests
 * call are declared apart, in ps_test.h.  This file must stay parsable by
 * cffi's cdef: no preprocessor conditionals, no includes, only declarations.
 *
 * Contracts (LevelDB style, one comment per function below):
 *   REQUIRES  what the caller must hold or have done;
 *   LOCK      the core's tree lock (a writer-preferring rwlock) the call takes
 *             itself: "read", "write", or "none";
 *   CALLS     which Python callbacks it may make (they run on the caller's
 *             thread with the tree WRITE lock held): read_page (a page miss,
 *             unless ps_set_page_fd's fd serves it), wal_segment (the WAL
 *             segment is full and the next one is needed), wal_grow (a
 *             record would pass the segment's allocated end: the WAL
 *             allocates further or raises; every call that may append a
 *             WAL record may make it);
 *   RETURNS   what the result means (PS_E_* are negative);
 *   OWNS      who owns each pointer and for how long.
 *
 * Lock order, everywhere (C and Python): tree lock -> checkpointer condition
 * -> WAL segment lock.  A callback may take the WAL segment lock and may do
 * I/O (wal_segment creates or maps the next segment file when no spare one
 * is ready; read_page preads and decrypts a page) but must never call back
 * into the core (the tree lock is not recursive) nor wait for a thread that
 * needs the tree lock.  A call on a core that takes no lock reads only the
 * core's counters, limits and last-error fields.
 *
 * The batch gate (batchgate.c): between two writes of a batch
 * (ps_apply_batch, ps_txn_commit) the batch may unlock so that the
 * checkpoint's copy and release calls get in; until the batch returns,
 * every other call that takes the tree lock waits for it.  The calls that
 * pass the gate say "LOCK read/write, passes the gate" below. 
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
    PS_E_CLOSED = -10,
    PS_E_CONFLICT = -11,     /* a transaction's reads changed before its commit (mvcc.c) */
    PS_E_SNAP_OLD = -12      /* the snapshot was dropped to keep snapshot memory in bounds */
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

/* Page header and meta page byte offsets (the table above); the single source
 * for the Python side too (pagestore/_native exports them). */
enum {
    PS_PH_CRC = 0,
    PS_PH_TYPE = 4,
    PS_PH_FORMAT = 6,
    PS_PH_PAGE_ID = 8,
    PS_PH_CHECKPOINT_ID = 16,
    PS_PH_FREE_LO = 24,
    PS_PH_FREE_HI = 26,
    PS_PH_RESERVED = 28,
    PS_PAGE_HEADER_SIZE = 32,
    PS_MH_MAGIC = 32,
    PS_MH_VERSION = 40,
    PS_MH_PAGE_SIZE = 44,
    PS_MH_ROOT = 48,
    PS_MH_PAGE_COUNT = 56,
    PS_MH_FREE_HEAD = 64,
    PS_MH_KEY_COUNT = 72,
    PS_MH_HEIGHT = 80,
    PS_MH_RESERVE = 84,
    PS_MH_END = 88,
    /* an encrypted store's sealed page: key id, 3 zero bytes, nonce, tag at
     * [P - 32, P) (pagestore/cipher.py's format; pageseal.c) */
    PS_SEALED_PAGE_TRAILER = 32
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

/* Page codec ids, as stored in recovery-file records and in PAGE_SNAPSHOT
 * WAL records (checkpoint/compression.py names them).  C applies disabled,
 * skip_garbage and lz4 (recframe.c); snappy and zstd run in Python only.
 * A PAGE_SNAPSHOT's codec byte is the codec id with PS_SNAP_GAP_BIT set when
 * the free gap was dropped. */
enum {
    PS_CODEC_DISABLED = 0,
    PS_CODEC_SKIP_GARBAGE = 1,
    PS_CODEC_SNAPPY = 2,
    PS_CODEC_ZSTD = 3,
    PS_CODEC_LZ4 = 4,
    PS_SNAP_GAP_BIT = 0x80
};

/* Recovery-file records (checkpoint/format.py has the offset table and the
 * validity rule): an 18-byte header (u64 page id, u8 codec, u8 flags, u32
 * stored length, u32 crc32c of header bytes [0, 14) then the payload), then
 * the payload; the file starts with a 32-byte header. */
enum {
    PS_RECFILE_HEADER_SIZE = 32,
    PS_RECORD_HEADER_SIZE = 18,
    PS_RECORD_CRC_SPAN = 14,
    PS_RECORD_GAP_SKIPPED = 1,        /* flags bit 0 */
    PS_RECORD_ENCRYPTED = 2,          /* flags bit 1 */
    PS_RECORD_SEAL_OVERHEAD = 29,     /* an ENCRYPTED payload's key id + nonce + tag */
    PS_RECORD_MAX_OVER_PAGE = 64      /* a stored length is at most page size + this */
};

/* Scan batch: what ps_scan writes into `out`, a pickle (protocol 4) of a list
 * of (key, value) bytes pairs that pickle.loads reads as it is:
 *
 *   off  size  bytes
 *     0     2  0x80 0x04        PROTO 4
 *     2     1  ']'              EMPTY_LIST
 *     3     1  '('              MARK
 *     4        per item, in scan order:
 *                'C' u8 n  key  (SHORT_BINBYTES, n < 256) or 'B' u32 n key (BINBYTES)
 *                the value the same way
 *                0x86            TUPLE2
 *   end-2   1  'e'              APPENDS
 *   end-1   1  '.'              STOP
 *
 * An item takes at most 5 + klen + 5 + vlen + 1 bytes, the frame 6. */
enum {
    PS_SCAN_FRAME_BYTES = 6,
    PS_SCAN_ITEM_OVERHEAD = 11
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
    uint64_t slots_touched;   /* page-memory slots ever used: the rest is reserved, never touched */
    uint64_t cow_touched;     /* checkpoint-buffer pages ever used */
    uint64_t rollback_pages;  /* pages the last rolled-back operation had changed or created
                               * (a put of a large value: the pages it needs, if more) */
    uint64_t rollback_ops;    /* writes in that operation (1 for a put or delete, a batch's count) */
    uint64_t rollback_ops_done; /* of them, applied before it failed */
    uint64_t batch_turns;     /* times a batch let the checkpoint in between two writes */
    uint64_t batch_room_waits; /* of them, waits for the checkpoint to release pages */
    uint64_t leaves_read_in_place; /* gets answered from a leaf read from the page file's map
                                    * into the get's own buffer, not loaded (btree.c) */
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

/* ---- pages, no core (crc32c.c) ---------------------------------------------- */

/* LOCK none.  Stamps page_id and the crc32c into a page image of page_size
 * bytes the caller owns (the form a page has on disk). */
void ps_seal_page(uint8_t *page, uint32_t page_size, uint64_t page_id);
/* LOCK none.  RETURNS 1 when the image's crc and page-id field hold, else 0. */
int ps_check_page(const uint8_t *page, uint32_t page_size, uint64_t page_id);

/* ---- lifetime (core.c) --------------------------------------------------------- */

/* LOCK none.  RETURNS PS_OK with *out a new core (OWNS: the caller, freed by
 * ps_destroy), PS_E_ARG for sizes out of range, PS_E_NOMEM.  handle is passed
 * back to the callbacks untouched; the caller keeps what it names alive
 * until ps_destroy. */
int ps_create(uint32_t page_size, uint64_t memory_size, uint64_t ckpt_buffer_size,
              uint32_t page_reserve, int physical_wal, void *handle, ps_core **out);
/* LOCK write (waits for the operations in flight).  Every later user
 * operation (put, get, delete, apply_batch, scan, count, height, verify,
 * log_record) returns PS_E_CLOSED; the checkpoint calls still run.  In a
 * forked child it only marks the core closed. */
void ps_shut(ps_core *c);
/* LOCK write.  ps_shut, then frees the page memory; the struct, its lock and
 * its signals stay valid for late callers until ps_destroy. */
void ps_close(ps_core *c);
/* LOCK none (write, through ps_close).  REQUIRES no other thread in the core
 * and no later call.  Closes if needed, stops the prefault thread and frees
 * the struct. */
void ps_destroy(ps_core *c);
/* LOCK none.  OWNS: the core; valid until ps_destroy, written by the core
 * (and its prefault thread) without a lock, so fields are read as snapshots. */
ps_signals *ps_get_signals(ps_core *c);
/* LOCK none.  The page of the last PS_E_CORRUPT / PS_E_CKPT_FULL, and the
 * message of the last failure (OWNS: the core; overwritten by the next
 * failure, of any thread: read them right after the failing call). */
uint64_t ps_bad_page(ps_core *c);
uint64_t ps_blocked_page(ps_core *c);
/* LOCK none.  For the calling thread's last write that failed with PS_E_NOMEM
 * (rolled back): pages it has proven it needs in page memory at once, a lower
 * bound (batchneed.c).  More than slots_total: it can never fit. */
uint64_t ps_rollback_need(void);
const char *ps_errmsg(ps_core *c);
/* LOCK none.  The effective key limit and the largest inline value for an
 * empty key, fixed by page size and reserve at ps_create. */
uint32_t ps_max_key(ps_core *c);
uint32_t ps_max_inline(ps_core *c);

/* LOCK write.  CALLS none.  A new store: the meta page and an empty root leaf
 * in page memory.  RETURNS PS_OK, PS_E_ARG if already formatted or opened. */
int ps_format_new(ps_core *c);
/* LOCK write.  CALLS read_page (page 0).  An existing store of page_count pages
 * (the file's): reads the meta page, drops stashed pages beyond its count.
 * RETURNS PS_OK, PS_E_CORRUPT (bad meta page), PS_E_IO (callback raised). */
int ps_open_existing(ps_core *c, uint64_t page_count);

/* ---- WAL encoder (walenc.c, walseg.c, physrec.c, walseal.c) -------------------- */

/* LOCK write.  Records are appended into base (segment seq, seg_size bytes,
 * a multiple of PS_WAL_BLOCK) from offset on; write_header 1 writes the
 * segment header (with prev_end_lsn), 0 checks it against the key set by
 * ps_wal_set_key.  OWNS: the caller keeps base mapped and alive until the
 * core has taken the next segment through wal_segment and one more after it,
 * or until ps_wal_disable / ps_close.  RETURNS PS_OK, PS_E_ARG. */
int ps_wal_attach(ps_core *c, uint8_t *base, uint64_t seg_size, uint64_t seq,
                  uint64_t offset, uint64_t prev_end_lsn, int write_header);
/* LOCK write.  Log nothing from now on; the core forgets the segment. */
void ps_wal_disable(ps_core *c);
/* LOCK write.  on = 1 only when every segment buffer is a MAP_SHARED mapping
 * of its file: the encoder then unmaps (MADV_DONTNEED) the ranges it has
 * finished writing.  On any other buffer that would zero the data. */
void ps_wal_set_unmap(ps_core *c, int on);
/* LOCK none.  1 when libcrypto could be loaded (dlopen, once): WAL record
 * sealing, the bulk page and record sealing below, sealed ps_wal_scan. */
int ps_wal_seal_available(void);
/* LOCK write.  REQUIRES no WAL attached (before ps_wal_attach or after
 * ps_wal_disable) and ps_wal_seal_available.  Seals every later record with
 * AES-256-GCM under key (32 bytes, copied) and writes key_id 1..255 into the
 * segment headers; key_id 0 stops sealing.  RETURNS PS_OK, PS_E_ARG, PS_E_NOMEM. */
int ps_wal_set_key(ps_core *c, const uint8_t *key, uint32_t key_len, uint32_t key_id);
/* LOCK write.  REQUIRES no WAL attached and no key set.  Lays every later
 * record out as a sealed one (len counts a 16-byte tag, written as zeros; crc
 * over the plaintext) in segments whose headers carry flags 2 and key_id
 * 1..255 but no salt or key check: the caller seals headers and records in
 * place (wal/recseal.py) before their bytes reach a file.  The fallback when
 * libcrypto cannot be loaded; key_id 0 stops it.  RETURNS PS_OK, PS_E_ARG. */
int ps_wal_reserve_tags(ps_core *c, uint32_t key_id);
/* LOCK write.  PAGE_SNAPSHOT codec of the physical mode: PS_CODEC_DISABLED or
 * PS_CODEC_SKIP_GARBAGE (the gap dropped).  RETURNS PS_OK, PS_E_ARG. */
int ps_set_snapshot_codec(ps_core *c, int codec);

/* ---- the tree (core.c, btree.c) ------------------------------------------------ */

/* put / delete / apply_batch: LOCK write.  CALLS read_page, wal_segment.
 * RETURNS the end LSN of the operation's last WAL record (0 without WAL), or
 * PS_E_NOT_FOUND (delete of an absent key), PS_E_TOO_LARGE, PS_E_CLOSED, or,
 * with the operation rolled back completely (nothing of it visible; a
 * batch's records end in a ROLLBACK record), PS_E_NOMEM (page memory full of dirty or
 * in-checkpoint pages), PS_E_CKPT_FULL (ps_blocked_page names the page),
 * PS_E_WAL_FULL (wal_segment had no segment, or wal_grow no space), PS_E_IO (a callback raised),
 * PS_E_CORRUPT (ps_bad_page).  Keys, values and ops are the caller's, read
 * during the call only.  apply_batch's ops are packed entries (u8 op 1 put /
 * 2 delete, u32 klen, u32 vlen, key, value), applied atomically under txid
 * (0: the core picks the WAL end LSN, which never repeats). */
int64_t ps_put(ps_core *c, const char *key, size_t klen, const char *val, size_t vlen);
int64_t ps_delete(ps_core *c, const char *key, size_t klen);
int64_t ps_apply_batch(ps_core *c, const char *ops, size_t len, uint64_t txid);
/* LOCK read; on a page miss, again under write.  CALLS read_page (under write).
 * RETURNS the value's length n, copied into out when n <= cap (otherwise call
 * again with n bytes), PS_E_NOT_FOUND, PS_E_NOMEM (no slot for a miss),
 * PS_E_CORRUPT, PS_E_IO, PS_E_CLOSED. */
int64_t ps_get(ps_core *c, const char *key, size_t klen, char *out, size_t cap);
/* LOCK write.  CALLS read_page.  Replays raw PUT/DELETE WAL records (block
 * headers removed, as ps_wal_scan gives them) without logging.  RETURNS the
 * count applied, or a status as for ps_put. */
int64_t ps_apply_log(ps_core *c, const char *recs, size_t len);
/* LOCK read; on a page miss, again under write.  CALLS read_page (under write).
 * The items within the bounds (has_lo/has_hi 0: unbounded), in order or
 * reversed, as a scan batch (above) in out[0, *out_len): at least one item
 * if any exists, stopping after max_bytes of keys and values or when out is
 * full.  RETURNS the item count; PS_E_NEED_SPACE with *out_len the cap one
 * item needs; PS_E_NOMEM, PS_E_CORRUPT, PS_E_IO, PS_E_CLOSED. */
int64_t ps_scan(ps_core *c, const char *lo, size_t lolen, int has_lo, int lo_incl,
                const char *hi, size_t hilen, int has_hi, int hi_incl, int reverse,
                size_t max_bytes, char *out, size_t cap, size_t *out_len);
/* LOCK write.  CALLS wal_segment.  Appends a record of type 1..255 made by
 * Python (e.g. ROLLBACK).  RETURNS its end LSN (0 without WAL), PS_E_ARG,
 * PS_E_TOO_LARGE, PS_E_WAL_FULL, PS_E_IO, PS_E_CLOSED. */
int64_t ps_log_record(ps_core *c, int type, const char *payload, size_t len);

/* ---- snapshots and validated commits (mvcc.c) ---------------------------------- */

/* Snapshot figures, read by ps_snap_stats. */
typedef struct ps_snap_info {
    uint64_t open;           /* live snapshots */
    uint64_t oldest_age_ns;  /* age of the oldest live one (0: none) */
    uint64_t bytes;          /* undo-log bytes held for them */
    uint64_t entries;        /* undo-log entries held */
    uint64_t too_old;        /* snapshots dropped at the bound since the core was made */
} ps_snap_info;

/* LOCK write.  A snapshot of the tree as of now.  Every later write keeps the
 * before-image it replaces while any snapshot is live, up to limit bytes over
 * all snapshots (checked at each write; past it the oldest live snapshots
 * become too old).  RETURNS a handle >= 0, PS_E_NOMEM, PS_E_CLOSED. */
int64_t ps_snap_open(ps_core *c, uint64_t limit);
/* LOCK write.  Ends a snapshot (a too-old one too) and frees what only it
 * held.  RETURNS PS_OK, PS_E_ARG (not a live handle). */
int ps_snap_close(ps_core *c, uint64_t id);
/* LOCK read; on a page miss, again under write.  CALLS read_page (under write).
 * As ps_get, as of the snapshot; also PS_E_SNAP_OLD, PS_E_ARG (bad handle). */
int64_t ps_snap_get(ps_core *c, uint64_t id, const char *key, size_t klen, char *out, size_t cap);
/* LOCK read; on a page miss, again under write.  CALLS read_page (under write).
 * In one hold: ps_scan's batch of the tree now into out, and into ovl the
 * overlay, a pickle of a list of (key, value-or-None) for every key within
 * the bounds changed since the snapshot, with its value then (None: absent),
 * in scan order.  The snapshot's items up to the batch's last key are the
 * batch with the overlay applied; an empty batch means the overlay holds all
 * that remains.  RETURNS the batch's item count; PS_E_NEED_SPACE with
 * *ovl_len > ovl_cap (the overlay's size) or else *out_len (one item's cap);
 * PS_E_SNAP_OLD, PS_E_ARG, and as ps_scan.  Buffers are the caller's. */
int64_t ps_snap_scan(ps_core *c, uint64_t id, const char *lo, size_t lolen, int has_lo,
                     int lo_incl, const char *hi, size_t hilen, int has_hi, int hi_incl,
                     int reverse, size_t max_bytes, char *out, size_t cap, size_t *out_len,
                     char *ovl, size_t ovl_cap, size_t *ovl_len);
/* LOCK read; on a page miss, again under write.  CALLS read_page (under write).
 * RETURNS the key count as of the snapshot, PS_E_SNAP_OLD, PS_E_ARG, PS_E_CLOSED. */
int64_t ps_snap_count(ps_core *c, uint64_t id);
/* LOCK read.  Fills *info.  RETURNS PS_OK, PS_E_CLOSED. */
int ps_snap_stats(ps_core *c, ps_snap_info *info);
/* LOCK write.  From now on every write keeps its before-image, stamped with
 * the end of its last WAL record, until that end is <= *acked (the log's
 * acknowledged end, which the caller advances).  OWNS nothing: *acked is the
 * caller's and must outlive the core.  RETURNS PS_OK, PS_E_NOMEM, PS_E_CLOSED. */
int ps_undo_keep(ps_core *c, const uint64_t *acked);
/* LOCK write.  CALLS read_page.  The log failed: puts back, newest first, the
 * before-image of every write whose records end past acked (kept since
 * ps_undo_keep), and refuses every later put, delete and batch (PS_E_IO,
 * nothing applied), in one hold.  RETURNS the WAL's end LSN at the fence,
 * PS_E_NOMEM / PS_E_CKPT_FULL (an undo found no room: left half done),
 * PS_E_CLOSED. */
int64_t ps_wal_fence(ps_core *c, uint64_t acked);
/* LOCK write.  CALLS read_page, wal_segment.  ps_apply_batch, applied only if
 * no key the transaction read was written after snapshot id, checked in the
 * same hold.  reads: entries u8 kind; 1 (a key): u32 klen, key; 2 (a range
 * [lo, hi)): u8 flags (1 has lo, 2 has hi), u32 lolen, u32 hilen, lo, hi.
 * RETURNS as ps_apply_batch, or PS_E_CONFLICT (also when the snapshot became
 * too old) with nothing applied.  The snapshot stays open. */
int64_t ps_txn_commit(ps_core *c, uint64_t id, const char *reads, size_t rlen, const char *ops,
                      size_t len, uint64_t txid);
/* LOCK read.  RETURNS the key count / tree height, or PS_E_CLOSED. */
int64_t ps_count(ps_core *c);
int64_t ps_height(ps_core *c);
/* LOCK write.  CALLS read_page.  Walks every reachable page and the freelist
 * (order, links, free space, zeroed gaps, page ids) into *info.  RETURNS
 * PS_OK, PS_E_CORRUPT (ps_bad_page, ps_errmsg), PS_E_NOMEM, PS_E_IO, PS_E_CLOSED. */
int ps_verify(ps_core *c, ps_verify_info *info);
/* LOCK write.  CALLS none.  Installs on-disk images of the consecutive pages
 * first_id.. into free slots (replay's prefetch), checked like a miss; skips
 * resident, out-of-range and failing pages; never evicts.  RETURNS how many
 * were installed, PS_E_ARG before ps_open_existing / ps_format_new. */
int64_t ps_preload(ps_core *c, uint64_t first_id, const uint8_t *pages, size_t n);
/* LOCK write.  REQUIRES before ps_open_existing.  Keeps images just restored
 * in place as clean resident pages (recovery's restore); failing images
 * skipped, a repeated id replaces its image.  RETURNS how many were kept. */
int64_t ps_stash_pages(ps_core *c, const uint64_t *ids, const uint8_t *pages, size_t n);

/* ---- WAL replay (walscan.c) ------------------------------------------------------- */

/* LOCK none, no core.  Replay's fast path over one segment buffer seg (the
 * caller's, seg_size bytes, byte 0 at base_lsn) from offset off: copies the
 * valid simple records (PUT/DELETE with txid 0, whole transactions up to a
 * matching COMMIT) with block headers removed into out[0, *out_len), stopping
 * before the first that is not or does not fit cap; *end_off is where the
 * Python reader goes on, *tx_too_big set when a transaction at off exceeds
 * cap.  With key (32 bytes) and the header's salt (8 bytes) a record-sealed
 * segment, whose records come out in plaintext form.  RETURNS the records
 * consumed, PS_E_ARG (a key without libcrypto or without a salt). */
int64_t ps_wal_scan(const uint8_t *seg, uint64_t seg_size, uint64_t base_lsn, uint64_t off,
                    uint8_t *out, size_t cap, size_t *out_len, uint64_t *end_off,
                    int *tx_too_big, const uint8_t *key, const uint8_t *salt);

/* ---- checkpoint hooks (core.c; DESIGN.md §3 steps 1, 3, 5, 6) ------------------ */

/* LOCK write (its hold is signals.ckpt_lock_ns).  CALLS wal_segment.  Step 1:
 * writes the meta fields into page 0, flags every dirty page in-checkpoint
 * and logs CHECKPOINT(checkpoint_id) (physical mode: PAGE_SNAPSHOTs first).
 * RETURNS PS_OK with *ids_out the page ids ascending (OWNS: the core, valid
 * until ps_ckpt_end), *n_out their count, *lsn_out where the CHECKPOINT record
 * starts (0 without WAL); PS_E_ARG when a checkpoint is running or the store
 * is not open; a WAL status as for ps_put. */
int ps_ckpt_begin(ps_core *c, uint64_t checkpoint_id, uint64_t **ids_out, uint64_t *n_out,
                  uint64_t *lsn_out);
/* LOCK read, per page, passes the gate.  CALLS none.  The checkpoint image (COW copy or live
 * page) of each in-checkpoint page into out (n * page_size bytes, the
 * caller's), CRC and checkpoint id stamped.  RETURNS PS_OK, PS_E_ARG (a page
 * not in the checkpoint: ps_bad_page). */
int ps_ckpt_copy(ps_core *c, const uint64_t *ids, size_t n, uint8_t *out);
/* LOCK read, per page, passes the gate.  CALLS none.  ps_ckpt_copy then ps_recframe per page,
 * no intermediate buffer.  RETURNS the bytes framed into out (cap >= n *
 * (page_size + PS_RECORD_HEADER_SIZE)), or PS_E_ARG as either would. */
int64_t ps_ckpt_copy_frame(ps_core *c, const uint64_t *ids, size_t n, int codec,
                           uint8_t *out, size_t cap, uint64_t *gap_fallbacks);
/* LOCK write, passes the gate.  The pages are on disk: clears their in-checkpoint flag and
 * frees their COW copies (ids not in the checkpoint are ignored). */
void ps_ckpt_release(ps_core *c, const uint64_t *ids, size_t n);
/* LOCK write, passes the gate.  The checkpoint is over: releases every page still flagged. */
void ps_ckpt_end(ps_core *c);
/* LOCK read, passes the gate.  The in-checkpoint pages holding a COW copy, ascending, into out
 * (cap ids, the caller's), *n_out their count.  RETURNS PS_OK, PS_E_NEED_SPACE. */
int ps_ckpt_pages_with_copy(ps_core *c, uint64_t *out, size_t cap, size_t *n_out);
/* LOCK write.  signals.throttle_hint is set while cow_used or dirty_pages is
 * at or over these fractions of their capacity (0: that signal off). */
void ps_set_throttle_thresholds(ps_core *c, double cow_fraction, double dirty_fraction);

/* ---- page file (pagemem.c) --------------------------------------------------------- */

/* LOCK write.  Page misses pread this fd (a plain posix page file, the
 * caller's, open until reset); -1: through read_page.  A short read or a
 * failed check still goes to read_page, which names the file. */
void ps_set_page_fd(ps_core *c, int fd);
/* LOCK write.  The store's pages are sealed (pagestore/cipher.py's format):
 * a miss read through ps_set_page_fd's fd is opened here, in C, with these
 * keys (keytab: ps_open_pages' table; ad_prefix: the page associated data's
 * prefix), copied.  A page that does not authenticate still goes to
 * read_page, which raises the error naming the file and page.  NULL keytab:
 * no keys.  RETURNS PS_OK, PS_E_ARG (prefix too long or no libcrypto),
 * PS_E_NOMEM. */
int ps_set_page_key(ps_core *c, const uint8_t *keytab, const uint8_t *ad_prefix, size_t prefix_len);
/* LOCK none, no core.  Writes page images (ids ascending) in place, one
 * pwrite per run of adjacent ids.  RETURNS bytes written or -errno. */
int64_t ps_pwrite_pages(int fd, const uint64_t *ids, size_t n, const uint8_t *images, uint32_t page_size);

/* ---- sealing, AES-256-GCM in bulk (pageseal.c; needs ps_wal_seal_available) --- */

/* LOCK none, no core; every buffer is the caller's.  Seals n plain pages of
 * src into dst (pagestore/cipher.py's sealed page).  RETURNS 0, PS_E_CORRUPT
 * with *bad the index of a page whose last PS_SEALED_PAGE_TRAILER bytes are
 * not zero, PS_E_ARG, PS_E_IO (libcrypto, getrandom). */
int64_t ps_seal_pages(const uint8_t *key, uint32_t key_id, const uint8_t *ad_prefix,
                      size_t prefix_len, const uint64_t *ids, size_t n, const uint8_t *src,
                      uint8_t *dst, uint32_t page_size, uint64_t *bad);
/* LOCK none, no core.  Seals in place the plain recovery-file records in
 * buf[0, len) whose first byte sits at file `offset` (each grows by
 * PS_RECORD_SEAL_OVERHEAD).  RETURNS the new length, PS_E_NEED_SPACE when it
 * would exceed cap (buf untouched), PS_E_CORRUPT (malformed or already sealed
 * records), PS_E_ARG, PS_E_NOMEM, PS_E_IO. */
int64_t ps_seal_records(const uint8_t *key, uint32_t key_id, uint64_t checkpoint_id,
                        uint32_t writer, uint64_t offset, uint8_t *buf, size_t len, size_t cap);
/* LOCK none, no core.  Opens n sealed pages (ids first_id..) in buf in place;
 * keytab holds 256 keys of 32 bytes (key id k at k * 32) then 256 flags (1:
 * held).  RETURNS the number opened; a page that does not authenticate (or
 * names a key id not held) is zeroed when zero_bad, else PS_E_CORRUPT with
 * *bad its index (pages before it are open, it and those after are not). */
int64_t ps_open_pages(const uint8_t *keytab, const uint8_t *ad_prefix, size_t prefix_len,
                      uint64_t first_id, size_t n, uint8_t *buf, uint32_t page_size,
                      int zero_bad, uint64_t *bad);

/* ---- recovery-file framing, no cipher (recframe.c) ---------------------------- */

/* LOCK none.  1 when the system's liblz4.so.1 could be loaded (dlopen, once):
 * PS_CODEC_LZ4 (fast mode) is framed and parsed in C. */
int ps_lz4_available(void);
/* LOCK none, no core.  Frames n page images (images, ids: the caller's) as
 * records of codec PS_CODEC_DISABLED, _SKIP_GARBAGE or _LZ4 (if available;
 * bits 8-23 of codec: LZ4's acceleration, 0 or 1 the default) into out
 * (cap >= n * (page_size + PS_RECORD_HEADER_SIZE)); *gap_fallbacks += pages
 * stored whole.  RETURNS the bytes written, PS_E_ARG. */
int64_t ps_recframe(const uint8_t *images, const uint64_t *ids, size_t n, uint32_t page_size,
                    int codec, uint8_t *out, size_t cap, uint64_t *gap_fallbacks);
/* LOCK none, no core.  The skip_garbage form of n pages into out at a stride
 * of page_size, lens[i] and flags[i] (PS_RECORD_GAP_SKIPPED or 0) per page.
 * RETURNS the gap fallbacks, PS_E_ARG. */
int64_t ps_compact_pages(const uint8_t *images, size_t n, uint32_t page_size, uint8_t *out,
                         uint32_t *lens, uint8_t *flags);
/* LOCK none, no core.  Fills in the header and CRC of n records laid out in
 * buf (a PS_RECORD_HEADER_SIZE gap, then lens[i] payload bytes, per page).
 * RETURNS the bytes the records span, PS_E_ARG when they exceed cap. */
int64_t ps_frame_heads(uint8_t *buf, size_t cap, size_t n, const uint64_t *ids,
                       const uint8_t *codecs, const uint8_t *flags, const uint32_t *lens);
/* LOCK none, no core.  Decodes the leading whole valid records of buf whose
 * codec C takes into images / ids (max_pages at most), stopping at the first
 * it does not take; *consumed the bytes they span.  RETURNS the count, PS_E_ARG. */
int64_t ps_recparse(const uint8_t *buf, size_t len, uint32_t page_size, uint8_t *images,
                    uint64_t *ids, size_t max_pages, size_t *consumed);
