"""cffi builder of the C core `pagestore._core` (out-of-line API mode).

The cdef is `csrc/ps_api.h` (the product API) and `csrc/ps_test.h` (entry
points only tests call), both kept parsable by cffi, plus the callbacks
implemented in Python; the C files are listed explicitly. Compiled
with -O2 -Wall -Werror; PAGESTORE_SANITIZE=1 adds ASan/UBSan.

    python setup.py build_ext --inplace     (setup.py names this ffibuilder)
"""

from __future__ import annotations

import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(HERE, "csrc")
SOURCES = ["crc32c.c", "pagemem.c", "pageio.c", "walenc.c", "walseg.c", "physrec.c", "walscan.c", "btree.c", "core.c", "recframe.c", "walseal.c", "aesni.c", "pageseal.c", "prefault.c", "undolog.c", "mvcc.c", "gcommit.c", "gcround.c", "gcsyncer.c", "getmany.c", "fasttable.c", "batchgate.c", "batchneed.c"]

CALLBACKS = """
extern "Python+C" int ps_py_read_page(void *handle, uint64_t page_id, uint8_t *buf);
extern "Python+C" int ps_py_wal_segment(void *handle, uint64_t seq, uint8_t **base_out);
extern "Python+C" int ps_py_wal_grow(void *handle, uint64_t seq, uint64_t need, uint64_t *alloc_out);
"""


HEADERS = ["ps_api.h", "ps_test.h", "ps_gcommit.h", "ps_getmany.h", "ps_fasttable.h"]


def _cdef() -> str:
    parts = []
    for name in HEADERS:
        with open(os.path.join(CSRC, name), encoding="utf-8") as f:
            parts.append(f.read())
    return "\n".join(parts) + CALLBACKS


def _flags() -> tuple[list[str], list[str]]:
    # hidden visibility: the core's internal calls bind inside the module (no
    # PLT); the module's init function is exported by PyMODINIT_FUNC itself
    cflags = ["-O2", "-Wall", "-Werror", "-std=gnu11", "-fvisibility=hidden"]
    ldflags: list[str] = []
    if os.environ.get("PAGESTORE_SANITIZE") == "1":
        san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
        cflags += san + ["-g"]
        ldflags += san
    return cflags, ldflags


ffibuilder = FFI()
ffibuilder.cdef(_cdef())
_cflags, _ldflags = _flags()
ffibuilder.set_source(
    "pagestore._core",
    '#include <stdint.h>\n#include <stddef.h>\n' + "".join(f'#include "{h}"\n' for h in HEADERS),
    sources=[os.path.relpath(os.path.join(CSRC, s)) for s in SOURCES],
    include_dirs=[CSRC],
    extra_compile_args=_cflags,
    extra_link_args=_ldflags,
    libraries=["pthread", "dl"],   # dl: liblz4.so.1 and libcrypto are loaded at run time
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
