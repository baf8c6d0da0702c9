import gc
import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Hypothesis times every example (200 ms deadline) and its data generation
# (the too_slow health check) by the wall clock: on a loaded CI machine a
# preempted example fails a run that a quiet one passes. No test here is
# about speed, so neither clock applies; print_blob makes any failure
# reproducible with @reproduce_failure. Every settings(...) in a test module
# inherits this profile (conftest is imported first).
settings.register_profile("pagestore", deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("pagestore")

if os.environ.get("PAGESTORE_GC_STRESS"):
    # `make gc-stress`: the collector runs every few dozen allocations, so the
    # garbage cycles that failed opens and dropped stores leave behind meet it
    # at many more points (CPython 3.11 crashed clearing an exported
    # memoryview in such a cycle: tests/pagestore/test_gc_cycles.py).
    gc.set_threshold(50, 5, 10)
