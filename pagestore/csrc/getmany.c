/* Point gets in bulk (ps_getmany.h): one lock hold and one crossing from
 * Python for a batch of keys, where a get per key pays both per key. */
#include "ps_internal.h"
#include "ps_getmany.h"

int64_t ps_get_many(ps_core *c, const char *keys, const uint32_t *klens, size_t n,
                    char *out, size_t cap, int64_t *lens) {
    size_t i, koff = 0, used = 0;
    core_rdlock(c);
    PS_REFUSE_IF_CLOSED(c);
    for (i = 0; i < n; i++) {
        size_t klen = klens[i];
        int64_t r;
        if (klen > PS_MAX_KEY) r = PS_E_TOO_LARGE;
        else if (klen > c->max_key) r = PS_E_NOT_FOUND;
        else r = bt_get(c, (const uint8_t *)keys + koff, klen, (uint8_t *)out + used, cap - used, 0);
        if (r == PS_E_NOT_FOUND) {
            lens[i] = -1;
        } else if (r >= 0 && (size_t)r <= cap - used) {
            lens[i] = r;
            used += (size_t)r;
        } else {
            lens[i] = r;    /* too big for the room left, a page miss, or an error */
            break;
        }
        koff += klen;
    }
    pthread_rwlock_unlock(&c->lock);
    return (int64_t)i;
}
