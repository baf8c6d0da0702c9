/* The batch gate: a long batch lets the checkpoint in between its writes.
 *
 * Why.  ps_apply_batch holds the core write lock from its first write to its
 * last, and on a store several times larger than its page memory a put_many
 * of 5,000 random keys holds it for tens of milliseconds.  Every page the
 * running checkpoint copies or releases waited for it, while the batch, short
 * of clean slots that only those releases make, failed, rolled everything
 * back and started again: measured (2 M keys into 32 MiB of page memory,
 * batches of 5,000), the checkpoint ran 75 % of the load's time and the
 * load's rate was half that of batches of 500 (docs/page-memory.md).
 *
 * The rule.  Between two writes of a batch -- nothing pinned, every change so
 * far in the undo log -- the batch turns (batch_turn) when a checkpoint copy
 * or release call waits for the lock, or when page memory is nearly all
 * dirty while the running checkpoint still has pages to release.  It closes
 * the gate, unlocks, lets the checkpoint in (for room: until it released
 * pages, 100 ms at most, 200 ms in all for a batch), and locks again.  While the gate is closed every other caller of
 * core_rdlock/core_wrlock waits for the batch to end, so no reader sees its
 * uncommitted writes, no other writer mixes into its undo log, and no
 * checkpoint begins (it would take uncommitted pages: no-steal).
 *
 * Invariants.
 *  (1) gate != 0 only while the batch that closed it is open; the batch sets
 *      and clears it under the write lock (batch_turn, batch_gate_open).
 *  (2) While gate != 0 the lock is taken only by that batch and by
 *      ckpt_rdlock/ckpt_wrlock callers: ps_ckpt_copy, ps_ckpt_copy_frame,
 *      ps_ckpt_pages_with_copy, ps_ckpt_release, ps_ckpt_end (core.c).
 *      They read checkpoint images, which a write copies before it changes
 *      a page (page_w), and they clear in-checkpoint state.
 *  (3) A page released while a batch that changed it is open stays released
 *      if the batch rolls back (op_rollback): the checkpoint freed its copy,
 *      and the image it restores is the one the page had before the batch.
 */
#include "ps_internal.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Free slots a write of a batch may want: a leaf, its splits up the tree. */
#define GATE_ROOM 64
/* Checkpoint-buffer pages it may want: a copy of each page of the tree's
 * height that it changes, twice over for splits. */
#define GATE_COPIES 16
/* Longest wait for the checkpoint to release a page, and longest a batch
 * waits for room in all.  Every other caller of the tree lock waits while
 * the gate is closed, so a slow or failed checkpoint must not hold them: past
 * either bound the batch goes on without waiting again (and, should it then
 * run out of slots, fails and waits outside the lock as before).  A healthy
 * checkpoint of a few thousand pages releases its first chunk well within
 * the first bound (recovery files written and synced, START marker). */
#define GATE_ROOM_WAIT_NS 100000000ull
#define GATE_BATCH_WAIT_NS 200000000ull
/* Longest wait for the waiting checkpoint calls to take the lock. */
#define GATE_TURN_SPINS 64

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Page-memory slots free or clean, at least: a page both in the checkpoint
 * and dirty again counts twice. */
static uint64_t room(const ps_core *c) {
    uint64_t busy = __atomic_load_n(&c->sig.dirty_pages, __ATOMIC_RELAXED) +
                    __atomic_load_n(&c->sig.ckpt_pages, __ATOMIC_RELAXED);
    return busy >= c->nslots ? 0 : c->nslots - busy;
}

/* Until the gate opens (no lock held). */
void gate_wait(ps_core *c) {
    int g = __atomic_load_n(&c->gate, __ATOMIC_ACQUIRE);
    while (g) {
        if (g == 1 && !__atomic_compare_exchange_n(&c->gate, &g, 2, 0, __ATOMIC_ACQ_REL,
                                                   __ATOMIC_ACQUIRE))
            continue;                           /* g reloaded: opened, or 2 already */
        syscall(SYS_futex, &c->gate, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
        g = __atomic_load_n(&c->gate, __ATOMIC_ACQUIRE);
    }
}

/* REQUIRES: the write lock, held by the batch that closed the gate, at its end. */
void batch_gate_open(ps_core *c) {
    if (__atomic_exchange_n(&c->gate, 0, __ATOMIC_ACQ_REL) == 2)
        syscall(SYS_futex, &c->gate, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}

/* REQUIRES: the write lock, inside ps_apply_batch between two writes (nothing
 * pinned), `done` of them applied.  Returns with the write lock held again. */
void batch_turn(ps_core *c, uint64_t done) {
    int held = c->t_hold == 1 && done == c->t_hold_at;
    if (!c->ckpt_active && !held) return;     /* no checkpoint calls to let in, no room to wait for */
    int asked = __atomic_load_n(&c->ckpt_waiting, __ATOMIC_ACQUIRE) > 0;
    uint64_t left = c->sig.ckpt_pages;
    int tight = 0;
    if (c->ckpt_active && left && !c->gate_gave_up) {
        uint64_t cap = c->sig.cow_capacity, copies = cap / 4 < GATE_COPIES ? cap / 4 : GATE_COPIES;
        tight = room(c) < GATE_ROOM || c->sig.cow_used + copies >= cap;
    }
    if (!asked && !tight && !held) return;
    c->sig.batch_turns++;
    c->sig.batch_room_waits += (uint64_t)tight;
    int closed = 0;
    __atomic_compare_exchange_n(&c->gate, &closed, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    if (held) __atomic_store_n(&c->t_hold, 2, __ATOMIC_RELEASE);
    pthread_rwlock_unlock(&c->lock);
    while (held && __atomic_load_n(&c->t_hold, __ATOMIC_ACQUIRE) == 2) {
        struct timespec nap = {0, 200000};
        nanosleep(&nap, NULL);
    }
    if (tight) {
        /* until it released a page (GATE_ROOM_WAIT_NS, GATE_BATCH_WAIT_NS) */
        uint64_t t0 = now_ns();
        while (__atomic_load_n(&c->sig.ckpt_pages, __ATOMIC_RELAXED) >= left &&
               __atomic_load_n(&c->ckpt_active, __ATOMIC_RELAXED)) {
            struct timespec nap = {0, 50000};   /* the checkpoint needs this CPU */
            nanosleep(&nap, NULL);
            uint64_t waited = now_ns() - t0;
            if (waited > GATE_ROOM_WAIT_NS || c->gate_waited + waited > GATE_BATCH_WAIT_NS) {
                c->gate_gave_up = 1;            /* for the rest of this batch (under no lock:
                                                 * only this batch reads or writes it) */
                break;
            }
        }
        c->gate_waited += now_ns() - t0;
    } else {
        for (int i = 0; i < GATE_TURN_SPINS && __atomic_load_n(&c->ckpt_waiting, __ATOMIC_ACQUIRE); i++)
            sched_yield();
    }
    core_wrlock_raw(c);
}

void ps_test_batch_failpoints(ps_core *c, uint64_t hold_at, uint64_t fail_at) {
    core_wrlock(c);
    c->t_hold_at = hold_at;
    c->t_hold = hold_at ? 1 : 0;
    c->t_fail_at = fail_at;
    pthread_rwlock_unlock(&c->lock);
}

int ps_test_batch_held(ps_core *c) {
    return __atomic_load_n(&c->t_hold, __ATOMIC_ACQUIRE) == 2;
}

void ps_test_batch_go(ps_core *c) {
    __atomic_store_n(&c->t_hold, 0, __ATOMIC_RELEASE);
}
