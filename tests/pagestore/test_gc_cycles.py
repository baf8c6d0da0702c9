"""A store or core that is dropped inside a garbage cycle is collected without
crashing the process. A store that failed to open, or that was dropped without
close(), is such a cycle (the exception's frames, the store, its core, the
WAL segment the core writes into). CPython 3.11's collector crashes clearing
a memoryview that is still exported to a live cffi buffer (gh-77894), so the
core must never hold such an export of the segment's view.

Each case runs in a child process, so a crash fails its own test only."""

import subprocess
import sys
import textwrap

_CORE_IN_A_CYCLE = """
import gc
from pagestore.diskio import aligned_buffer
from pagestore import _native
SEG = 1 << 20
for i in range(40):
    # the view first: the collector clears the unreachable objects in the
    # order they were tracked, so the view is cleared before the core's
    # callbacks would release their hold on it
    buf = aligned_buffer(SEG)
    core = _native.Core(page_size=4096, memory_size=1 << 20, checkpoint_buffer_size=1 << 18)
    core.wal_attach(buf, SEG, 0, 4096, 0, True)
    core.format_new()
    core.put(b"k%d" % i, b"v")
    core.cycle = core
    del core, buf
    gc.collect()
print("collected")
"""

_FAILED_CALLS = """
import gc
from pagestore import _native

class Holder:
    pass

calls = {
    "seal_page": lambda mv: _native.seal_page(mv, 1),
    "frame_recovery_records": lambda mv: _native.frame_recovery_records([1, 2], mv, 4096, 0, bytearray(64)),
    "seal_records": lambda mv: _native.seal_records(bytes(32), 1, 1, 0, 0, mv, 8, 99),
}
for name, call in calls.items():
    for i in range(20):
        view = memoryview(bytearray(4096 + 16))[16:32]   # tracked before the holder
        holder = Holder()
        try:
            call(view)
        except ValueError as e:
            holder.error = e        # the traceback keeps the call's frame
        else:
            raise SystemExit(f"{name}: no error")
        holder.cycle = holder
        del holder, view
        gc.collect()
print("collected")
"""

def _run(script: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args],
                          capture_output=True, text=True, timeout=120)


def test_a_core_in_a_garbage_cycle_with_its_wal_segment_view_is_collected():
    r = _run(_CORE_IN_A_CYCLE)
    assert r.returncode == 0, f"rc {r.returncode}: {r.stderr[-2000:]}"
    assert r.stdout.strip() == "collected"


def test_an_error_kept_in_a_cycle_holds_no_export_of_the_callers_view():
    # a call that fails leaves its frame in the error's traceback: the buffer
    # it handed to C must be released by then
    r = _run(_FAILED_CALLS)
    assert r.returncode == 0, f"rc {r.returncode}: {r.stderr[-2000:]}"
    assert r.stdout.strip() == "collected"
