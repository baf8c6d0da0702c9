/* Page I/O of the C core: a page miss copied (and, for an encrypted store,
 * opened) straight into its slot from a read-only map of the page file, a
 * scan's readahead of the leaves after a missing one, and the checkpoint's
 * in-place writes -- all through the page file's fd that PageFile hands
 * over (ps_set_page_fd), without the GIL or a call into Python; what fails
 * a check here is read again through the Python callback, which names the
 * file (docs/page-memory.md).  Slots come from pagemem.c, which keeps page
 * memory's invariants. */
#include "ps_internal.h"   /* first: it defines _GNU_SOURCE (preadv2) */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* pread of a whole page from the page file; 0 when every byte arrived. */
static int pread_page(int fd, uint8_t *p, uint32_t n, uint64_t off) {
    uint32_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, p + got, n - got, (off_t)(off + got));
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return -1;
        }
        got += (uint32_t)r;
    }
    return 0;
}

/* ---- misses copied from a read-only map of the page file --------------
 *
 * A pread of a page the OS page cache holds is a system call around a 4 KiB
 * copy, and on this kind of machine the call costs as much as the copy
 * (random pages of a 740 MB file: ~1.4 us a pread, ~0.7 us a memcpy from a
 * map of it).  So a miss copies its page out of a read-only shared map of
 * the page file, which sees every write to the file the moment it is made
 * (one page cache).  Page memory still owns the copy it checks and uses;
 * nothing is written through the map.  The map reaches past the file's end
 * (room to grow without a new map per checkpoint), but only pages wholly
 * inside the file as last measured are copied from it; for others the file
 * is measured again, and what is still beyond it is left to pread.
 *
 * Touching a mapped page the OS has to read from the device turns a device
 * error into SIGBUS instead of an errno.  The copy runs with this thread's
 * `bus_escape` set, and the handler jumps back out of it; the miss then
 * takes the pread path, whose failure names the file as before.  A SIGBUS
 * anywhere else goes on to the handler that was there before. */

static __thread sigjmp_buf *bus_escape;
static struct sigaction bus_prior;
static int bus_ready;
static pthread_once_t bus_once = PTHREAD_ONCE_INIT;

static void bus_handler(int sig, siginfo_t *si, void *uc) {
    if (bus_escape) siglongjmp(*bus_escape, 1);
    if (bus_prior.sa_flags & SA_SIGINFO) {
        bus_prior.sa_sigaction(sig, si, uc);
    } else if (bus_prior.sa_handler != SIG_DFL && bus_prior.sa_handler != SIG_IGN) {
        bus_prior.sa_handler(sig);
    } else {
        /* the default action: put it back; the faulting access runs again
         * and ends the process as it would have without this handler */
        sigaction(SIGBUS, &bus_prior, NULL);
    }
}

static void bus_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = bus_handler;
    /* NODEFER: the jump leaves the handler without sigreturn, so SIGBUS must
     * not stay blocked for the next copy */
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    bus_ready = sigaction(SIGBUS, &sa, &bus_prior) == 0;
}

void page_map_drop(ps_core *c) {
    if (c->page_map) munmap((void *)c->page_map, c->page_map_len);
    c->page_map = NULL;
    c->page_map_len = c->page_map_file = 0;
    c->page_map_fd = -1;
}

void page_fd_set(ps_core *c, int fd) {
    page_map_drop(c);      /* a map of the old fd's file, which fd may no longer be */
    c->page_fd = fd;
}

/* Page id's bytes in the map, or NULL when the map cannot serve it (no map
 * could be made, or the page is beyond the file's end): the caller preads.
 * Write lock held. */
