/* Point gets in bulk: n lookups under one hold of the tree read lock.
 * Parsed by cffi's cdef (pagestore/_build.py): declarations only. */

/* Look up n keys (`keys`: their bytes back to back, klens[i] each length)
 * and copy the values found back to back into out[0, cap): lens[i] is the
 * value's length, or -1 when the key is not stored.
 * LOCK read (once for the whole call).  CALLS nothing: a key whose page is
 *   not in memory stops the call (a page load needs the write lock).
 * RETURNS the number of keys done, i; when i < n, key i was not done and
 *   lens[i] says why: a length > the room left (a bigger out is needed),
 *   PS_E_NOT_FOUND never (that is -1 and done), or a PS_E_* status the
 *   caller meets again by a single get of key i.  PS_E_CLOSED for a closed core.
 * OWNS nothing: every pointer is the caller's, read or written during the call. */
int64_t ps_get_many(ps_core *c, const char *keys, const uint32_t *klens, size_t n,
                    char *out, size_t cap, int64_t *lens);
