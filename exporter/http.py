"""The sidecar's HTTP server: /metrics from a registry, /healthz from the sampler."""

from __future__ import annotations

import gzip
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import ThreadingWSGIServer, choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from dask_metrics.exporter.exposition import render

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

ALLOW = "GET, HEAD, OPTIONS"
TEXT = "text/plain; charset=utf-8"


class _QuietHandler(WSGIRequestHandler):
    """Scrapes every few seconds would flood the log; errors still go to stderr."""

    wbufsize = 1 << 16  # status line, headers and body in one send, not five
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


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
    gpu: Collector, rest: CollectorRegistry, healthy: Callable[[], tuple[bool, str]]
) -> WSGIApp:
    """/metrics serves ``gpu`` (encoded by dask_metrics.exporter.exposition) and ``rest`` (by
    prometheus_client), both filtered by ``?name[]=``; /healthz says whether sampling is
    alive. GET and HEAD (the same headers, no body) on both; OPTIONS lists the methods."""

    def metrics(environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        names = parse_qs(environ.get("QUERY_STRING", "")).get("name[]")
        encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
        families: Iterable[Metric] = gpu.collect()
        others: Collector = rest
        if names:
            wanted = set(names)
            families, others = restrict(families, wanted), _Restricted(rest, wanted)
        body = render(families, others, encoder, content_type)
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            body = gzip.compress(body, compresslevel=1)  # the library's level 9 costs ~7x
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


def serve(
    host: str, port: int, app: WSGIApp, tls: ssl.SSLContext | None = None
) -> tuple[ThreadingWSGIServer, threading.Thread]:
    """Start serving in a daemon thread; IPv6 addresses work as well as IPv4 ones."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]

    class Server(ThreadingWSGIServer):
        address_family = family

    httpd = make_server(host, port, app, Server, handler_class=_QuietHandler)
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, name="dask-metrics-http", daemon=True)
    thread.start()
    return httpd, thread
