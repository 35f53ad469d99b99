"""``GET /dask-metrics/targets`` on the scheduler's HTTP server: Prometheus HTTP service
discovery (``http_sd_configs``) of the cluster's GPU endpoints and of the scheduler itself.

Prometheus reads a JSON list of target groups, ``[{"targets": ["host:port"], "labels":
{...}}]``, and refreshes it every ``refresh_interval``; each answer is built from the
scheduler's workers at that moment, so a worker that joins or leaves is seen at the next
refresh. The labels are the ones the endpoint's own series carry (``dask_cluster``,
``worker``): ``up`` then says whose endpoint is down. ``__meta_dask_role`` (``scheduler`` or
``worker``) is there for relabelling, as service discoveries' ``__meta_*`` labels are, and
leaves with them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import tornado.web

from dask_metrics.contract import DASK_CLUSTER, WORKER

TARGETS_PATH = "/dask-metrics/targets"
DEFAULT_PATH = "/metrics"
ROLE = "__meta_dask_role"


def target_group(url: str, labels: dict[str, str]) -> dict[str, Any] | None:
    """The group that scrapes ``url`` with ``labels``; None for a URL that names no host."""
    parts = urlsplit(url)
    if not parts.hostname or parts.scheme not in ("http", "https"):
        return None
    group = {**labels, "__scheme__": parts.scheme}
    if (parts.path or DEFAULT_PATH) != DEFAULT_PATH:
        group["__metrics_path__"] = parts.path
    return {"targets": [parts.netloc], "labels": group}


def target_groups(cluster: str, scheduler_url: str | None,
                  workers: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """The scheduler's group, then one per GPU endpoint of ``workers`` ((label, URL)).

    Workers in one process share one endpoint, which serves each one's series under its
    own ``worker`` label: that group carries no ``worker`` label of its own."""
    groups = []
    if scheduler_url:
        groups.append(target_group(scheduler_url, {DASK_CLUSTER: cluster, ROLE: "scheduler"}))
    by_url: dict[str, list[str]] = {}
    for label, url in workers:
        if url:
            by_url.setdefault(url, []).append(label)
    for url, labels in by_url.items():
        shared = {DASK_CLUSTER: cluster, ROLE: "worker"}
        if len(labels) == 1:
            shared[WORKER] = labels[0]
        groups.append(target_group(url, shared))
    return [g for g in groups if g is not None]


class TargetsHandler(tornado.web.RequestHandler):
    """Answers the current target groups as JSON; 404 once the plugin has gone."""

    def initialize(self, groups: Callable[[], list[dict[str, Any]] | None]) -> None:
        self._groups = groups

    def get(self) -> None:
        found = self._groups()
        if found is None:
            raise tornado.web.HTTPError(404)
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(found))


def serve_targets(application: Any, groups: Callable[[], list[dict[str, Any]] | None]) -> None:
    """Route ``TARGETS_PATH`` of ``application`` (the scheduler's, which has no way to remove
    a route: ``groups`` answers None once there is nothing to serve)."""
    application.add_handlers(r".*$", [(TARGETS_PATH, TargetsHandler, {"groups": groups})])