static const uint8_t *page_mapped(ps_core *c, uint64_t id) {
    size_t ps = c->page_size;
    uint64_t end = (id + 1) * (uint64_t)ps;
    if (__builtin_expect(c->page_map != NULL && end <= c->page_map_file, 1))
        return c->page_map + id * (uint64_t)ps;
    pthread_once(&bus_once, bus_install);
    struct stat st;
    if (!bus_ready || fstat(c->page_fd, &st) != 0 || !S_ISREG(st.st_mode)) return NULL;
    size_t file = (size_t)st.st_size / ps * ps;
    if (end > file) return NULL;
    if (!c->page_map || file > c->page_map_len) {
        /* a quarter more: a file that keeps growing is mapped anew a few
         * dozen times between 1 MiB and 1 GiB, not at every checkpoint */
        size_t spare = file / 4 + ((size_t)1 << 20);
        page_map_drop(c);
        void *m = mmap(NULL, file + spare, PROT_READ, MAP_SHARED, c->page_fd, 0);
        if (m == MAP_FAILED) return NULL;
        /* a fault reads only the page a miss wants, as pread would (pages
         * the OS holds around it are mapped in with it, cheaply) */
        madvise(m, file + spare, MADV_RANDOM);
        c->page_map = m;
        c->page_map_len = file + spare;
        c->page_map_fd = c->page_fd;
    }
    c->page_map_file = file;
    return c->page_map + id * (uint64_t)ps;
}

/* Copy page id from the map into p: 0 copied, -1 not (pread it instead). */
static int page_copy_mapped(ps_core *c, uint64_t id, uint8_t *p) {
    const uint8_t *src = page_mapped(c, id);
    if (!src) return -1;
    sigjmp_buf env;
    if (sigsetjmp(env, 0)) {
        bus_escape = NULL;
        return -1;         /* the device failed under the map: pread reports it */
    }
    bus_escape = &env;
    memcpy(p, src, c->page_size);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);   /* the copy stays inside the escape */
    bus_escape = NULL;
    return 0;
}

/* A get's leaf read without taking a slot (ps_internal.h): copied out of the
 * map into the caller's buffer, which no one else writes, and checked there,
 * so a page that a write changes under the map at that moment fails its
 * crc (and is read again by the ordinary load) instead of being used half
 * old, half new.  Only the map's fields are read, which change under the
 * write lock alone, so either lock serves. */
int page_read_mapped(ps_core *c, uint64_t id, uint8_t *buf) {
    size_t ps = c->page_size;
    if (c->page_keys || !c->page_map || id == 0 || id >= c->meta.page_count ||
        (id + 1) * (uint64_t)ps > c->page_map_file)
        return 0;
    sigjmp_buf env;
    if (sigsetjmp(env, 0)) {
        bus_escape = NULL;
        return 0;          /* the device failed under the map: the ordinary load reports it */
    }
    bus_escape = &env;
    memcpy(buf, c->page_map + id * (uint64_t)ps, ps);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);   /* the copy stays inside the escape */
    bus_escape = NULL;
    return ps_check_page(buf, c->page_size, id);
}

/* Checkpoint step 5 for a plain posix page file: write `n` page images (ids
 * ascending) in place, one pwrite per run of adjacent ids, without the GIL
 * (a Python pwrite per random page cost ~5 us of it). Returns the bytes
 * written, or -errno of the first failed write. */
int64_t ps_pwrite_pages(int fd, const uint64_t *ids, size_t n, const uint8_t *images,
                        uint32_t page_size) {
    int64_t total = 0;
    size_t i = 0;
    while (i < n) {
        size_t j = i + 1;
        while (j < n && ids[j] == ids[j - 1] + 1) j++;
        const uint8_t *src = images + i * (size_t)page_size;
        size_t len = (j - i) * (size_t)page_size, done = 0;
        uint64_t off = ids[i] * (uint64_t)page_size;
        while (done < len) {
            ssize_t r = pwrite(fd, src + done, len - done, (off_t)(off + done));
            if (r < 0) {
                if (errno == EINTR) continue;
                return -(int64_t)errno;
            }
            done += (size_t)r;
        }
        total += (int64_t)len;
        i = j;
    }
    /* No sync_file_range here, unlike the recovery files: these writes are
     * scattered, so starting their write-back makes each chunk wait for the
     * device's random-write rate, and a page is released (evictable) only
     * after its chunk returns.  Measured with 32 MiB of page memory, 500 k
     * random inserts: 13.3 s of page writes against 3.8 s without it. */
    return total;
}

