"""Headless Chromium for the HTML page tests, driven over the DevTools pipe (no Python package
needed): read the page after its JavaScript ran, click, type, and fail on any uncaught
exception, console error or network request. scripts/ensure-chromium.sh installs chromium."""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import tempfile
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
browser = pytest.mark.skipif(CHROMIUM is None, reason="headless chromium not installed (run scripts/ensure-chromium.sh as root)")


class Browser:
    """Headless Chromium driven over ``--remote-debugging-pipe`` (the DevTools protocol on fds 3
    and 4, so no Python package is needed). Records uncaught exceptions, console errors,
    browser log errors (CSP violations, failed loads) and every network request."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="lar-prec-chromium-")
        to_child, self._w = os.pipe()
        self._r, from_child = os.pipe()

        def fds() -> None:
            # move both ends out of the way first: a pipe end may itself be fd 3 or 4
            a = fcntl.fcntl(to_child, fcntl.F_DUPFD_CLOEXEC, 10)
            b = fcntl.fcntl(from_child, fcntl.F_DUPFD_CLOEXEC, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={self._profile.name}", "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False, preexec_fn=fds)
        os.close(to_child)
        os.close(from_child)
        self._buf = b""
        self._id = 0
        self.events: List[dict] = []
        page = next(t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        for domain in ("Runtime", "Page", "Log", "Network"):
            self.send(domain + ".enable", session=self.session)

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer")
            if select.select([self._r], [], [], left)[0]:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, session: Optional[str] = None, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            m = self._message(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def _wait(self, method: str) -> dict:
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        deadline = time.monotonic() + self.timeout
        while True:
            m = self._message(deadline)
            if m.get("method") == method:
                return m
            self.events.append(m)

    def open(self, path: Path, fragment: str = "") -> None:
        """Load ``path`` afresh (events of earlier pages are dropped)."""
        self.send("Page.navigate", session=self.session, url="about:blank")
        self._wait("Page.loadEventFired")
        self.events.clear()
        self.url = path.resolve().as_uri()
        self.send("Page.navigate", session=self.session, url=self.url + fragment)
        self._wait("Page.loadEventFired")

    def js(self, expr: str):
        """Evaluate ``expr`` in the page (promises awaited) and return its JSON value."""
        r = self.send("Runtime.evaluate", session=self.session, expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise AssertionError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def settle(self, ms: int = 250) -> None:
        """Let debounced handlers run."""
        self.js(f"new Promise(r => setTimeout(r, {ms}))")

    def problems(self) -> List[str]:
        """Uncaught exceptions, console errors/warnings and browser log errors so far."""
        out = []
        for m in self.events:
            meth, p = m.get("method"), m.get("params", {})
            if meth == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
            elif meth == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif meth == "Log.entryAdded" and p["entry"].get("level") in ("error", "warning"):
                out.append("log: " + p["entry"].get("text", ""))
        return out

    def requests(self) -> List[str]:
        """URLs the page asked for (the page itself included)."""
        return [m["params"]["request"]["url"] for m in self.events if m.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)
        self._profile.cleanup()


@pytest.fixture(scope="module")
def chromium():
    if CHROMIUM is None:
        pytest.skip("headless chromium not installed (run scripts/ensure-chromium.sh as root)")
    b = Browser()
    yield b
    b.close()


def _clean_page(b: Browser) -> None:
    """The page rendered, fetched nothing but itself and reported no error of any kind."""
    assert b.js("document.body.dataset.rendered") is not None
    assert b.js("document.getElementById('fatal').hidden") is True
    assert b.problems() == []
    assert [u for u in b.requests() if u.split("#")[0] != b.url] == []


def _rows(b: Browser) -> List[int]:
    return b.js("Array.from(document.querySelectorAll('#vars-body tr')).map(r => Number(r.dataset.id))")


def png_rgb(png: bytes) -> Tuple[int, int, List[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB or RGBA, non-interlaced PNG (what
    Chromium's screenshots are), decoded with zlib alone: no imaging package needed."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, head = 8, b"", None
    while pos < len(png):
        n = struct.unpack(">I", png[pos:pos + 4])[0]
        kind, body = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, colour, _, _, interlace = head
    assert depth == 8 and colour in (2, 6) and interlace == 0, head
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
        rows.append(bytes(line) if bpp == 3 else bytes(v for k, v in enumerate(line) if k % 4 != 3))
    return w, h, rows


def inked(b: Browser, selector: str, inset: int = 2) -> Tuple[int, int]:
    """(pixels that are not the background, pixels) in a screenshot of the element ``selector``
    (its box shrunk by ``inset`` px on each side, so a frame around it does not count): what the
    browser really painted there. The background is the box's most common colour."""
    box = b.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView({{block: 'center'}});"
               " const r = e.getBoundingClientRect(); return [r.left + scrollX, r.top + scrollY, r.width, r.height]; })()")
    assert box is not None and box[2] > 2 * inset and box[3] > 2 * inset, (selector, box)
    clip = {"x": box[0] + inset, "y": box[1] + inset, "width": box[2] - 2 * inset, "height": box[3] - 2 * inset, "scale": 1}
    shot = b.send("Page.captureScreenshot", session=b.session, format="png", clip=clip, captureBeyondViewport=True)
    _, _, rows = png_rgb(base64.b64decode(shot["data"]))
    pixels = [r[i:i + 3] for r in rows for i in range(0, len(r), 3)]
    background = Counter(pixels).most_common(1)[0][0]
    far = sum(1 for p in pixels if sum(abs(x - y) for x, y in zip(p, background)) > 60)
    return far, len(pixels)


def plots(b: Browser) -> List[dict]:
    """Every plot of the page (plots.js figures and the error chart) as a reader meets it: its
    caption, its axis labels, its tick labels and how many points and bars it draws."""
    return b.js("""Array.from(document.querySelectorAll('figure.plot')).filter(f => f.offsetParent !== null).map(f => ({
        id: f.id, caption: f.querySelector('figcaption').innerText, aria: f.querySelector('svg').getAttribute('aria-label'),
        x: (f.querySelector('.x-label') || {}).textContent, y: (f.querySelector('.y-label') || {}).textContent,
        xticks: Array.from(f.querySelectorAll('.x-tick')).map(t => t.textContent),
        yticks: Array.from(f.querySelectorAll('.y-tick')).map(t => t.textContent),
        points: f.querySelectorAll('.pt').length, bars: f.querySelectorAll('.hist-bar').length}))""")


def hover(b: Browser, selector: str, k: int = 0) -> str:
    """Move the mouse over the k-th element matching ``selector`` (a real mouse event at its
    centre, as a reader's pointer) and return the text its plot's tip box shows."""
    box = b.js(f"(() => {{ const e = document.querySelectorAll({json.dumps(selector)})[{k}]; e.scrollIntoView({{block: 'center'}});"
               " const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()")
    b.send("Input.dispatchMouseEvent", session=b.session, type="mouseMoved", x=box[0], y=box[1])
    return b.js(f"(() => {{ const t = document.querySelectorAll({json.dumps(selector)})[{k}].closest('figure').querySelector('.plot-tip');"
                " return t.hidden ? null : t.textContent; })()")
