/* Entry points of the C core that only tests call: compiled into the same
 * extension as ps_api.h's (pagestore/_build.py hands both to cffi) but kept
 * out of the product surface.  The Python side reaches them through
 * pagestore/_native/testing.py.  Same rules as ps_api.h: cffi-parsable. */

/* LOCK none.  crc32c (Castagnoli) of buf chained from crc: through SSE4.2
 * where the CPU has it (ps_crc32c_hw_available), else the table version
 * ps_crc32c_sw; the core uses ps_crc32c itself for every page and record. */
uint32_t ps_crc32c(uint32_t crc, const uint8_t *buf, size_t n);
uint32_t ps_crc32c_sw(uint32_t crc, const uint8_t *buf, size_t n);
int ps_crc32c_hw_available(void);

/* LOCK none.  Sealing prefers the AES-NI path of aesni.c where it loads
 * (ps_gcm_fast_available); ps_gcm_set_fast(0) makes new contexts use EVP
 * only (process-wide); ps_gcm_seal seals once through the chosen path (fast
 * 1 / EVP 0).  RETURNS PS_OK, PS_E_ARG if that path is missing. */
int ps_gcm_fast_available(void);
void ps_gcm_set_fast(int on);
int ps_gcm_seal(const uint8_t *key, const uint8_t *iv, const uint8_t *aad, size_t aad_len,
                const uint8_t *in, size_t n, uint8_t *out, uint8_t *tag, int fast);

/* LOCK read.  The page as it is in page memory (crc field 0) into out
 * (page_size bytes, the caller's).  RETURNS PS_OK, PS_E_NOT_FOUND (not
 * resident), PS_E_CLOSED. */
int ps_read_live_page(ps_core *c, uint64_t page_id, uint8_t *out);

/* LOCK write.  The pages a scan loads ahead when it crosses into a leaf not
 * in memory (default PS_SCAN_READAHEAD; 0 or 1: none), for the benchmark
 * and tests that compare the two. */
void ps_set_readahead(ps_core *c, uint32_t pages);

/* LOCK none.  The END trailer the WAL encoder writes after a record ending
 * at `end_lsn` (wal/format.py, "End trailer"), as the bytes of LSNs
 * [end_lsn, end_lsn + n) into out (PS_WAL_END_MAX bytes): a block header
 * first if end_lsn starts a block, the next block's header in the middle
 * if fewer than 17 bytes are left in end_lsn's block; both with written
 * mark end_lsn.  The encoder writes it through this, and a commit round
 * lays it over what it writes, so the END is the one for its own end.
 * RETURNS n (17 or 41). */
#define PS_WAL_END_MAX 41
size_t ps_wal_end_image(uint64_t end_lsn, uint8_t *out);

/* LOCK write.  Failpoints of the batches that follow (0: off): after its
 * hold_at-th write a batch lets the checkpoint in and waits there, the gate
 * closed (batchgate.c), until ps_test_batch_go (LOCK none), once;
 * ps_test_batch_held (LOCK none) says a batch waits there.  After its
 * fail_at-th write a batch fails with PS_E_NOMEM and rolls back, as when
 * page memory is full. */
void ps_test_batch_failpoints(ps_core *c, uint64_t hold_at, uint64_t fail_at);
int ps_test_batch_held(ps_core *c);
void ps_test_batch_go(ps_core *c);