/* Read page `id` and check it (write lock). With a page fd the read is a
 * copy from the map (else a pread) here, without the GIL or a Python call,
 * and a sealed page is opened here too (ps_set_page_key); a short read, a
 * page that does not authenticate or a failed check retries through the
 * Python callback, which reads again and raises the error that names the
 * file and page. */
int64_t page_load(ps_core *c, uint64_t id) {
    if (id >= c->meta.page_count)
        return c->bad_page = id,
               set_err(c, PS_E_CORRUPT, "page %llu is referenced but beyond page_count %llu",
                       (unsigned long long)id, (unsigned long long)c->meta.page_count);
    if (pt_reserve(c, id)) return PS_E_NOMEM;
    int64_t s = slot_alloc(c);
    if (s < 0) return s;
    uint8_t *p = slot_page(c, (uint32_t)s);
    int direct = c->page_fd >= 0 &&
                 (page_copy_mapped(c, id, p) == 0 ||
                  pread_page(c->page_fd, p, c->page_size, id * (uint64_t)c->page_size) == 0) &&
                 (!c->page_keys || page_open(c, id, p) == 1) &&
                 ps_check_page(p, c->page_size, id);
    if (!direct && c->direct_only) {       /* the caller retries on the ordinary path */
        c->free_slots[c->nfree++] = (uint32_t)s;
        return PS_RETRY;
    }
    if (!direct && ps_py_read_page(c->handle, id, p) != 0) {
        c->free_slots[c->nfree++] = (uint32_t)s;
        return PS_E_IO;
    }
    if (!direct && !ps_check_page(p, c->page_size, id)) {
        c->free_slots[c->nfree++] = (uint32_t)s;
        c->bad_page = id;
        return set_err(c, PS_E_CORRUPT, "page %llu failed its %s check",
                       (unsigned long long)id,
                       rd64(p + H_PAGEID) == id ? "crc32c" : "page-id");
    }
    wr32(p + H_CRC, 0);
    slot_claim(c, (uint32_t)s, id);
    c->sig.page_loads++;
    return s;
}

/* read(2) of n bytes at off into iov[0..cnt), as far as it gets: the bytes
 * that arrived (a short read counts what came; an error none).  With nowait,
 * RWF_NOWAIT: only what the OS page cache holds, without waiting. */
static size_t read_run(int fd, struct iovec *iov, int cnt, size_t n, off_t off, int nowait) {
    for (;;) {
#ifdef RWF_NOWAIT
        ssize_t r = nowait ? preadv2(fd, iov, cnt, off, RWF_NOWAIT) : preadv(fd, iov, cnt, off);
#else
        ssize_t r = nowait ? -1 : preadv(fd, iov, cnt, off);
#endif
        if (r < 0 && errno == EINTR) continue;
        return r > 0 ? ((size_t)r < n ? (size_t)r : n) : 0;
    }
}

/* A scan's readahead (bt_scan, write lock): load those of pages ids[0..n)
 * (the next leaves a parent points to, n <= PS_SCAN_READAHEAD) that are not
 * in memory, sorted, one preadv per run of adjacent ids straight into their
 * slots.  Each run is read first with RWF_NOWAIT, which takes what the OS
 * page cache holds and no more; the kernel is then asked to read the rest
 * of every run at once (POSIX_FADV_WILLNEED) before the reads that wait, so
 * a window of leaves the OS does not hold costs about one device wait, not
 * one per leaf (a cold scan of a store 4x its page memory waited 53-75 us
 * per leaf read one at a time), and one the OS holds costs no extra call.
 * When the OS lacked some, the `nnext` pages of the window after this one
 * (`next`, ids; absent or resident ones skipped) are asked for as well. 
 *
 * It never costs the scan anything but time: slots come from slot_alloc,
 * which evicts only clean, unpinned pages outside the checkpoint (never a
 * dirty one), and it stops at the first that cannot be had; a page that
 * fails its read, seal or checks is given back unread, for the scan's own
 * miss to read again and report.  Returns the pages installed. */
