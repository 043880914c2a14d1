"""Headless Chromium for tests: a small Chrome DevTools Protocol client over --remote-debugging-pipe.

No third-party dependency: CDP messages are NUL-terminated JSON written to the browser's fd 3
and read from its fd 4. Every wait has a timeout and the browser is always killed on exit.

    with Browser() as b:
        page = b.open(path)            # waits for document.body.dataset.rendered
        page.errors                    # console errors/warnings, exceptions, log errors
        page.evaluate("1 + 1")
        page.download("button.click()", folder)   # the file a click saved
        page.screenshot(png_path)
"""

from __future__ import annotations

import base64
import fcntl
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

DEFAULT_CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
    "--remote-debugging-pipe",
]


class BrowserError(RuntimeError):
    """The browser failed, timed out or answered a command with an error."""


def find_chromium() -> str | None:
    """$CHAKRA_CHROMIUM, /usr/bin/chromium, or chromium on PATH; None when there is none."""
    for cand in (os.environ.get("CHAKRA_CHROMIUM"), DEFAULT_CHROMIUM, shutil.which("chromium")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def require_chromium() -> str:
    """The Chromium path, or a pytest skip (a failure when CHAKRA_REQUIRE_BROWSER=1, as on CI)."""
    import pytest

    path = find_chromium()
    if path is None:
        msg = f"Chromium not found at {DEFAULT_CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CHAKRA_REQUIRE_BROWSER") == "1":
            pytest.fail(msg + "; CHAKRA_REQUIRE_BROWSER=1 requires it")
        pytest.skip(msg)
    return path


