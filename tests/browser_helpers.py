"""Headless Chromium for the HTML page tests, driven over the DevTools pipe (no Python package
needed): read the page after its JavaScript ran, click, type, and fail on any uncaught
exception, console error or network request. scripts/ensure-chromium.sh installs chromium."""
from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Optional

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
