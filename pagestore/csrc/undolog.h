/* The undo log of open snapshots (undolog.c), shared by undolog.c and mvcc.c.
 * Internal: not part of the cffi cdef. */
#ifndef PS_UNDOLOG_H
#define PS_UNDOLOG_H

#include "ps_internal.h"

typedef struct mv_entry {
    uint64_t seq;        /* the write that replaced this image */
    uint64_t next;       /* entry number + 1 of the next older entry in this bucket; 0: none */
    uint32_t hash, klen;
    int64_t vlen;        /* -1: the key was absent before the write */
    uint8_t *data;       /* klen key bytes, then vlen value bytes (malloc'd) */
    uint64_t lsn;        /* end of the write's last WAL record (UINT64_MAX until it ends) */
} mv_entry;

typedef struct mv_snap {
    uint64_t seq, t_ns;
    uint32_t gen;
    uint8_t state;       /* SNAP_FREE, SNAP_LIVE, SNAP_OLD */
} mv_snap;

enum { SNAP_FREE = 0, SNAP_LIVE = 1, SNAP_OLD = 2 };
/* bytes an entry counts against the bound: its slot, plus about what malloc
 * keeps beside the key and value block */
#define ENTRY_OVERHEAD ((uint64_t)sizeof(mv_entry) + 16)
#define SLOT_BITS 24         /* a snapshot handle: generation << SLOT_BITS | slot */

struct mv_state {
    uint64_t seq;                    /* number of the last committed write */
    mv_entry *ents;                  /* entry number e at ents[e - base] */
    size_t cap;
    uint64_t base, head, tail;       /* base <= head <= tail; [head, tail) live */
    uint64_t *buckets;               /* entry number + 1 of the newest entry; 0: empty */
    size_t nbuckets;                 /* a power of two */
    mv_snap *snaps;
    uint32_t nsnaps, live;
    uint64_t bytes, limit, too_old;
    /* ps_undo_keep: before-images are kept, snapshots or not, until the log
     * acknowledges their write (lsn <= *acked), so a write whose commit failed
     * can be undone (ps_wal_fence); `refused`: the log failed, writes refused */
    const uint64_t *acked;
    int refused;
};

static inline mv_entry *ent(struct mv_state *m, uint64_t e) { return &m->ents[e - m->base]; }

uint32_t undo_hash(const uint8_t *k, size_t n);
/* free the entries no live snapshot needs: those at or below the oldest s */
void undo_trim(struct mv_state *m);
/* the oldest entry of key with seq > s, or NULL: the key is unchanged since s */
const mv_entry *undo_find(const struct mv_state *m, const uint8_t *k, uint32_t kl, uint32_t h,
                          uint64_t s);
/* the number of the first entry with seq > s (entries are in seq order) */
uint64_t undo_first_after(const struct mv_state *m, uint64_t s);
/* the entry's key lies within the bounds */
int undo_in_range(const mv_entry *x, const uint8_t *lo, size_t lolen, int has_lo, int lo_incl,
                  const uint8_t *hi, size_t hilen, int has_hi, int hi_incl);

#endif
