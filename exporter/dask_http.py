"""Where a Dask server (scheduler or worker) serves HTTP: its dashboard's ``/metrics`` URL.

Dask starts the HTTP server before the preloads (``Server.start_http_server``: its
``http_server`` and the ``http_application`` routes are set; 2024.1.0, 2026.8.0), so both
are known when a preload or plugin sets up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distributed.comm.addressing import get_address_host
from tornado.web import OutputTransform


def http_url(host: str, port: int, tls: bool, path: str = "/metrics") -> str:
    """``http(s)://host:port/path``, an IPv6 host in brackets."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"{'https' if tls else 'http'}://{shown}:{port}{path}"


def server_host(server: Any) -> str | None:
    """The host ``server`` is reached at (its comm address'); None before it listens."""
    try:
        return get_address_host(server.address)
    except (ValueError, TypeError):
        return None


def dashboard_url(server: Any, path: str = "/metrics") -> str | None:
    """The URL of ``path`` on ``server``'s HTTP server, on the host it is reached at; None
    where it serves no HTTP."""
    http = getattr(server, "http_server", None)
    port = getattr(http, "port", None)
    host = server_host(server)
    if not port or not host:
        return None
    return http_url(host, int(port), bool(getattr(http, "ssl_options", None)), path)


def http_application(server: Any) -> Any:
    """The tornado Application that routes ``server``'s HTTP requests, or None."""
    return getattr(server, "http_application", None)


def watch_scrapes(server: Any, scraped: Callable[[str], None]) -> bool:
    """Tell ``scraped`` the client address of every GET of ``server``'s ``/metrics``, once
    per application however often asked; False where it serves no HTTP. Tornado makes an
    output transform for each request before its handler runs: the one hook that sees the
    request of a route Dask owns."""
    app = http_application(server)
    if app is None:
        return False
    if getattr(app, _WATCHED, None) != scraped:
        setattr(app, _WATCHED, scraped)

        class _Scrapes(OutputTransform):
            def __init__(self, request: Any) -> None:
                super().__init__(request)
                if request.method == "GET" and request.path.endswith("/metrics"):
                    scraped(request.remote_ip or "")

        app.add_transform(_Scrapes)
    return True


_WATCHED = "_dask_metrics_scrapes"
