import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if os.environ.get("PAGESTORE_GC_STRESS"):
    # `make gc-stress`: the collector runs every few dozen allocations, so the
    # garbage cycles that failed opens and dropped stores leave behind meet it
    # at many more points (CPython 3.11 crashed clearing an exported
    # memoryview in such a cycle: tests/pagestore/test_gc_cycles.py).
    gc.set_threshold(50, 5, 10)
