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

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

from dask_metrics.exporter.exposition import render

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _QuietHandler(WSGIRequestHandler):
    """Scrapes every few seconds would flood the log; errors still go to stderr."""

    wbufsize = 1 << 16  # status line, headers and body in one send, not five
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


def make_app(
    gpu: Collector, rest: CollectorRegistry, healthy: Callable[[], tuple[bool, str]]
) -> WSGIApp:
    """/metrics serves ``gpu`` (encoded by dask_metrics.exporter.exposition) and ``rest`` (by
    prometheus_client); /healthz says whether sampling is alive."""
    everything = CollectorRegistry()
    everything.register(gpu)
    everything.register(rest)
    library_app = make_wsgi_app(everything)  # HEAD, OPTIONS and ?name[]= filters

    def metrics(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        query = parse_qs(environ.get("QUERY_STRING", ""))
        if environ.get("REQUEST_METHOD") != "GET" or "name[]" in query:
            return library_app(environ, start_response)
        encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
        body = render(gpu.collect(), rest, encoder, content_type)
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            body = gzip.compress(body, compresslevel=1)  # the library's level 9 costs ~7x
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            ok, reason = healthy()
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [reason.encode() + b"\n"]
        if path in ("/", "/metrics"):
            return metrics(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: try /metrics or /healthz\n"]

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
