/* The read path's function table: how the CPython extension pagestore._fastget
 * (fastget.c) calls the C core (fasttable.c) without knowing its insides.
 *
 * Not parsed by cffi: the core hands out the table's address through
 * ps_fastget_table() (ps_fasttable.h, which cffi does parse), and the binding
 * (pagestore/_native/fastget.py) passes that address to the extension. The
 * extension checks magic, version and size before using it, so a module
 * built from other sources is refused instead of called.
 *
 * Every function here but get_wait runs in a thread that HOLDS THE GIL. So
 * none of them waits for the tree lock (a writer holding it may be waiting
 * for the GIL in a callback into Python) and none loads a page (a load may
 * call into Python). get_wait is called with the GIL released: it waits and
 * loads, but only what the core reads itself, never calling into Python.
 * Whatever they cannot serve they answer PS_FAST_SLOW: the caller then takes
 * the ordinary path (cffi's ps_get, GIL released), which waits, loads and
 * reports errors. */
#ifndef PS_FASTGET_H
#define PS_FASTGET_H

#include <stddef.h>
#include <stdint.h>

#define PS_FAST_MAGIC 0x50534647u     /* "PSFG" */
#define PS_FAST_VERSION 2u

#define PS_FAST_ABSENT (-1)           /* the key is not stored */
#define PS_FAST_SLOW (-2)             /* not served here: take the ordinary path */

struct ps_core;

typedef struct ps_fast_table {
    uint32_t magic;                   /* PS_FAST_MAGIC */
    uint32_t version;                 /* PS_FAST_VERSION */
    uint32_t size;                    /* sizeof(ps_fast_table) */
    uint32_t reserved;
    /* Take the tree read lock if it is free now: 0 with it held (the core
     * open), else PS_FAST_SLOW with nothing held (a writer holds or wants
     * the lock, or the core is closed). Never waits beyond a short spin. */
    int (*read_begin)(struct ps_core *c);
    /* Release what read_begin took. */
    void (*read_end)(struct ps_core *c);
    /* Between read_begin and read_end: the value of key. RETURNS its length
     * n, copied to out[0, n) when n <= cap (nothing copied when n > cap: the
     * caller asks again with room for n while still holding the lock);
     * PS_FAST_ABSENT; or PS_FAST_SLOW (a page of the path or of the value is
     * not in memory, the key is over the size limit, or an error). A leaf
     * alone not in memory may be read in place from the map of the page file
     * instead, without loading it (btree.c, "leaves read in place"). */
    int64_t (*get)(struct ps_core *c, const char *key, size_t klen, char *out, size_t cap);
    /* WITHOUT THE GIL, no lock held: the value of key, waiting for the tree
     * lock and loading missing pages through the page fd (with its keys),
     * never through read_page. `missed`: get met a page miss (so the read
     * lock is not tried first). RETURNS as get; PS_FAST_SLOW also when a
     * page needs read_page (no fd, or it failed the core's own checks). */
    int64_t (*get_wait)(struct ps_core *c, const char *key, size_t klen, char *out, size_t cap,
                        int missed);
} ps_fast_table;

#endif