class Browser:
    """One headless Chromium process; use as a context manager."""

    def __init__(self, executable: str | None = None, timeout: float = 30.0, width: int = 1400, height: int = 900):
        self.executable = executable or find_chromium() or DEFAULT_CHROMIUM
        self.timeout = timeout
        self.width, self.height = width, height
        self._proc: subprocess.Popen | None = None
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._responses: dict[int, dict] = {}
        self._events: list[dict] = []
        self._eof = False
        self._tmp: str | None = None

    # -- lifecycle
    def __enter__(self) -> Browser:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self._tmp = tempfile.mkdtemp(prefix="chakra-chromium-")
        to_r, to_w = os.pipe()  # we write, the browser reads on its fd 3
        from_r, from_w = os.pipe()  # the browser writes on its fd 4, we read
        # The child's ends go above 10 first so that dup2 onto 3 and 4 cannot clobber one of them.
        child_r = fcntl.fcntl(to_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_w = fcntl.fcntl(from_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_r)
        os.close(from_w)

        def wire_fds() -> None:  # runs in the child between fork and exec
            os.dup2(child_r, 3)
            os.dup2(child_w, 4)

        self._wfd, self._rfd = to_w, from_r
        self._stderr = open(os.path.join(self._tmp, "stderr.txt"), "wb")
        try:
            self._proc = subprocess.Popen(
                [
                    self.executable,
                    *FLAGS,
                    f"--user-data-dir={os.path.join(self._tmp, 'profile')}",
                    f"--window-size={self.width},{self.height}",
                    "about:blank",
                ],
                stdin=subprocess.DEVNULL,
                stdout=self._stderr,
                stderr=self._stderr,
                preexec_fn=wire_fds,
                close_fds=False,
                start_new_session=True,
            )
        except BaseException:
            for fd in (to_w, from_r):
                os.close(fd)
            self._stderr.close()
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
            raise
        finally:
            os.close(child_r)
            os.close(child_w)
        self._reader = threading.Thread(target=self._read_loop, name="cdp-reader", daemon=True)
        self._reader.start()
        try:
            self.send("Target.getTargets")  # the first answer proves the pipe works
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                try:
                    self.send("Browser.close", timeout=5)
                except BrowserError:
                    pass
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # its own session: helpers die too
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
            else:  # the browser is gone; stop any helper it left in its process group
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            for fd in (self._wfd, self._rfd):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._reader.join(timeout=5)
            self._stderr.close()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def stderr_tail(self, n: int = 2000) -> str:
        try:
            return Path(self._tmp, "stderr.txt").read_bytes()[-n:].decode(errors="replace") if self._tmp else ""
        except OSError:
            return ""

    # -- protocol
    def _read_loop(self) -> None:
        parts: list[bytes] = []
        try:
            while True:
                chunk = os.read(self._rfd, 1 << 20)
                if not chunk:
                    break
                start = 0
                while True:
                    j = chunk.find(b"\0", start)
                    if j < 0:
                        parts.append(chunk[start:])
                        break
                    parts.append(chunk[start:j])
                    self._deliver(json.loads(b"".join(parts)))
                    parts = []
                    start = j + 1
        except (OSError, ValueError):
            pass
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def _deliver(self, msg: dict) -> None:
        with self._cond:
            if "id" in msg:
                self._responses[msg["id"]] = msg
            else:
                self._events.append(msg)
            self._cond.notify_all()

    def send(
        self, method: str, params: dict | None = None, session: str | None = None, timeout: float | None = None
    ) -> dict:
        """Sends one command and waits for its result."""
        msg_id = next(self._ids)
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self._wfd, data) :]
        except OSError as e:
            raise BrowserError(f"{method}: cannot write to the browser ({e}); stderr: {self.stderr_tail()}") from e
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._cond:
            while msg_id not in self._responses:
                left = deadline - time.monotonic()
                if self._eof:
                    raise BrowserError(f"{method}: the browser exited; stderr: {self.stderr_tail()}")
                if left <= 0:
                    raise BrowserError(f"{method}: no answer within {timeout or self.timeout:g} s")
                self._cond.wait(left)
            resp = self._responses.pop(msg_id)
        if "error" in resp:
            raise BrowserError(f"{method}: {resp['error'].get('message')} {resp['error'].get('data', '')}".strip())
        return resp.get("result", {})

    def events(self, session: str | None = None, start: int = 0) -> list[dict]:
        with self._cond:
            return [e for e in self._events[start:] if session is None or e.get("sessionId") == session]

    def wait_event(
        self, method: str, session: str | None, start: int, timeout: float | None = None, where=None
    ) -> dict:
        """The first `method` event (for `session`, with `where(params)` true when given) received
        after index `start` of the event log."""
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._cond:
            while True:
                for e in self._events[start:]:
                    if (
                        e.get("method") == method
                        and (session is None or e.get("sessionId") == session)
                        and (where is None or where(e.get("params", {})))
                    ):
                        return e
                left = deadline - time.monotonic()
                if self._eof:
                    raise BrowserError(f"waiting for {method}: the browser exited; stderr: {self.stderr_tail()}")
                if left <= 0:
                    raise BrowserError(f"no {method} event within {timeout or self.timeout:g} s")
                self._cond.wait(left)

    def event_count(self) -> int:
        with self._cond:
            return len(self._events)

    # -- pages
    def open(
        self,
        path_or_url: str | os.PathLike,
        wait_for: str | None = "document.body && document.body.dataset.rendered",
        timeout: float | None = None,
    ) -> Page:
        """A new tab showing the file or URL, after its load event and once `wait_for` is truthy."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, target, session)
        for domain in ("Runtime", "Log", "Page"):
            page.send(f"{domain}.enable")
        page.set_viewport(self.width, self.height)
        url = str(path_or_url)
        if "://" not in url and not url.startswith("about:"):
            url = Path(url).resolve().as_uri()
        page.navigate(url, timeout=timeout)
        if wait_for:
            page.wait_for(wait_for, timeout=timeout)
        return page


class Page:
    """One tab, attached with a flat session."""

    def __init__(self, browser: Browser, target_id: str, session_id: str):
        self.browser, self.target_id, self.session_id = browser, target_id, session_id

    def send(self, method: str, params: dict | None = None, timeout: float | None = None) -> dict:
        return self.browser.send(method, params, session=self.session_id, timeout=timeout)

    def navigate(self, url: str, timeout: float | None = None) -> None:
        mark = self.browser.event_count()
        res = self.send("Page.navigate", {"url": url}, timeout=timeout)
        if res.get("errorText"):
            raise BrowserError(f"cannot open {url}: {res['errorText']}")
        self.browser.wait_event("Page.loadEventFired", self.session_id, mark, timeout=timeout)

    def evaluate(self, expression: str, await_promise: bool = False, timeout: float | None = None) -> Any:
        """The JSON value of a JS expression; a JS exception raises BrowserError."""
        res = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": await_promise},
            timeout=timeout,
        )
        if "exceptionDetails" in res:
            d = res["exceptionDetails"]
            raise BrowserError(
                f"{expression[:80]!r} threw: {d.get('exception', {}).get('description') or d.get('text')}"
            )
        return res.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float | None = None, interval: float = 0.05) -> Any:
        """Polls `expression` until it is truthy; returns its value."""
        limit = timeout or self.browser.timeout
        deadline = time.monotonic() + limit
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"{expression!r} still falsy after {limit:g} s; page errors: {self.errors}")
            time.sleep(interval)

    def next_frame(self) -> None:
        """Returns after two animation frames, so that scheduled drawing has happened."""
        self.evaluate(
            "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))", await_promise=True
        )

    def download(self, expression: str, folder: str | os.PathLike, timeout: float | None = None) -> Path:
        """Evaluates `expression`, which must start one download, and returns the file it saved
        in `folder` (created; use a new one per download, as a second file of the same name is
        renamed)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.browser.send(
            "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(folder), "eventsEnabled": True}
        )
        mark = self.browser.event_count()
        self.evaluate(expression)
        begin = self.browser.wait_event("Browser.downloadWillBegin", None, mark, timeout)["params"]
        end = self.browser.wait_event(
            "Browser.downloadProgress",
            None,
            mark,
            timeout,
            where=lambda p: p.get("guid") == begin["guid"] and p.get("state") in ("completed", "canceled"),
        )["params"]
        if end["state"] != "completed":
            raise BrowserError(f"the download of {begin.get('suggestedFilename')!r} was canceled")
        return folder / begin["suggestedFilename"]

    @property
    def errors(self) -> list[str]:
        """Console errors, assertions and warnings, uncaught exceptions and log errors, as text."""
        out = []
        for e in self.browser.events(self.session_id):
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
                args = " ".join(str(a.get("value", a.get("description", a.get("type")))) for a in p.get("args", []))
                out.append(f"console.{p['type']}: {args}")
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                entry = p["entry"]
                out.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())
        return out

    def set_viewport(self, width: int, height: int) -> None:
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def screenshot(self, path: str | os.PathLike, width: int | None = None, max_height: int = 16000) -> Path:
        """A full-page PNG: the viewport is grown to the page height first."""
        width = width or self.browser.width
        self.set_viewport(width, self.browser.height)
        self.next_frame()
        height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
        for _ in range(3):  # the page may reflow at its full height: repeat until it settles
            self.set_viewport(width, max(100, min(height, max_height)))
            self.next_frame()
            new = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
            if new == height:
                break
            height = new
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        self.set_viewport(self.browser.width, self.browser.height)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def screenshot_element(self, selector: str, path: str | os.PathLike, max_height: int = 8000) -> Path:
        """A PNG of the element `selector` (the page laid out at the browser's width)."""
        width = self.browser.width
        height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
        self.set_viewport(width, max(100, min(height, 16000)))
        self.next_frame()
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect(); "
            "return [r.x, r.y + window.scrollY, r.width, r.height]; })()"
        )
        clip = {
            "x": box[0],
            "y": box[1],
            "width": max(1, box[2]),
            "height": max(1, min(box[3], max_height)),
            "scale": 1,
        }
        data = self.send("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True})[
            "data"
        ]
        self.set_viewport(self.browser.width, self.browser.height)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
