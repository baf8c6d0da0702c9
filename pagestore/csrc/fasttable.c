/* The core's side of the read path's function table (ps_fastget.h): point
 * gets for a caller that holds the GIL (pagestore._fastget). Such a caller
 * must never wait for the tree lock: a writer holding it may itself wait
 * for the GIL inside a callback into Python, and neither would move again.
 * So the lock is only tried, and a page miss is handed back, not loaded. */
#include "ps_internal.h"
#include "ps_fastget.h"
#include "ps_fasttable.h"

/* Few: the GIL is held while spinning, and a busy lock is served just as
 * well by the ordinary path, which waits with the GIL released. */
#define FAST_LOCK_SPINS 16

static int fast_read_begin(ps_core *c) {
    /* a writer spinning for the lock goes first (as core_rdlock lets it) */
    if (__atomic_load_n(&c->wr_intent, __ATOMIC_ACQUIRE)) return PS_FAST_SLOW;
    for (int i = 0; i < FAST_LOCK_SPINS; i++) {
        if (pthread_rwlock_tryrdlock(&c->lock) == 0) {
            /* closed: no page memory behind it any more; the gate: a batch is
             * open (batchgate.c), and waiting for it is the ordinary path's job */
            if (c->closed || __atomic_load_n(&c->gate, __ATOMIC_RELAXED)) {
                pthread_rwlock_unlock(&c->lock);
                return PS_FAST_SLOW;
            }
            return 0;
        }
        ps_cpu_relax();
    }
    return PS_FAST_SLOW;
}

static void fast_read_end(ps_core *c) {
    pthread_rwlock_unlock(&c->lock);
}

/* a core status as the table answers it */
static int64_t fast_answer(int64_t r) {
    if (r >= 0) return r;
    return r == PS_E_NOT_FOUND ? PS_FAST_ABSENT : PS_FAST_SLOW;
}

static int64_t fast_get(ps_core *c, const char *key, size_t klen, char *out, size_t cap) {
    if (klen > PS_MAX_KEY) return PS_FAST_SLOW;          /* the ordinary path names the error */
    if (klen > c->max_key) return PS_FAST_ABSENT;        /* longer than any key a put accepts */
    return fast_answer(bt_get(c, (const uint8_t *)key, klen, (uint8_t *)out, cap, 0));
}

/* A miss served where it was met: the read-locked try only when get did not
 * see a miss (the lock was busy), then the write lock and the load, all
 * without the GIL; direct_only turns a miss the fd cannot serve into
 * PS_RETRY instead of a call into Python, whose error would be left for a
 * caller that never asked (the ordinary path then reads and reports it). */
static int64_t fast_get_wait(ps_core *c, const char *key, size_t klen, char *out, size_t cap,
                             int missed) {
    if (klen > PS_MAX_KEY) return PS_FAST_SLOW;
    if (klen > c->max_key) return PS_FAST_ABSENT;
    int64_t r = PS_RETRY;
    if (!missed) {
        core_rdlock(c);
        r = c->closed ? PS_E_CLOSED : bt_get(c, (const uint8_t *)key, klen, (uint8_t *)out, cap, 0);
        pthread_rwlock_unlock(&c->lock);
    }
    if (r != PS_RETRY) return fast_answer(r);
    core_wrlock(c);
    if (c->closed) {
        pthread_rwlock_unlock(&c->lock);
        return PS_FAST_SLOW;
    }
    c->direct_only = 1;
    r = bt_get(c, (const uint8_t *)key, klen, (uint8_t *)out, cap, 1);
    c->direct_only = 0;
    unpin_op_all(c);
    pthread_rwlock_unlock(&c->lock);
    return fast_answer(r);
}

static const ps_fast_table table = {
    .magic = PS_FAST_MAGIC,
    .version = PS_FAST_VERSION,
    .size = sizeof(ps_fast_table),
    .reserved = 0,
    .read_begin = fast_read_begin,
    .read_end = fast_read_end,
    .get = fast_get,
    .get_wait = fast_get_wait,
};

const void *ps_fastget_table(void) { return &table; }
