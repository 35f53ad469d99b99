"""Where a Dask server (scheduler or worker) serves HTTP: its dashboard's ``/metrics`` URL.

Dask starts the HTTP server before the preloads (``Server.start_http_server``: its
``http_server`` and the ``http_application`` routes are set; 2024.1.0, 2026.8.0), so both
are known when a preload or plugin sets up.
"""

from __future__ import annotations

from typing import Any

from distributed.comm.addressing import get_address_host


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
