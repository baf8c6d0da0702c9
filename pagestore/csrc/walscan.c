/* WAL scanner: the valid prefix of simple records of one segment, replay's
 * fast path (bound by pagestore/_native/wal.py).  It reads what the encoder
 * (walenc.c) wrote and shares nothing with it but the format.
 *
 * ps_wal_scan reads one segment buffer from offset `off` (where the Python
 * reader would read next) and copies records while each one is valid by the
 * validity rule of docs/wal-format.md (every block header it touches has the
 * magic, version, crc and block_lsn of its place; 17 <= length; it fits in
 * the segment; its lsn field equals its LSN; its crc32c matches; its payload
 * has the shape of its type) AND is simple:
 *   - a PUT or DELETE with txid 0, or
 *   - a whole transaction written in one piece: PUT/DELETE records of one
 *     txid T != 0 followed at once by COMMIT(T) whose nops equals their
 *     number (put_many, Transaction: ps_apply_batch logs them under the tree
 *     lock, so they are adjacent).  Its operations are copied, its COMMIT is
 *     consumed; `committed_raw` would apply them at that COMMIT, the same
 *     place.  A transaction broken by any other record, cut by the end of
 *     the valid log, or whose nops differs (part of it was read before) is
 *     left to the Python reader from its first record.
 * Block headers are removed, so `out` holds the contiguous raw PUT/DELETE
 * records that ps_apply_log takes.  It stops before the first record that is
 * invalid, not simple, or does not fit in `cap`, and never decides anything
 * else: the Python reader (wal/reader.py) reads on from *end_off and remains
 * the authority on where the log stops.  Returns the number of records
 * consumed (a transaction's COMMIT included); *out_len may be 0 for
 * transactions with no operation.  *tx_too_big says it stopped at `off`
 * because a record, or a transaction valid so far, outgrew `cap` (worth a
 * call with a bigger buffer).
 *
 * ps_wal_scan with a key reads a record-sealed segment (flags 2, walseg.c;
 * its header's key check is the caller's: wal/recseal.py record_opener).
 * Each record is checked as above on its stored bytes (crc over ciphertext
 * and tag), must be at least 17 + 16 bytes, and its tag must authenticate
 * (nonce salt || u32 offset, AAD stored bytes 4..17); it is copied in
 * plaintext form (len - 16, crc recomputed), and the shape, transaction and
 * cap rules apply to that form.  The same records wal/reader.py read_record
 * accepts with the opener, and the same bytes it returns.
 *
 * REQUIRES: seg readable for seg_size bytes, out writable for cap bytes; no
 * core and no lock (the segment is the caller's, not written meanwhile). */
#include "ps_internal.h"

#define BLK PS_WAL_BLOCK
#define BHDR PS_WAL_BLOCK_HDR
#define TAG PS_WAL_TAG

/* a sealed scan's key and salt; its decrypting context is the call's own,
 * made at the first record that needs it */
typedef struct {
    const uint8_t *key, *salt;
    void *ctx;
} scan_key;

static int scan_block_ok(const uint8_t *seg, uint64_t b, uint64_t base) {
    const uint8_t *h = seg + b;
    return rd32(h) == 0x4C575350u && rd16(h + 4) == 1 && rd64(h + 8) == base + b &&
           rd32(h + 20) == ps_crc32c(0, h, 20);
}

/* the segment offset just past `len` record bytes from `off` (in a record area) */
static uint64_t scan_phys_end(uint64_t off, uint64_t len) {
    uint64_t room = BLK - off % BLK;
    if (len <= room) return off + len;
    uint64_t rest = len - room, per = BLK - BHDR;
    uint64_t blocks = (rest + per - 1) / per;
    return (off / BLK + blocks) * BLK + BHDR + rest - (blocks - 1) * per;
}

/* n record bytes from off into dst, checking each block header entered
 * (*ok caches the last block found valid); 0 on a bad block header */
static int scan_gather(const uint8_t *seg, uint64_t base, uint64_t off, uint64_t n,
                       uint8_t *dst, uint64_t *ok) {
    while (n) {
        uint64_t b = off - off % BLK;
        if (off == b) {
            if (b != *ok) {
                if (!scan_block_ok(seg, b, base)) return 0;
                *ok = b;
            }
            off += BHDR;
        }
        uint64_t take = b + BLK - off;
        if (take > n) take = n;
        memcpy(dst, seg + off, take);
        dst += take;
        off += take;
        n -= take;
    }
    return 1;
}

/* One valid PUT / DELETE / COMMIT record at segment offset *pos, copied to
 * dst (at most room bytes); its type, and *pos advanced past it.  0 when the
 * next record is invalid or of another type, -1 when it does not fit. */
