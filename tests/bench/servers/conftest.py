import os
import shutil
import tempfile

import pytest


@pytest.fixture
def server_parent():
    """A directory the unprivileged bench user can traverse (pytest's tmp_path is root-only)."""
    d = tempfile.mkdtemp(prefix="pagestore-bench-test-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)

