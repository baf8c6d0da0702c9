"""What an application gets when it installs pagestore: one import name.

The layers live in their own folders of the repository (wal/, checkpoint/,
...) but are installed and imported only as `pagestore.wal`,
`pagestore.checkpoint`, ...; the benchmark harness is not installed at all.
So an application with modules of its own named like a layer keeps working.
"""

import os
import pathlib
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAYER_NAMES = ("wal", "checkpoint", "recovery", "throttling", "diskio", "bench")

APP = r"""
import sys, pagestore
path = sys.argv[1]
with pagestore.open(path) as db:
    db[b"apple"] = b"red"
    db.put(b"banana", b"yellow")
with pagestore.open(path) as db:
    assert db[b"apple"] == b"red" and len(db) == 2
print("ok")
"""


def test_an_app_with_modules_named_like_the_layers_opens_writes_and_reopens(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    for name in LAYER_NAMES:
        (app / f"{name}.py").write_text(f"raise ImportError('the application\\'s own {name}.py was imported')\n")
    (app / "main.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "main.py", str(tmp_path / "store")], cwd=app, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_wheel_holds_only_pagestore_names(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=600)
    wheel, = tmp_path.glob("pagestore-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"pagestore", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    for layer in LAYER_NAMES[:-1]:
        assert f"pagestore/{layer}/__init__.py" in names, layer
    assert not any(n.startswith("pagestore/bench") for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    pinned = [line for line in requires if "==" in line.split(";")[0]]   # not `extra == "bench"`
    assert requires and not pinned, pinned
