"""The collector's results are the same on Prometheus, on VictoriaMetrics (started here, fed
through its import API) and behind a Thanos/Mimir-style path prefix with a tenant header:
``--step`` rows exactly on since + k*step and never before --since, a worker that started
seconds ago is found, ``--since monitor`` picks the session that really is the last one.

The data ends seconds before the store starts, so it is "now" data: VictoriaMetrics hides
the last 30 s of instant queries (-search.latencyOffset) and its response cache rounds a
query_range's start to the step, unless asked not to.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.collector_dataset import TOTAL, GiB
from tests.helpers import collector, read_csv
from tests.prometheus_helpers import (
    OpenMetrics,
    TenantProxy,
    create_blocks,
    requires_prometheus,
    run_prometheus,
    run_victoria_metrics,
)

pytestmark = [requires_prometheus, pytest.mark.integration]

STORES = ("prometheus", "victoriametrics", "tenant-prefix")
OLD = (-600, -10)  # w-old's samples, seconds from N, every 5 s
NEW = (-4, -3, -2)  # w-new started seconds ago
SESSION_1 = (-600, -300)
SESSION_2 = -5  # started 5 s before N, still running


def recent_data(n: int) -> OpenMetrics:
    om = OpenMetrics()
    for worker, times in (("w-old", range(OLD[0], OLD[1] + 1, 5)), ("w-new", NEW)):
        labels = {"worker": worker, "gpu": "0", "uuid": f"GPU-{worker}", "dask_cluster": "ml",
                  "instance": f"{worker}:9446", "job": "dask-gpu"}
        om.add("dask_gpu_info", {**labels, "hostname": worker}, [(n + t, 1.0) for t in times])
        om.add("dask_gpu_memory_used_bytes", labels,
               [(n + t, GiB + (t - OLD[0]) * 1000.0) for t in times])
        om.add("dask_gpu_memory_total_bytes", labels, [(n + t, float(TOTAL)) for t in times])
    sched = {"instance": "scheduler:8787", "job": "dask-scheduler", "dask_cluster": "ml"}
    times = [*range(OLD[0], OLD[1] + 1, 5), *NEW]
    om.add("dask_job_monitor_start_timestamp_seconds", sched,
           [(n + t, float(n + (SESSION_2 if t >= SESSION_2 else SESSION_1[0]))) for t in times])
    om.add("dask_job_monitor_stop_timestamp_seconds", sched,
           [(n + t, float(n + SESSION_1[1]) if SESSION_1[1] <= t < SESSION_2 else 0.0)
            for t in times])
    return om


@dataclass
class Store:
    kind: str
    url: str
    args: list[str]  # the collector's connection options for it
    n: int  # the data's "now"


@pytest.fixture(scope="module", params=STORES)
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Store]:
    n = int(time.time())
    data = recent_data(n)
    work = tmp_path_factory.mktemp(request.param)
    if request.param == "victoriametrics":
        with run_victoria_metrics(work, data=data) as server:
            yield Store("victoriametrics", server.url, ["--prometheus", server.url], n)
        return
    blocks = create_blocks(data, work / "blocks")
    with run_prometheus(work / "prom", blocks=blocks) as server:
        if request.param == "prometheus":
            yield Store("prometheus", server.url, ["--prometheus", server.url], n)
            return
        proxy = TenantProxy(server.url)
        try:
            yield Store("tenant-prefix", proxy.url, ["--prometheus", proxy.url, "--header",
                                                     f"X-Scope-OrgID: {proxy.tenant}"], n)
        finally:
            proxy.close()


def test_step_rows_are_on_the_grid_from_since(store: Store, tmp_path: Path) -> None:
    since = store.n - 597  # not a multiple of the step: a rounded start would show
    out = tmp_path / "out"
    run = collector("export", "--since", str(since), "--until", str(store.n - 10), "--step",
                    "10s", "--max-age", "10s", "--workers", "w-old", "--metrics", "total-mem",
                    "--out", str(out), *store.args)
    assert run.code == 0, run.err
    offsets = [float(r["timestamp"]) for r in read_csv(out / "w-old.csv")]
    assert offsets == [float(k * 10) for k in range(59)], store.kind


def test_a_worker_that_started_seconds_ago_is_found(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = collector("export", "--since", "1m", "--metrics", "total-mem", "--out", str(out),
                    *store.args)
    assert run.code == 0, run.err
    record = json.loads((out / "export.json").read_text())
    assert record["workers"] == ["w-new", "w-old"]
    # What cannot be made equal is said in the output and in export.json, only where it holds.
    victoria = store.kind == "victoriametrics"
    assert record["store"] == ("victoriametrics" if victoria else "promql")
    assert ("collector: note:" in run.err and "NaN" in run.err) == victoria, run.err
    assert (record["store_note"] is not None and "NaN" in record["store_note"]) == victoria
    assert (record["versions"]["prometheus"] is None) == victoria
    assert record["raw_reads"] == "query", store.kind  # the default
    assert len(read_csv(out / "w-new.csv")) == len(NEW)


def test_the_stores_faster_api_exports_the_same_files(store: Store, tmp_path: Path) -> None:
    """--read-api remote-read (Prometheus, through the tenant front too) and export
    (VictoriaMetrics) read the raw samples the queries read: the same files, byte for byte."""
    faster = "export" if store.kind == "victoriametrics" else "remote-read"
    made = {}
    for api in ("query", faster):
        out = tmp_path / api
        run = collector("export", "--since", str(store.n - 700), "--until", str(store.n),
                        "--read-api", api, "--out", str(out), *store.args)
        assert run.code == 0, run.err
        made[api] = json.loads((out / "export.json").read_text())
    assert made[faster]["raw_reads"] == faster.replace("-", " "), store.kind
    assert made["query"]["files"] and made[faster]["files"] == made["query"]["files"]
    for name in [*made["query"]["files"], "workers.csv", "jobs.csv", "gpu_by_prefix.csv"]:
        assert (tmp_path / faster / name).read_bytes() == (tmp_path / "query" / name
                                                            ).read_bytes(), (store.kind, name)


def test_since_monitor_is_the_session_that_started_seconds_ago(store: Store,
                                                               tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = collector("export", "--since", "monitor", "--metrics", "total-mem", "--out",
                    str(out), *store.args)
    assert run.code == 0, run.err
    record = json.loads((out / "export.json").read_text())
    assert record["since_unix"] == store.n + SESSION_2, store.kind
    assert record["workers"] == ["w-new"] and record["cluster"] == "ml"


@pytest.mark.parametrize("store", ["tenant-prefix"], indirect=True)  # the one that asks
def test_the_tenant_header_is_needed(store: Store) -> None:
    run = collector("peaks", "--since", "1h", "--prometheus", store.url)
    assert run.code == 1 and "X-Scope-OrgID" in run.err
