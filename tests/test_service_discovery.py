"""``GET /dask-metrics/targets``: Prometheus' HTTP service discovery from the scheduler.

The group builder is pure; the end-to-end test runs a real Prometheus on it while a real
LocalCluster scales 1 -> 3 -> 1 workers."""

from __future__ import annotations

import json
import urllib.request

import dask.config
import pytest
from distributed import Client, LocalCluster

from dask_metrics.exporter.scheduler.targets import ROLE, target_groups
from tests.ground_truth import query
from tests.helpers import wait_for
from tests.prometheus_helpers import run_prometheus


def test_groups_carry_the_series_labels_and_a_path_where_not_metrics():
    groups = target_groups("c1", "https://10.0.0.1:8787/metrics",
                           [("w-0", "http://10.0.0.2:9446/metrics"),
                            ("w-1", "http://[fd00::3]:8788/status/metrics")])
    assert groups == [
        {"targets": ["10.0.0.1:8787"],
         "labels": {"dask_cluster": "c1", ROLE: "scheduler", "__scheme__": "https"}},
        {"targets": ["10.0.0.2:9446"],
         "labels": {"dask_cluster": "c1", ROLE: "worker", "worker": "w-0", "__scheme__": "http"}},
        {"targets": ["[fd00::3]:8788"],
         "labels": {"dask_cluster": "c1", ROLE: "worker", "worker": "w-1", "__scheme__": "http",
                    "__metrics_path__": "/status/metrics"}},
    ]


def test_workers_sharing_one_endpoint_are_one_group_without_a_worker_label():
    url = "http://127.0.0.1:8788/metrics"
    groups = target_groups("c1", None, [("a", url), ("b", url), ("c", "")])
    assert groups == [{"targets": ["127.0.0.1:8788"],
                       "labels": {"dask_cluster": "c1", ROLE: "worker", "__scheme__": "http"}}]
    assert target_groups("c1", None, []) == []  # nothing to scrape: an empty list


def targets(url: str) -> list[dict]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.headers["Content-Type"] == "application/json"
        return json.load(answer)


@pytest.mark.integration
def test_prometheus_follows_the_cluster_as_it_scales(tmp_path):
    preloads = {"distributed.scheduler.preload": ["dask_metrics.scheduler"],
                "distributed.worker.preload": ["dask_metrics.worker"],
                "dask-metrics.exporter.simulate": 1, "dask-metrics.exporter.interval": 0.2}
    with dask.config.set(preloads), LocalCluster(
            n_workers=1, threads_per_worker=1, dashboard_address="127.0.0.1:0",
            worker_dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        url = cluster.dashboard_link.replace("/status", "/dask-metrics/targets")
        sd = {"job_name": "dask", "honor_labels": True, "scrape_interval": "1s",
              "http_sd_configs": [{"url": url, "refresh_interval": "1s"}]}
        with run_prometheus(tmp_path / "prom", scrape_configs=[sd]) as prom:
            def scraped_workers() -> set[str]:
                return {r["metric"]["worker"] for r in query(prom, "dask_gpu_up")}

            def names() -> set[str]:
                return {str(w["name"]) for w in client.scheduler_info()["workers"].values()}

            # the scheduler's own group: its dask_job_* series, labelled like them
            wait_for(lambda: query(prom, "dask_job_plugin_errors_total"),
                     what="the scheduler scraped through its own targets")
            wait_for(scraped_workers, lambda w: w == names(), what="the first worker's GPU")
            cluster.scale(3)
            client.wait_for_workers(3, timeout=60)
            assert len(targets(url)) == 4  # the scheduler and three workers
            wait_for(scraped_workers, lambda w: len(w) == 3 and w == names(),
                     what="three workers' GPUs")
            cluster.scale(1)
            wait_for(lambda: len(client.scheduler_info()["workers"]), lambda n: n == 1,
                     timeout=60, what="the cluster back to one worker")
            assert len(targets(url)) == 2
            # a target gone is marked stale: its series leave the instant queries
            wait_for(scraped_workers, lambda w: w == names(), what="the two gone workers")
            up = wait_for(lambda: query(prom, "up"),
                          lambda up: {r["metric"].get("worker") for r in up} == {None, *names()},
                          what="the gone workers' targets")
            assert {r["metric"]["dask_cluster"] for r in up} == {
                json.loads(json.dumps(client.sync(client.scheduler.dask_metrics_cluster)))}
