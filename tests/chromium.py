"""Headless Chromium driven over the DevTools protocol, with the standard library only.

Chromium's --remote-debugging-pipe reads protocol commands on its file descriptor 3 and
writes replies and events on descriptor 4, each a JSON message ended by a NUL byte; a shell
`exec` hands it our pipes as those two descriptors. No port is opened and no client library
is needed, and every event the page raises (console messages, exceptions, network requests)
arrives on the same pipe, so a test can assert on all of them.

Also a script: `python tests/chromium.py REPORT.html SHOT.png [WIDTH HEIGHT]` takes a
screenshot of a page's first screen (the README's picture of the report is made this way).
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--remote-debugging-pipe"]
WAIT_FOR_RENDERED = """new Promise(function (done) {
  (function check() {
    var state = document.body && document.body.getAttribute("data-rendered");
    if (state) { done(state); } else { setTimeout(check, 50); }
  })();
})"""


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class Chromium:
    def __init__(self, binary: str, timeout_s: float = 120.0):
        self.profile = tempfile.mkdtemp(prefix="fleetplan-chromium-")
        self.timeout_s = timeout_s
        self.proc = subprocess.Popen(
            ["sh", "-c", 'exec "$@" 3<&0 4>&1 0</dev/null 1>/dev/null', "sh", binary, *FLAGS,
             f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.events: list[dict] = []
        self._buffer = b""
        self._id = 0

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ protocol

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send one command and wait for its reply; events meanwhile go to ``events``."""
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.proc.stdin.write(json.dumps(message).encode() + b"\0")
        self.proc.stdin.flush()
        while True:
            reply = self._read()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str | None = None) -> dict:
        for i, event in enumerate(self.events):
            if event.get("method") == method and event.get("sessionId") == session:
                return self.events.pop(i)
        while True:
            event = self._read()
            if event.get("method") == method and event.get("sessionId") == session:
                return event
            self.events.append(event)

    def _read(self) -> dict:
        deadline = time.monotonic() + self.timeout_s
        fd = self.proc.stdout.fileno()
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("no answer from Chromium")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    # ------------------------------------------------------------------ pages

    def open(self, url: str, width: int = 1400, height: int = 1000) -> str:
        """Open ``url`` in a new tab of the given viewport with console, log and network
        events recorded; wait for the load event; return the tab's session id."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session)
        self.send("Page.navigate", {"url": url}, session)
        self.wait_for("Page.loadEventFired", session)
        return session

    def evaluate(self, session: str, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True},
                           session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, session: str, path: Path, full_page: bool = False) -> Path:
        params = {"format": "png"}
        if full_page:
            size = self.evaluate(session, "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1})
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", params, session)["data"]))
        return path

    def print_pdf(self, session: str, path: Path) -> Path:
        data = self.send("Page.printToPDF", {"printBackground": True, "preferCSSPageSize": True}, session)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def problems(self, session: str) -> list[str]:
        """Console errors and warnings, uncaught exceptions and error log entries of a tab."""
        out = []
        for e in self.events:
            if e.get("sessionId") != session:
                continue
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif e["method"] == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails'].get('exception', {}).get('description')}")
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(f"log.{p['entry']['level']}: {p['entry']['text']} {p['entry'].get('url', '')}")
        return out

    def requests(self, session: str) -> list[str]:
        """The URL of every request the tab made (documents, scripts, images, fetches)."""
        return [e["params"]["request"]["url"] for e in self.events
                if e.get("sessionId") == session and e["method"] == "Network.requestWillBeSent"]


def main(argv: list[str]) -> int:
    report, out = Path(argv[0]).resolve(), Path(argv[1])
    width, height = (int(argv[2]), int(argv[3])) if len(argv) > 3 else (1400, 1000)
    binary = find_chromium()
    if binary is None:
        print("no Chromium found", file=sys.stderr)
        return 1
    with Chromium(binary) as browser:
        session = browser.open(report.as_uri(), width, height)
        browser.evaluate(session, WAIT_FOR_RENDERED)
        browser.screenshot(session, out)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
