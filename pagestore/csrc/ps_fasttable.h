/* The read path's function table (ps_fastget.h), handed to pagestore._fastget.
 * Parsed by cffi's cdef (pagestore/_build.py): declarations only. */

/* The address of the core's one ps_fast_table (static, never freed).
 * LOCK none.  CALLS nothing.  OWNS nothing: the table lives as long as the
 * module. The functions in it take the ps_core * of a live core. */
const void *ps_fastget_table(void);
