"""The sidecar's HTTP server: /metrics from a registry, /healthz from the sampler.

One thread per connection, at most ``max_connections`` at once; the accept loop only
accepts, so a client that is slow or silent (a TCP probe, half a TLS ClientHello, half a
request) holds its own thread and never the others: the TLS handshake runs in that thread,
and the handshake plus the request must arrive within ``timeout`` seconds (each write of
the answer gets as long), after which the connection is closed. A connection over the cap
waits up to ``QUEUE_WAIT`` seconds for a free slot, then gets a 503 (HTTPS: is closed).
Threads are daemons and shutting down waits for none of them longer than asked.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from dask_metrics.exporter.exposition import render

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

logger = logging.getLogger(__name__)

# The kernel queues this many connections the accept loop has not taken yet (capped by
# net.core.somaxconn): socketserver's 5 turned a burst of 50 scrapers into 1-7 s SYN retries.
LISTEN_BACKLOG = max(128, socket.SOMAXCONN)
QUEUE_WAIT = 1.0  # seconds a connection over the cap waits for a free slot before its 503

ALLOW = "GET, HEAD, OPTIONS"
TEXT = "text/plain; charset=utf-8"
PAGE_MAX_AGE = 1.0  # seconds an unfiltered /metrics page is served again, at most
ACCEPT_POLL = 0.5  # seconds between the accept loop's sweeps of overdue connections


class _QuietHandler(WSGIRequestHandler):
    """Scrapes every few seconds would flood the log; errors still go to stderr."""

    wbufsize = 1 << 16  # status line, headers and body in one send, not five
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (TimeoutError, ssl.SSLError, ConnectionError) as exc:
            logger.debug("connection from %s dropped: %s", self.client_address[0], exc)

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self.server.request_read(self.connection)  # type: ignore[attr-defined]
        return ok


class _Restricted:
    """The families of ``collector`` cut down to the samples named in ``names``: what
    prometheus_client's ``?name[]=`` does (sample names, e.g. ``process_cpu_seconds_total``;
    a family with no sample left is dropped)."""

    def __init__(self, collector: Collector, names: set[str]) -> None:
        self._collector = collector
        self._names = names

    def collect(self) -> list[Metric]:
        return restrict(self._collector.collect(), self._names)


def restrict(families: Iterable[Metric], names: set[str]) -> list[Metric]:
    kept = []
    for family in families:
        samples = [s for s in family.samples if s.name in names]
        if samples:
            cut = Metric(family.name, family.documentation, family.type, family.unit)
            cut.samples = samples
            kept.append(cut)
    return kept


def make_app(
    gpu: Collector, rest: CollectorRegistry, healthy: Callable[[], tuple[bool, str]],
    version: Callable[[], object] | None = None, scraped: Callable[[str], None] | None = None,
) -> WSGIApp:
    """/metrics serves ``gpu`` (encoded by dask_metrics.exporter.exposition) and ``rest`` (by
    prometheus_client), both filtered by ``?name[]=``; /healthz says whether sampling is
    alive. GET and HEAD (the same headers, no body) on both; OPTIONS lists the methods.

    ``version`` (the sampler's current snapshot) changes whenever ``gpu`` would collect
    something new: an unfiltered page (and its gzip) is encoded once per version and format
    and reused for at most ``PAGE_MAX_AGE`` seconds, so the process series stay that fresh
    and a burst of scrapes costs HTTP handling, not encoding. ``scraped`` is told the
    client address of every GET of /metrics (the peak window follows them)."""
    cached: dict[str, tuple[object, float, bytes, list[bytes]]] = {}  # by content type

    def page(encoder: Any, content_type: str) -> tuple[bytes, list[bytes]]:
        current = version() if version is not None else None
        now = time.monotonic()
        hit = cached.get(content_type)
        if hit is not None and hit[0] is current and now - hit[1] < PAGE_MAX_AGE:
            return hit[2], hit[3]
        body = render(gpu.collect(), rest, encoder, content_type)
        gz: list[bytes] = []  # compressed on the first request that asks for it
        if current is not None:
            cached[content_type] = (current, now, body, gz)
        return body, gz

    def metrics(environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        if scraped is not None and environ.get("REQUEST_METHOD") == "GET":
            scraped(environ.get("REMOTE_ADDR", ""))
        names = parse_qs(environ.get("QUERY_STRING", "")).get("name[]")
        encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
        gz: list[bytes] = []
        if names:
            wanted = set(names)
            body = render(restrict(gpu.collect(), wanted), _Restricted(rest, wanted), encoder,
                          content_type)
        else:
            body, gz = page(encoder, content_type)
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            if not gz:
                gz.append(gzip.compress(body, compresslevel=1))  # level 9 costs ~7x
            body = gz[0]
            headers.append(("Content-Encoding", "gzip"))
        return "200 OK", headers, body

    def health(environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        ok, reason = healthy()
        status = "200 OK" if ok else "503 Service Unavailable"
        return status, [("Content-Type", TEXT)], reason.encode() + b"\n"

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        method = environ.get("REQUEST_METHOD", "GET")
        page = health if path == "/healthz" else metrics if path in ("/", "/metrics") else None
        if page is None:
            status, headers, body = ("404 Not Found", [("Content-Type", TEXT)],
                                     b"not found: try /metrics or /healthz\n")
        elif method in ("GET", "HEAD"):
            status, headers, body = page(environ)
        elif method == "OPTIONS":
            status, headers, body = "200 OK", [("Allow", ALLOW)], b""
        else:
            status, headers, body = ("405 Method Not Allowed",
                                     [("Allow", ALLOW), ("Content-Type", TEXT)],
                                     f"method {method} not allowed: use {ALLOW}\n".encode())
        headers.append(("Content-Length", str(len(body))))
        start_response(status, headers)
        return [] if method == "HEAD" else [body]  # HEAD: GET's headers, no body

    return app


def tls_context(cert_file: str, key_file: str, client_ca_file: str | None) -> ssl.SSLContext:
    """A server context: TLS 1.2 or newer, client certificates required when CAs are given."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cafile=client_ca_file)
    return ctx


def _busy_answer(max_connections: int) -> bytes:
    body = (f"busy: all {max_connections} connections (--max-connections) are in use; "
            "retry\n").encode()
    return (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: " + TEXT.encode()
            + b"\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


class SidecarServer(ThreadingMixIn, WSGIServer):
    """A WSGI server, one daemon thread per connection, bounded in connections and time."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily,
                 tls: ssl.SSLContext | None, max_connections: int, timeout: float) -> None:
        self.address_family = family
        self.tls = tls
        self.max_connections = max_connections
        self.connection_timeout = timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        self._busy = _busy_answer(max_connections)
        self._lock = threading.Lock()
        self._deadlines: dict[int, float] = {}  # by fd: connections still reading a request
        self._next_sweep = 0.0
        super().__init__(address, _QuietHandler)

    # -- the accept loop: accept, and nothing that may block for long ----------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(timeout=QUEUE_WAIT):
            self._refuse(request)
            return
        with self._lock:
            self._deadlines[request.fileno()] = time.monotonic() + self.connection_timeout
        try:
            threading.Thread(target=self.process_request_thread, args=(request, client_address),
                             name="dask-metrics-http-conn", daemon=True).start()
        except RuntimeError:  # no thread to be had
            self._done(request.fileno())
            self._refuse(request)

    def _refuse(self, conn: socket.socket) -> None:
        """Over the cap: a 503 that costs the accept loop no wait (HTTPS: just closed)."""
        try:
            conn.setblocking(False)
            if self.tls is None:
                with contextlib.suppress(OSError):
                    conn.recv(65536)  # the request, if here: closing it unread would reset
                conn.send(self._busy)  # a few hundred bytes into an empty send buffer
        except OSError:
            pass
        finally:
            self.shutdown_request(conn)

    def service_actions(self) -> None:
        """Every poll of the accept loop: close connections whose request is overdue (the
        socket timeout bounds each read, this the sum of them: a client trickling a byte a
        second is cut off too)."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + ACCEPT_POLL
        with self._lock:  # held: a connection leaves the table before its fd is closed
            for fd in [fd for fd, deadline in self._deadlines.items() if deadline < now]:
                del self._deadlines[fd]
                try:  # shut the fd down under any TLS layer: its reader sees the end
                    raw = socket.socket(fileno=fd)
                    try:
                        raw.shutdown(socket.SHUT_RDWR)
                    finally:
                        raw.detach()  # the fd stays its connection's, to close
                except OSError:
                    pass

    # -- one connection, in its own thread -------------------------------------------------
    def process_request_thread(self, request: Any, client_address: Any) -> None:
        conn, fd = request, request.fileno()
        try:
            request.settimeout(self.connection_timeout)
            if self.tls is not None:
                conn = self.tls.wrap_socket(request, server_side=True)  # the handshake
            self.finish_request(conn, client_address)
        except (TimeoutError, ssl.SSLError, ConnectionError, OSError) as exc:
            logger.debug("connection from %s dropped: %s", client_address[0], exc)
        except Exception:
            self.handle_error(conn, client_address)
        finally:
            self._done(fd)
            self.shutdown_request(conn)

    def request_read(self, conn: socket.socket) -> None:
        """The request is in: no more deadline for it (writes have the socket timeout)."""
        with self._lock:
            self._deadlines.pop(conn.fileno(), None)

    def _done(self, fd: int) -> None:
        with self._lock:
            self._deadlines.pop(fd, None)
        self._slots.release()

    def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the connections being served; True if all ended."""
        deadline = time.monotonic() + timeout
        taken = 0
        try:
            while taken < self.max_connections:
                if not self._slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
                    return False
                taken += 1
            return True
        finally:
            for _ in range(taken):
                self._slots.release()


def serve(
    host: str, port: int, app: WSGIApp, tls: ssl.SSLContext | None = None,
    max_connections: int = 64, timeout: float = 10.0,
) -> tuple[SidecarServer, threading.Thread]:
    """Start serving in a daemon thread; IPv6 addresses work as well as IPv4 ones."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    httpd = SidecarServer((host, port), family, tls, max_connections, timeout)
    httpd.set_app(app)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": ACCEPT_POLL},
                              name="dask-metrics-http", daemon=True)
    thread.start()
    return httpd, thread
