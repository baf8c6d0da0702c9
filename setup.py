"""Builds the C core `pagestore._core` (cffi_modules: pagestore/_build.py) and
the read path's CPython extension `pagestore._fastget` (pagestore/csrc/fastget.c),
which reaches the core only through the function table the core exports."""
import os

from setuptools import Extension, setup

# The core's flags (pagestore/_build.py), PAGESTORE_SANITIZE=1 included.
_SAN = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"] if os.environ.get("PAGESTORE_SANITIZE") == "1" else []
fastget = Extension("pagestore._fastget", sources=["pagestore/csrc/fastget.c"], include_dirs=["pagestore/csrc"],
                    depends=["pagestore/csrc/ps_fastget.h"],
                    extra_compile_args=["-O2", "-Wall", "-Werror", "-std=gnu11", "-fvisibility=hidden"]
                    + _SAN + (["-g"] if _SAN else []),
                    extra_link_args=_SAN)

setup(cffi_modules=["pagestore/_build.py:ffibuilder"], ext_modules=[fastget])
