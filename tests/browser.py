"""Headless Chromium for the tests that look at a page as a person would: Debian's `chromium`
(installed by .ci/run), skipped with a clear message where it is absent.

`chromium(...)` runs one command-line capture (`--dump-dom`, `--screenshot`) of a static page.
`DevToolsPage` drives a single-page app (the Dagster UI) through the Chrome DevTools protocol,
over the `websockets` package dagster-webserver already brings: it waits for the app to draw
what a test expects, clicks, and takes screenshots, where `--dump-dom` would snapshot the page
at a fixed virtual time whatever the app's requests were doing.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"  # gitignored; CI keeps it


def chromium_binary() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium not found: install Debian's package with `apt-get update && apt-get install -y "
                    "chromium` (.ci/run does this before the tests)")
    return found


def base_args(binary: str, profile: Path) -> list[str]:
    # An own profile folder: another Chromium on the machine (a test, a person) is left alone.
    return [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}"]


def chromium(binary: str, profile: Path, *args: str, url: str) -> subprocess.CompletedProcess:
    return subprocess.run([*base_args(binary, profile), *args, url], capture_output=True, text=True,
                          timeout=120, check=True)


def wait_until(what: str, check, timeout: float, every: float = 0.25):
    """`check()`'s first truthy value; fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


class DevToolsPage:
    """One tab of a headless Chromium of our own, driven over the DevTools protocol."""

    def __init__(self, binary: str, profile: Path, width: int = 1440, height: int = 1000):
        from websockets.sync.client import connect

        profile.mkdir(parents=True, exist_ok=True)
        port_file = profile / "DevToolsActivePort"  # Chromium writes its port here (port 0: any free one)
        port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen([*base_args(binary, profile), "--remote-debugging-port=0",
                                      f"--window-size={width},{height}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.ids, self.stack = itertools.count(1), contextlib.ExitStack()
        try:
            port = wait_until("Chromium's DevTools port", lambda: port_file.is_file() and
                              port_file.read_text().split("\n")[0].strip(), timeout=60)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
                page = next(t for t in json.load(answer) if t["type"] == "page")
            self.ws = self.stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30))
            self.call("Page.enable")
        except BaseException:
            self.close()
            raise

    def call(self, method: str, **params) -> dict:
        """Send one command and return its result; events in between are dropped."""
        ident = next(self.ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == ident:
                if "error" in message:
                    raise AssertionError(f"DevTools {method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def text(self) -> str:
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def wait_for_text(self, *needles: str, timeout: float = 90) -> str:
        """The page's text once it holds every needle (the app has fetched and drawn them)."""
        return wait_until(f"the page to show {needles!r}", lambda: (t := self.text()) and
                          all(n in t for n in needles) and t, timeout)

    def resize(self, width: int, height: int) -> None:
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def screenshot(self, path: Path, full_page: bool = True) -> bytes:
        params = {"format": "png", "captureBeyondViewport": full_page}
        data = base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return data

    def settled_screenshot(self, path: Path, timeout: float = 30) -> bytes:
        """The viewport's screenshot once two taken in a row match: an animated layout has come to
        rest (polled, rather than a fixed sleep that is too short on a loaded machine)."""
        last: list[bytes] = []

        def still() -> bytes | None:
            shot = self.screenshot(path, full_page=False)
            same = bool(last) and last[-1] == shot
            last[:] = [shot]
            return shot if same else None
        return wait_until("the page to stop moving", still, timeout, every=0.5)

    def close(self) -> None:
        self.stack.close()
        stop_group(self.proc)


def stop_group(proc: subprocess.Popen, grace: float = 10) -> None:
    """Stop a process started with start_new_session=True and every helper it started."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            return
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever it left behind in its group
    except ProcessLookupError:
        pass
    proc.wait()
