"""The report in a real browser: headless Chromium takes a screenshot and reports the layout.

``layout(html_path)`` loads a copy of the report with ``layout.js`` added, at
the given window size, and returns where the scenario tables, their charts and
sentences landed (``--dump-dom`` after the page's load event). ``screenshot``
writes a PNG of the first screen. Both raise ``BrowserMissing`` when no
Chromium is installed (``apt-get install -y chromium``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class BrowserMissing(RuntimeError):
    """No Chromium on this machine."""


def find_chromium() -> str:
    """The path of a Chromium binary, or BrowserMissing."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    raise BrowserMissing("no chromium found (apt-get install -y chromium)")


def _run(args: list, timeout: float) -> subprocess.CompletedProcess:
    exe = find_chromium()
    with tempfile.TemporaryDirectory(prefix="report-chromium-") as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}"] + args
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def screenshot(html_path: str, png_path: str, width: int = 1400, height: int = 1400,
               timeout: float = 120) -> str:
    """A PNG of the page's first ``width`` × ``height`` pixels."""
    png_path = os.path.abspath(png_path)
    # the virtual-time budget lets the page finish layout and paint before the shot
    p = _run([f"--window-size={width},{height}", "--virtual-time-budget=5000", f"--screenshot={png_path}",
              "file://" + os.path.abspath(html_path)], timeout)
    if not os.path.exists(png_path):
        raise RuntimeError(f"chromium wrote no screenshot {png_path}: {p.stderr.strip()[-400:]}")
    return png_path


def layout(html_path: str, width: int = 1400, height: int = 1400, timeout: float = 120) -> dict:
    """Boxes (page pixels) of the scenario tables, the charts beside them and the sentences."""
    with open(html_path, encoding="utf-8") as f:
        page = f.read()
    with open(os.path.join(HERE, "layout.js"), encoding="utf-8") as f:
        probe = f.read()
    with tempfile.TemporaryDirectory(prefix="report-layout-") as d:
        copy = os.path.join(d, "report.html")
        with open(copy, "w", encoding="utf-8") as f:
            f.write(page.replace("</body>", f"<script>{probe}</script></body>"))
        p = _run([f"--window-size={width},{height}", "--virtual-time-budget=5000", "--dump-dom",
                  "file://" + copy], timeout)
    m = re.search(r'<pre id="layout-probe">(.*?)</pre>', p.stdout, re.S)
    if not m:
        raise RuntimeError(f"chromium returned no layout: {p.stderr.strip()[-400:]}")
    import html
    return json.loads(html.unescape(m.group(1)))