int64_t page_readahead(ps_core *c, uint64_t *ids, size_t n, const uint64_t *next, size_t nnext) {
    if (c->page_fd < 0 || n > PS_SCAN_READAHEAD) return 0;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {           /* wanted ones, ascending, once */
        uint64_t id = ids[i];
        if (id == 0 || id >= c->meta.page_count || pt_find(c, id) >= 0) continue;
        size_t j = m;
        while (j > 0 && ids[j - 1] > id) {
            ids[j] = ids[j - 1];
            j--;
        }
        if (j > 0 && ids[j - 1] == id) {        /* undo the shift: a duplicate */
            memmove(ids + j, ids + j + 1, (m - j) * sizeof *ids);
            continue;
        }
        ids[j] = id;
        m++;
    }
    uint32_t slots[PS_SCAN_READAHEAD];
    struct iovec iov[PS_SCAN_READAHEAD];
    size_t have[PS_SCAN_READAHEAD];            /* bytes read, per run start */
    size_t got = 0;                            /* pages with a slot: ids[0..got) */
    for (; got < m; got++) {
        int64_t s = pt_reserve(c, ids[got]) ? PS_E_NOMEM : slot_alloc(c);
        if (s < 0) break;                      /* no slot left for the rest */
        slots[got] = (uint32_t)s;
        iov[got].iov_base = slot_page(c, (uint32_t)s);
        iov[got].iov_len = c->page_size;
    }
    size_t ps = c->page_size, pending = 0;
    for (size_t i = 0, j; i < got; i = j) {    /* what the OS holds, without waiting */
        for (j = i + 1; j < got && ids[j] == ids[j - 1] + 1; j++) {}
        have[i] = read_run(c->page_fd, iov + i, (int)(j - i), (j - i) * ps,
                           (off_t)(ids[i] * ps), 1);
        if (have[i] < (j - i) * ps) {
            posix_fadvise(c->page_fd, (off_t)(ids[i] * ps + have[i]), (off_t)((j - i) * ps - have[i]),
                          POSIX_FADV_WILLNEED);
            pending++;
        }
    }
    /* The OS did not hold them all: the device is the limit, so have it read
     * the window after this one too while the scan goes through this one. */
    for (size_t i = 0; pending && i < nnext; i++)
        if (next[i] && next[i] < c->meta.page_count && pt_find(c, next[i]) < 0)
            posix_fadvise(c->page_fd, (off_t)(next[i] * ps), (off_t)ps, POSIX_FADV_WILLNEED);
    for (size_t i = 0, j; pending && i < got; i = j) {   /* the rest, waiting */
        for (j = i + 1; j < got && ids[j] == ids[j - 1] + 1; j++) {}
        size_t want = (j - i) * ps, k = i + have[i] / ps;
        if (have[i] == want) continue;
        /* whole pages only: a page half read by the first call is read again */
        have[i] = (k - i) * ps + read_run(c->page_fd, iov + k, (int)(j - k), (j - k) * ps,
                                          (off_t)(ids[k] * ps), 0);
    }
    int64_t done = 0;
    size_t run = 0;
    for (size_t q = 0; q < got; q++) {
        if (q == 0 || ids[q] != ids[q - 1] + 1) run = q;
        uint8_t *p = slot_page(c, slots[q]);
        uint64_t id = ids[q];
        if ((q - run + 1) * ps <= have[run] && (!c->page_keys || page_open(c, id, p) == 1) &&
            ps_check_page(p, c->page_size, id)) {
            wr32(p + H_CRC, 0);
            slot_claim(c, slots[q], id);
            c->sig.page_loads++;
            done++;
        } else {
            c->free_slots[c->nfree++] = slots[q];
        }
    }
    return done;
}

void ps_set_readahead(ps_core *c, uint32_t pages) {
    core_wrlock(c);
    c->readahead = pages < PS_SCAN_READAHEAD ? pages : PS_SCAN_READAHEAD;
    pthread_rwlock_unlock(&c->lock);
}
