"""Headless Chromium (Debian package ``chromium``) for the report's tests: render a page from
disk, take a screenshot, and tell what it logged to the console and which hosts it asked for.

Every request goes through a proxy that only records what it is asked (``--proxy-server``
with loopback not bypassed), so a page that reaches for any host is seen, whatever the
scheme. Chromium asks a few of its own service hosts by itself (component updates, account
checks) even with its background networking off: those are left out by name.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
requires_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs chromium (Debian package 'chromium'; scripts/setup.sh)")
# Chromium's own requests, seen on this proxy with every flag below (not the page's).
BROWSER_HOSTS = frozenset({"update.googleapis.com", "accounts.google.com",
                           "clients2.google.com", "optimizationguide-pa.googleapis.com"})
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--no-default-browser-check", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions",
         "--disable-default-apps", "--no-pings", "--disable-domain-reliability",
         "--disable-client-side-phishing-detection", "--disable-breakpad",
         "--password-store=basic", "--hide-scrollbars",
         "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,Translate,"
         "MediaRouter,AutofillServerCommunication", "--enable-logging=stderr", "--v=0"]


@dataclass
class Rendered:
    console: list[str]  # the page's console messages (errors, CSP violations, logs)
    requests: list[str]  # the first line of each request the proxy got from the page
    screenshot: Path


class _RecordingProxy:
    """Accepts connections, keeps each request's first line, answers nothing."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            with conn:
                conn.settimeout(2)
                try:
                    head = conn.recv(4096)
                except OSError:
                    head = b""
                if head:  # a socket Chromium opened ahead and closed unused asks nothing
                    self.lines.append(head.split(b"\r\n", 1)[0].decode("latin-1"))

    def close(self) -> None:
        self.sock.close()


def _host(line: str) -> str:
    """The host a proxied request line asks for: ``CONNECT h:443 ...`` or ``GET http://h/...``."""
    parts = line.split()
    if len(parts) < 2:
        return ""
    target = parts[1]
    if "://" in target:
        target = target.split("://", 1)[1]
    return target.split("/", 1)[0].rsplit(":", 1)[0]


def render(page: Path, workdir: Path, size: tuple[int, int] = (1280, 2400)) -> Rendered:
    """Open ``page`` from disk in headless Chromium; screenshot of ``size`` pixels."""
    assert CHROMIUM is not None
    proxy = _RecordingProxy()
    shot = workdir / "screenshot.png"
    try:
        run = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={workdir / 'profile'}",
             f"--proxy-server=http://127.0.0.1:{proxy.port}", "--proxy-bypass-list=<-loopback>",
             f"--window-size={size[0]},{size[1]}", f"--screenshot={shot}",
             page.resolve().as_uri()],
            capture_output=True, text=True, timeout=120, check=False)
    finally:
        proxy.close()
    assert run.returncode == 0 and shot.is_file(), run.stderr[-3000:]
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    requests = [line for line in proxy.lines if _host(line) not in BROWSER_HOSTS]
    return Rendered(console, requests, shot)


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def _high(fd: int) -> int:
    """``fd`` moved to a number of 10 or more."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


class Page:
    """A page open in headless Chromium, driven over the DevTools protocol on a pipe
    (``--remote-debugging-pipe``: commands on fd 3, answers on fd 4, each a JSON text ending
    in NUL), so that tests read the laid-out page from its DOM: where things are, which
    lines a word spans. Evaluating there is the browser's own, not subject to the page's
    Content Security Policy, which keeps forbidding the page any script."""

    def __init__(self, workdir: Path) -> None:
        assert CHROMIUM is not None
        # the child's ends above 9, so that making them its fds 3 and 4 overwrites neither
        commands_r, self._commands = os.pipe()
        self._answers, answers_w = os.pipe()
        commands_r, answers_w = (_high(fd) for fd in (commands_r, answers_w))
        self._proxy = _RecordingProxy()
        self.process = subprocess.Popen(
            ["bash", "-c", f'exec "$@" 3<&{commands_r} 4>&{answers_w}', "bash", CHROMIUM,
             *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={workdir / 'cdp-profile'}",
             f"--proxy-server=http://127.0.0.1:{self._proxy.port}",
             "--proxy-bypass-list=<-loopback>", "about:blank"],
            pass_fds=(commands_r, answers_w), stdout=subprocess.DEVNULL,
            stderr=open(workdir / "chromium.log", "wb"))  # noqa: SIM115 (the child's)
        self._log = workdir / "chromium.log"
        os.close(commands_r)
        os.close(answers_w)
        self._buffer = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        target = self._send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._send("Target.attachToTarget",
                                   {"targetId": target, "flatten": True})["sessionId"]
        self._send("Page.enable", session=True)
        self._send("Runtime.enable", session=True)
        self._send("Log.enable", session=True)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._answers], [], [], left)
            if not ready:
                raise AssertionError("chromium did not answer within 60 s")
            chunk = os.read(self._answers, 1 << 20)
            if not chunk:
                raise AssertionError("chromium closed its DevTools pipe: "
                                     + self._log.read_text(errors="replace")[-3000:])
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _send(self, method: str, params: dict[str, Any] | None = None,
              session: bool = False) -> dict[str, Any]:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 60
        while True:
            found = self._read(deadline)
            if found.get("id") == self._next:
                assert "error" not in found, f"{method}: {found['error']}"
                return dict(found.get("result", {}))
            self.events.append(found)

    def open(self, page: Path, width: int, height: int) -> None:
        """Load ``page`` in a viewport of width x height CSS pixels (a phone's below 600)."""
        self._send("Emulation.setDeviceMetricsOverride",
                   {"width": width, "height": height, "deviceScaleFactor": 1,
                    "mobile": width < 600}, session=True)
        self.events.clear()
        self._send("Page.navigate", {"url": page.resolve().as_uri()}, session=True)
        deadline = time.monotonic() + 60
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._read(deadline))

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able)."""
        found = self._send("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True}, session=True)
        assert "exceptionDetails" not in found, found["exceptionDetails"]
        return found["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self._send("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def console(self) -> list[str]:
        """What the page logged (console calls, errors, CSP violations) since it opened."""
        out = []
        for e in self.events:
            if e.get("method") == "Log.entryAdded":
                out.append(e["params"]["entry"]["text"])
            elif e.get("method") == "Runtime.consoleAPICalled":
                out.append(" ".join(str(a.get("value")) for a in e["params"]["args"]))
            elif e.get("method") == "Runtime.exceptionThrown":
                out.append(e["params"]["exceptionDetails"]["text"])
        return out

    def requests(self) -> list[str]:
        return [line for line in self._proxy.lines if _host(line) not in BROWSER_HOSTS]

    def close(self) -> None:
        os.close(self._commands)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._answers)
        self._proxy.close()

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
