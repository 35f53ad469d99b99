"""The optional ``--metrics-port`` server: ``/metrics`` with the ``dask_job_*`` series alone,
on a port of their own instead of the scheduler's dashboard port."""

from __future__ import annotations

import tornado.httpserver
import tornado.netutil
import tornado.web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector


class _MetricsHandler(tornado.web.RequestHandler):
    def initialize(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def get(self) -> None:
        encoder, content_type = choose_encoder(self.request.headers.get("Accept", ""))
        self.set_header("Content-Type", content_type)
        self.write(encoder(self._registry))


class MetricsServer:
    """Serves ``collector`` on ``port`` (0: any free one) of ``address`` ("": every
    interface) on the running tornado IOLoop, the scheduler's, so a scrape never runs
    concurrently with the hooks."""

    def __init__(self, collector: Collector, port: int, address: str = "") -> None:
        registry = CollectorRegistry()
        registry.register(collector)
        app = tornado.web.Application([(r"/metrics", _MetricsHandler, {"registry": registry})])
        sockets = tornado.netutil.bind_sockets(port, address or None)
        self._server = tornado.httpserver.HTTPServer(app)
        self._server.add_sockets(sockets)
        self.port: int = sockets[0].getsockname()[1]
        self.addresses: set[str] = {s.getsockname()[0] for s in sockets}

    def stop(self) -> None:
        self._server.stop()
