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
from dask_metrics.exporter.dask_http import dashboard_url, http_url, server_host
from dask_metrics.exporter.identity import STARTUP_KEY, worker_label
from dask_metrics.exporter.scheduler import dask_internals

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


def cluster_targets(scheduler: Any, cluster: str, metrics_port: int | None,
                    metrics_address: str) -> list[dict[str, Any]]:
    """The groups of ``scheduler``'s cluster now: its own endpoint (``metrics_port``'s
    server where dask_job_* are served on a port of their own, else the dashboard) and
    every worker that published where its GPU series are."""
    own = dashboard_url(scheduler)
    bound = metrics_address if metrics_address not in ("", "0.0.0.0", "::") else None
    host = bound or server_host(scheduler)
    if metrics_port is not None and host:
        own = http_url(host, metrics_port, False)
    workers = []
    for address in dask_internals.worker_addresses(scheduler):
        name, address, published = dask_internals.worker_info(scheduler, address, STARTUP_KEY)
        url = published.get("metrics_url") if isinstance(published, dict) else None
        if isinstance(url, str) and url:
            workers.append((worker_label(name, address), url))
    return target_groups(cluster, own, workers)


def scrape_jobs(targets_url: str, refresh: str = "15s") -> list[dict[str, Any]]:
    """Prometheus' scrape jobs over ``targets_url``: the workers' GPU endpoints and the
    scheduler, a job each (the names the alerts and dashboards expect). honor_labels keeps
    the series' own labels where the targets' (the same values) would add exported_*
    copies."""
    def job(name: str, role: str) -> dict[str, Any]:
        return {"job_name": name, "honor_labels": True,
                "http_sd_configs": [{"url": targets_url, "refresh_interval": refresh}],
                "relabel_configs": [{"source_labels": [ROLE], "regex": role,
                                     "action": "keep"}]}

    return [job("dask-gpu", "worker"), job("dask-scheduler", "scheduler")]


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
