"""The trial open behind ``bench.stores.pagestore_available``, run as ``python -m bench.probe``.

It runs in a child process because a broken build (a sanitizer build without its
runtime preloaded, say) may abort the process that loads the C core; exit code 0
means a store could be created, opened and closed in a temporary directory.
"""

import os
import shutil
import tempfile


def main() -> None:
    """Create, open and close a store in a fresh temporary directory."""
    d = tempfile.mkdtemp(prefix="bench-probe-")
    try:
        import pagestore
        pagestore.open(os.path.join(d, "db")).close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
