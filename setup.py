"""Only here for cffi_modules: the C core is built by pagestore/_build.py."""
from setuptools import setup

setup(cffi_modules=["pagestore/_build.py:ffibuilder"])