static int scan_one(const uint8_t *seg, uint64_t seg_size, uint64_t base, uint64_t *pos,
                    uint8_t *dst, size_t room, uint64_t *ok, uint32_t *len_out, scan_key *sk) {
    uint64_t o = *pos;
    if (o < BLK + BHDR) o = BLK + BHDR;
    else if (o % BLK == 0) o += BHDR;
    if (o >= seg_size || o % BLK < BHDR) return 0;
    uint64_t b = o - o % BLK;
    if (b != *ok) {
        if (!scan_block_ok(seg, b, base)) return 0;
        *ok = b;
    }
    uint8_t hdr[PS_WAL_REC_HDR];
    if (scan_phys_end(o, PS_WAL_REC_HDR) > seg_size) return 0;
    if (!scan_gather(seg, base, o, PS_WAL_REC_HDR, hdr, ok)) return 0;
    uint32_t crc = rd32(hdr), len = rd32(hdr + 4);
    uint8_t type = hdr[16];
    if (rd64(hdr + 8) != base + o || len < PS_WAL_REC_HDR) return 0;
    if (type != PS_REC_PUT && type != PS_REC_DELETE && type != PS_REC_COMMIT) return 0;
    if (sk && len < PS_WAL_REC_HDR + TAG) return 0;
    uint64_t end = scan_phys_end(o, len);
    if (end > seg_size) return 0;
    if (!sk) {
        if (len > room) return -1;
        if (!scan_gather(seg, base, o, len, dst, ok)) return 0;
        if (ps_crc32c(0, dst + 4, len - 4) != crc) return 0;
    } else {
        /* the record but its tag into dst, the tag aside; crc over both as stored */
        uint32_t plen = len - TAG;
        uint8_t tag[TAG], iv[12];
        if (plen > room) return -1;
        if (!scan_gather(seg, base, o, plen, dst, ok) ||
            !scan_gather(seg, base, scan_phys_end(o, plen), TAG, tag, ok))
            return 0;
        if (ps_crc32c(ps_crc32c(0, dst + 4, plen - 4), tag, TAG) != crc) return 0;
        if (!sk->ctx && !(sk->ctx = open_ctx_new(sk->key))) return 0;
        memcpy(iv, sk->salt, 8);
        wr32(iv + 8, (uint32_t)o);
        /* AAD: the stored len, lsn, type, still in dst */
        if (open_gcm(sk->ctx, iv, dst + 4, PS_WAL_REC_HDR - 4, dst + PS_WAL_REC_HDR,
                     plen - PS_WAL_REC_HDR, tag) != 1)
            return 0;
        len = plen;
        wr32(dst + 4, len);
        wr32(dst, ps_crc32c(0, dst + 4, len - 4));
    }
    if (type == PS_REC_PUT) {
        if (len < 33 || 33 + (uint64_t)rd32(dst + 25) + rd32(dst + 29) != len) return 0;
    } else if (type == PS_REC_DELETE) {
        if (len < 29 || 29 + (uint64_t)rd32(dst + 25) != len) return 0;
    } else if (len != 29) {
        return 0;
    }
    *pos = end;
    *len_out = len;
    return type;
}

static int64_t scan_run(const uint8_t *seg, uint64_t seg_size, uint64_t base_lsn, uint64_t off,
                        uint8_t *out, size_t cap, size_t *out_len, uint64_t *end_off,
                        int *tx_too_big, scan_key *sk) {
    size_t used = 0;
    *tx_too_big = 0;
    int64_t n = 0;
    uint64_t ok = UINT64_MAX;
    uint8_t commit[29];
    *out_len = 0;
    *end_off = off;
    if (seg_size % BLK || seg_size < 2 * BLK) return PS_E_ARG;
    for (;;) {
        uint64_t pos = *end_off;
        uint32_t len;
        int type = scan_one(seg, seg_size, base_lsn, &pos, out + used, cap - used, &ok, &len, sk);
        if (type == -1 && used == 0) *tx_too_big = 1;
        if (type != PS_REC_PUT && type != PS_REC_DELETE) break;
        uint64_t txid = rd64(out + used + 17);
        if (txid == 0) {                        /* a simple record */
            used += len;
            n++;
            *end_off = pos;
            continue;
        }
        /* a transaction: its adjacent records up to COMMIT(txid), or nothing */
        size_t gused = used + len;
        uint64_t nops = 1;
        for (;;) {
            uint32_t l;
            uint8_t *dst = out + gused;
            type = scan_one(seg, seg_size, base_lsn, &pos, dst, cap - gused, &ok, &l, sk);
            if (type == PS_REC_COMMIT) {
                /* scan_one copied it into out; keep it aside, it is not applied */
                memcpy(commit, dst, sizeof commit);
                break;
            }
            if ((type != PS_REC_PUT && type != PS_REC_DELETE) || rd64(dst + 17) != txid) {
                /* out of room: only worth a bigger buffer if it starts the call */
                if (type == -1 && used == 0) *tx_too_big = 1;
                type = 0;
                break;
            }
            gused += l;
            nops++;
        }
        if (type != PS_REC_COMMIT || rd64(commit + 17) != txid || rd32(commit + 25) != nops)
            break;
        used = gused;
        n += (int64_t)nops + 1;
        *end_off = pos;
    }
    *out_len = used;
    return n;
}

int64_t ps_wal_scan(const uint8_t *seg, uint64_t seg_size, uint64_t base_lsn, uint64_t off,
                    uint8_t *out, size_t cap, size_t *out_len, uint64_t *end_off,
                    int *tx_too_big, const uint8_t *key, const uint8_t *salt) {
    if (key && (!salt || seg_size > 0xFFFFFFFFull || !ps_wal_seal_available())) {
        *out_len = 0;
        *end_off = off;
        *tx_too_big = 0;
        return PS_E_ARG;
    }
    scan_key sk = {key, salt, NULL};
    int64_t n = scan_run(seg, seg_size, base_lsn, off, out, cap, out_len, end_off, tx_too_big,
                         key ? &sk : NULL);
    seal_ctx_free(sk.ctx);
    return n;
}
