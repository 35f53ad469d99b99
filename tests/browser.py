"""Headless Chromium (Debian package ``chromium``) for the report's tests: render a page from
disk, take a screenshot, and tell what it logged to the console and which hosts it asked for.

Every request goes through a proxy that only records what it is asked (``--proxy-server``
with loopback not bypassed), so a page that reaches for any host is seen, whatever the
scheme. Chromium asks a few of its own service hosts by itself (component updates, account
checks) even with its background networking off: those are left out by name.
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

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
