"""A small driver for headless Chromium over the Chrome DevTools Protocol, for report tests.

It opens one page, records every network request, console message, uncaught
exception, log error and JavaScript dialog while the page loads, evaluates
expressions in it, and takes full-page screenshots. Chromium runs with a
fresh profile and with its own background traffic (updates, sync, field
trials) switched off, so the only requests seen are the page's own.

    with Chromium(tmp_path / "profile") as browser:
        page = browser.open(report.as_uri())
        assert not page.errors and not page.external_requests
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket  # websocket-client

__all__ = ["Chromium", "PageLoad", "find_chromium"]

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--no-default-browser-check",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
    "--disable-default-apps", "--metrics-recording-only", "--mute-audio", "--hide-scrollbars",
    "--remote-debugging-port=0",
]
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:", "chrome-error:")


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageLoad:
    """What happened while a page loaded."""

    url: str
    requests: list[str] = field(default_factory=list)
    console: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    @property
    def external_requests(self) -> list[str]:
        return [u for u in self.requests if not u.startswith(LOCAL_SCHEMES)]


class Chromium:
    """Headless Chromium with one page, driven over a DevTools websocket."""

    def __init__(self, profile: Path, binary: str | None = None, width: int = 1200, height: int = 900) -> None:
        self.profile = profile
        self.binary = binary or find_chromium()
        self.size = (width, height)
        self._id = 0
        self._events: list[dict[str, Any]] = []

    # lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> Chromium:
        if not self.binary:
            raise RuntimeError("no chromium binary on PATH")
        self.profile.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([self.binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port = self._port()
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=self.size[0], height=self.size[1],
                  deviceScaleFactor=1, mobile=False)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001 - closing a socket the browser may already have dropped
            pass
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _port(self, timeout: float = 30) -> int:
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker.exists():
                text = marker.read_text().split()
                if text:
                    return int(text[0])
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited early: {self.proc.stderr.read().decode(errors='replace')[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError("chromium did not open its DevTools port")

    # protocol ----------------------------------------------------------------------------
    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        ident = self._id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._events.append(message)

    def _pump(self, seconds: float) -> None:
        """Read events for ``seconds``."""
        deadline = time.monotonic() + seconds
        self.ws.settimeout(0.1)
        try:
            while time.monotonic() < deadline:
                try:
                    event = json.loads(self.ws.recv())
                except websocket.WebSocketTimeoutException:
                    continue
                self._events.append(event)
                if event.get("method") == "Page.javascriptDialogOpening":
                    # an alert() blocks the page until answered; answer it and let the test see it happened
                    self.ws.settimeout(30)
                    self.call("Page.handleJavaScriptDialog", accept=True)
                    self.ws.settimeout(0.1)
        finally:
            self.ws.settimeout(30)

    def _wait_for(self, method: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self._events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {timeout} s")
            self._pump(0.2)

    # pages -------------------------------------------------------------------------------
    def open(self, url: str, settle_s: float = 1.0) -> PageLoad:
        """Navigate to ``url``, wait for its load event and a quiet moment, and report what happened."""
        self._events.clear()
        self.call("Page.navigate", url=url)
        self._wait_for("Page.loadEventFired")
        self._pump(settle_s)
        return self._page_load(url)

    def _page_load(self, url: str) -> PageLoad:
        page = PageLoad(url)
        for event in self._events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Network.requestWillBeSent":
                page.requests.append(params["request"]["url"])
            elif method == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                page.console.append({"type": params.get("type"), "text": text})
                if params.get("type") in ("error", "assert"):
                    page.errors.append(f"console.{params['type']}: {text}")
            elif method == "Runtime.exceptionThrown":
                page.errors.append(f"exception: {params.get('exceptionDetails', {}).get('text')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                page.errors.append(f"log: {params['entry'].get('text')} ({params['entry'].get('url', '')})")
            elif method == "Page.javascriptDialogOpening":
                page.dialogs.append(params.get("message", ""))
        return page

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluate {expression!r}: {result['exceptionDetails'].get('text')}")
        return result.get("result", {}).get("value")

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page, not just the viewport."""
        metrics = self.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": self.size[0], "height": min(size["height"], 16000), "scale": 1}
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path
