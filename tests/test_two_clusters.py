"""Two Dask clusters, one Prometheus, end to end: two local stacks (schedulers with the
preload, workers named alike with sidecars on simulated GPUs) and a shared Prometheus that
scrapes both, as a kube-prometheus-stack scrapes every DaskCluster of a namespace. Each
Monitor sees its own cluster only; the command line asks which one when the range holds two.
"""

from __future__ import annotations

import csv
import json
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from distributed import Client

from dask_metrics import Monitor
from dask_metrics.contract import DASK_CLUSTER, UP
from dask_metrics.demo.localstack import LocalStack, StackOptions
from tests.helpers import collector_process, wait_for
from tests.prometheus_helpers import every_second_rules, run_prometheus

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parent.parent


def busy(seconds: float) -> float:
    """A task long enough for a 1 s scrape interval to see its job run."""
    time.sleep(seconds)
    return seconds


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[LocalStack], str]]:
    tmp = tmp_path_factory.mktemp("two")
    with (LocalStack(StackOptions(tmp / "a", workers=2, cluster="team-a")) as a,
          LocalStack(StackOptions(tmp / "b", workers=2)) as b):  # b derives its own name
        jobs = []
        for stack in (a, b):  # the shared Prometheus scrapes what each stack's own does
            config = yaml.safe_load((stack.options.folder / "prometheus.yml").read_text())
            for job in config["scrape_configs"]:
                jobs.append({**job, "job_name": f"{job['job_name']}-{stack.cluster}"})
        with run_prometheus(tmp / "shared", scrape_configs=jobs,
                            rule_files=[every_second_rules(tmp)]) as shared:
            since = time.time()
            wait_for(lambda: shared.get(f"/api/v1/query?query=count(timestamp({UP.name})>"
                                        f"{since})")[1], lambda body: '"4"' in body,
                     timeout=60, what="the shared Prometheus to scrape all four sidecars")
            yield [a, b], shared.url


def run_session(stack: LocalStack, prometheus: str, jobs: int) -> tuple[list, list]:
    with Client(stack.scheduler_address) as client:
        monitor = Monitor(client, prometheus)
        monitor.start()
    for _ in range(jobs):  # each client a job, as in the original dask-metrics
        with Client(stack.scheduler_address) as client:
            assert client.submit(busy, 1.5, pure=False).result() == 1.5
    with Client(stack.scheduler_address) as client:
        monitor = Monitor(client, prometheus)
        monitor.stop()
        wait_for(lambda: monitor.peak_memory(), timeout=30, what="the session's peaks")
        return monitor.peak_memory(), monitor.successful_jobs()


def test_each_monitor_sees_its_own_cluster(clusters, tmp_path: Path):
    (a, b), prometheus = clusters
    assert a.cluster == "team-a" and b.cluster not in ("", "team-a")
    assert a.worker_names == b.worker_names  # the same worker names in both
    peaks_a, jobs_a = run_session(a, prometheus, jobs=1)
    peaks_b, jobs_b = run_session(b, prometheus, jobs=2)
    assert len(peaks_a) == len(peaks_b) == 2, (peaks_a, peaks_b)  # two workers, not four
    assert jobs_a == [[True]] and jobs_b == [[True], [True]], (jobs_a, jobs_b)
    for stack in (a, b):
        with Client(stack.scheduler_address) as client:
            result = Monitor(client, prometheus).to_csv(tmp_path / stack.cluster)
        record = json.loads((result.out / "export.json").read_text())
        assert record["cluster"] == stack.cluster
        for worker in stack.worker_names:
            with open(result.out / f"{worker}.csv", newline="") as fh:
                rows = list(csv.DictReader(fh))
            assert rows and {r["worker"] for r in rows} == {worker}
            # one GPU per worker in each cluster: rows of the other cluster would double them
            times = [r["time"] for r in rows]
            assert len(times) == len(set(times)), f"{stack.cluster}/{worker}: doubled rows"


def test_the_command_line_asks_which_cluster(clusters, tmp_path: Path):
    (a, b), prometheus = clusters
    asked = collector_process("export", "--since", "2m", "--out", str(tmp_path / "both"),
                              "--prometheus", prometheus)
    assert asked.returncode == 2, asked.stderr
    line = asked.stderr.strip()
    assert "\n" not in line and a.cluster in line and b.cluster in line, line
    assert not (tmp_path / "both").exists()
    for stack in (a, b):
        out = tmp_path / stack.cluster
        done = collector_process("export", "--since", "2m", "--out", str(out), "--cluster",
                                 stack.cluster, "--prometheus", prometheus)
        assert done.returncode == 0, done.stderr
        assert json.loads((out / "export.json").read_text())["cluster"] == stack.cluster
        peaks = collector_process("peaks", "--since", "2m", "--json", "--cluster",
                                  stack.cluster, "--prometheus", prometheus)
        assert peaks.returncode == 0, peaks.stderr
        assert sorted(p["worker"] for p in json.loads(peaks.stdout)) == stack.worker_names
    with urllib.request.urlopen(f"{prometheus}/api/v1/label/{DASK_CLUSTER}/values",
                                timeout=10) as resp:
        body = json.loads(resp.read())
    assert {a.cluster, b.cluster} <= set(body["data"])


GRAFANA_VARS = re.compile(r"\$\{(\w+)(?::[\w-]+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def panel_queries() -> list[tuple[str, str]]:
    """(dashboard, expr) of every panel target of the provisioned dashboards."""
    found = []
    for board in sorted((ROOT / "grafana" / "dashboards").glob("*.json")):
        todo = list(json.loads(board.read_text())["panels"])
        while todo:
            panel = todo.pop()
            todo += panel.get("panels", [])
            found += [(board.name, target["expr"]) for target in panel.get("targets", [])
                      if target.get("expr")]
    return found


def test_grafana_panels_show_the_chosen_cluster_only(clusters):
    """Every panel's query, with the dashboards' dask_cluster variable set to one cluster,
    returns no series of the other one (the workers are named alike in both)."""
    (a, b), prometheus = clusters
    for chosen in (a, b):
        values = {"dask_cluster": chosen.cluster, "worker": ".+", "gpu": ".+", "job_id": ".+",
                  "idle_below": "0.1", "top": "64", "workers_shown": "20", "rows_shown": "500",
                  "__rate_interval": "4s", "__interval": "1s",
                  "__interval_ms": "1000", "__range": "2m", "__range_s": "120",
                  "__range_ms": "120000"}
        answered = 0
        for board, expr in panel_queries():
            query = GRAFANA_VARS.sub(lambda m, v=values: v[next(g for g in m.groups() if g)],
                                     expr)
            url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": query})
            with urllib.request.urlopen(url, timeout=30) as resp:
                result = json.loads(resp.read())["data"]["result"]
            seen = {s["metric"].get(DASK_CLUSTER) for s in result} - {None}
            assert seen <= {chosen.cluster}, (board, expr, seen)
            answered += bool(result)
        assert answered >= 10, (chosen.cluster, answered)  # the panels had data to filter
