"""A store's limit on the series one query may select (VictoriaMetrics'
-search.maxUniqueTimeseries and -search.maxExportSeries, started here with a limit of
LIMIT; Mimir's max_fetched_series_per_query and Thanos' series limit answer alike): a batch
of workers over it is read as halves of the batch, and the cluster-wide question of which
workers executed tasks, over it whatever the range, is answered by reading every worker.
The files are those of an unlimited Prometheus serving the same samples.

The fleet, scraped every 1, 15 and 60 s: WORKERS workers of two GPUs and PREFIXES
prefix-task series each, so that every GPU's info (80 series) fits the limit, a batch of
all the workers (their GPUs' three metrics: 240 series) does not, and neither do the
prefix tasks of the cluster (120), nor the activity counters of its JOBS jobs (126, at
most 5 a job), nor the GPUs of the two clusters on the store (80 of this one, 60 of OTHERS
workers of another); a spike at the last scrape before the range's end. A second
VictoriaMetrics limited to TIGHT series holds fewer than the cluster's GPUs and workers
(each with its exporter's peak window): which they are is asked in batches of their
listed UUIDs and names.

What each case costs the store, counted by VictoriaMetrics (benchmarks/bench_store_limits.py,
2026-12-02; before: the collector of ed2fb0b, before query/refusals.py, and of a61f589, by
the labels' last characters):

| case | questions (refused) | ed2fb0b | a61f589 |
|---|---:|---:|---:|
| export, limit 100 | 40 (9) | 40 (9) | 99 (11) |
| peaks, limit 100 | 15 (2) | 15 (2) | 15 (2) |
| export, limit 12 | 171 (44) | 180 (46) | 490 (54) |
| peaks, limit 12 | 66 (18) | 71 (19) | 160 (11) |
| report, limit 12 | 174 (46) | 183 (48) | 322 (36) |
| export of workers on one port, limit 12 | 35 (8) | 35 (8) | 183 (44) |
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from dask_metrics.collector.query.refusals import by_values
from dask_metrics.collector.store.client import PrometheusError
from dask_metrics.collector.store.series_limits import SeriesLimits
from tests.helpers import collector
from tests.prometheus_helpers import (
    OpenMetrics,
    PrometheusServer,
    create_blocks,
    requires_prometheus,
    requires_victoria_metrics,
    run_prometheus,
    run_victoria_metrics,
)

WORKERS, PREFIXES, JOBS, OTHERS, LIMIT = 40, 3, 30, 30, 100
TIGHT = 12  # a limit below a sixth of the cluster's GPUs, above one worker's series
SECONDS = 600
INTERVALS = (1, 15, 60)  # scrape intervals: the fastest, the chart's, Prometheus' default
CLUSTER = "limited"
PORTS = 20  # workers of a cluster named by their addresses on one port


def address(i: int) -> str:
    """A worker named by its address on a fixed port: the names share their last seven
    characters, ".5:9000"."""
    return f"tcp://10.0.{i}.5:9000"


def gpu_uuid(cluster: str, worker: int, gpu: int) -> str:
    """An NVML-like UUID: random hex digits, the same in every run."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{cluster}/{worker}/{gpu}')}"


def fleet(n: int, interval: int) -> OpenMetrics:
    """The fleet scraped every ``interval`` s up to ``n``; w-3's GPU 0 holds a spike at its
    last scrape before the end (one second before it at 1 s)."""
    om = OpenMetrics()
    times = [n - SECONDS + s for s in range(0, SECONDS + 1, interval)]
    spike = times[-2]
    for i in range(WORKERS):
        worker = f"w-{i}"
        for gpu in range(2):
            labels = {"worker": worker, "gpu": str(gpu), "uuid": gpu_uuid(CLUSTER, i, gpu),
                      "dask_cluster": CLUSTER, "instance": f"n{i}:9446", "job": "dask-gpu"}
            om.add("dask_gpu_info", {**labels, "hostname": f"n{i}", "name": "Fake GPU"},
                   [(t, 1.0) for t in times])
            om.add("dask_gpu_memory_used_bytes", labels,
                   [(t, float(15 * 2**30 if (i, gpu, t) == (3, 0, spike) else
                               (i * 7 + gpu) * 2**20 + (t % 600) * 4096)) for t in times])
            om.add("dask_gpu_memory_total_bytes", labels, [(t, float(16 * 2**30)) for t in times])
            om.add("dask_gpu_up", labels, [(t, 1.0) for t in times])
        exporter = {"worker": worker, "dask_cluster": CLUSTER, "instance": f"n{i}:9446",
                    "job": "dask-gpu"}
        om.add("dask_gpu_exporter_peak_window_seconds", exporter, [(t, 5.0) for t in times])
        om.add("dask_gpu_exporter_sample_interval_seconds", exporter, [(t, 0.5) for t in times])
        om.add("dask_job_worker_rmm_used_bytes",
               {"worker": worker, "dask_cluster": CLUSTER, "instance": "scheduler:8787",
                "job": "dask-scheduler"}, [(t + 7, float(i * 2**20)) for t in times])
        for k in range(PREFIXES):
            om.add("dask_job_worker_prefix_tasks",
                   {"worker": worker, "dask_cluster": CLUSTER, "scheduler_start": "1",
                    "job_id": "j", "dag_id": "0", "prefix": f"p{k}",
                    "instance": "scheduler:8787", "job": "dask-scheduler"},
                   [(t + 7, float(k % 2)) for t in times])
    for i in range(OTHERS):  # another team's cluster on the shared store
        for gpu in range(2):
            om.add("dask_gpu_info", {"worker": f"w-{i}", "gpu": str(gpu),
                                     "uuid": gpu_uuid("other", i, gpu), "dask_cluster": "other",
                                     "instance": f"o{i}:9446", "job": "dask-gpu",
                                     "hostname": f"o{i}", "name": "Fake GPU"},
                   [(t, 1.0) for t in times])
    for i in range(PORTS):
        worker = {"worker": address(i), "dask_cluster": "ports", "instance": f"p{i}:9446",
                  "job": "dask-gpu"}
        gpu = {**worker, "gpu": "0", "uuid": gpu_uuid("ports", i, 0)}
        om.add("dask_gpu_info", {**gpu, "hostname": f"p{i}", "name": "Fake GPU"},
               [(t, 1.0) for t in times])
        om.add("dask_gpu_memory_used_bytes", gpu,
               [(t, float((i + 1) * 2**20 + (t % 600) * 4096)) for t in times])
        om.add("dask_gpu_memory_total_bytes", gpu, [(t, float(16 * 2**30)) for t in times])
        om.add("dask_gpu_up", gpu, [(t, 1.0) for t in times])
        om.add("dask_gpu_exporter_peak_window_seconds", worker, [(t, 5.0) for t in times])
        om.add("dask_gpu_exporter_sample_interval_seconds", worker, [(t, 0.5) for t in times])
        om.add("dask_job_worker_rmm_used_bytes",
               {"worker": address(i), "dask_cluster": "ports", "instance": "scheduler:8787",
                "job": "dask-scheduler"}, [(t + 7, float(i * 2**20)) for t in times])
    for j in range(JOBS):  # the cluster's activity counters over the limit, a job's not
        job = {"dask_cluster": CLUSTER, "scheduler_start": "1", "job_id": str(j),
               "dag_id": "0", "prefix": f"p{j % 3}", "instance": "scheduler:8787",
               "job": "dask-scheduler"}
        began = times[j % len(times)]  # some jobs begin inside the range
        for k, activity in enumerate(["thread-cpu", "thread-noncpu", "executor", "other"]):
            om.add("dask_job_activity_seconds_total", {**job, "activity": activity},
                   [(t + 3, (t - began) * (j + k + 1) / 64) for t in times if t >= began])
        if j % 5 == 0:
            om.add("dask_job_activity_bytes_total", {**job, "activity": "disk-read"},
                   [(t + 3, float((t - began) * 4096)) for t in times if t >= began])
    return om


class Stores(NamedTuple):
    """The fleet's samples up to ``n``, scraped every ``interval`` s, in an unlimited
    Prometheus, a VictoriaMetrics limited to LIMIT series a query and one to TIGHT."""

    n: int
    interval: int
    prom: PrometheusServer
    vm: PrometheusServer
    tight: PrometheusServer


@pytest.fixture(scope="module", params=INTERVALS, ids=[f"{i}s" for i in INTERVALS])
def stores(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Stores]:
    n = int(time.time()) - 30
    data = fleet(n, request.param)
    work = tmp_path_factory.mktemp("limits")

    def limits(most: int) -> list[str]:
        return [f"-search.maxUniqueTimeseries={most}", f"-search.maxExportSeries={most}"]

    with run_prometheus(work / "prom", blocks=create_blocks(data, work / "blocks")) as prom, \
            run_victoria_metrics(work / "vm", data=data, extra_args=limits(LIMIT)) as vm, \
            run_victoria_metrics(work / "tight", data=data, extra_args=limits(TIGHT)) as tight:
        yield Stores(n, request.param, prom, vm, tight)


def refuses(store: PrometheusServer, metric: str, most: int, cluster: str = CLUSTER) -> None:
    """The store refuses a question about every series of ``metric`` in ``cluster``."""
    from dask_metrics.collector.store.client import ConnectionSettings, PrometheusClient

    with PrometheusClient(ConnectionSettings(store.url)) as client, \
            pytest.raises(PrometheusError, match=f"exceeds {most}"):
        client.query(f'count(last_over_time({metric}{{dask_cluster="{cluster}"}}[1d]))',
                     time.time())


def run(what: str, url: str, n: int, out: Path, *more: str) -> tuple[str, str]:
    args = ["--since", str(n - SECONDS), "--until", str(n), "--prometheus", url,
            "--cluster", CLUSTER, *more]
    done = (collector("export", "--out", str(out), *args) if what == "export"
            else collector("peaks", "--json", "--by", "gpu", *args))
    assert done.code == 0, done.err
    return done.out, done.err


@requires_prometheus
@requires_victoria_metrics
@pytest.mark.integration
@pytest.mark.parametrize("options", [("--read-api", "query"), ("--read-api", "export"),
                                     ("--step", "30")], ids=["query", "export", "step"])
def test_a_store_limiting_series_per_query_gives_the_unlimited_stores_files(
        stores: Stores, tmp_path: Path,
        options: tuple[str, str]) -> None:
    n, interval, prom, vm, _ = stores
    refuses(vm, "dask_job_worker_prefix_tasks", LIMIT)  # the cluster's prefix series, whole
    run("export", prom.url, n, tmp_path / "prom", *options)
    _, err = run("export", vm.url, n, tmp_path / "vm", *options)
    # which workers executed tasks: asked by parts of their names, none read for nothing
    assert "prefix tasks are read" not in err
    assert "Traceback" not in err
    record = json.loads((tmp_path / "vm" / "export.json").read_text())
    assert record["files"] == [f"w-{i}.csv" for i in range(WORKERS)]
    rows = SECONDS // (30 if "--step" in options else interval) + 1
    assert record["rows"] == WORKERS * 2 * rows
    # a refused export is asked again in halves, not given up for the queries
    assert record["raw_reads"] == ("export" if "export" in options else "query")
    activities = (tmp_path / "vm" / "activities.csv").read_text().splitlines()
    assert len(activities) - 1 > LIMIT  # more counters than one query may select
    for name in [*record["files"], "workers.csv", "jobs.csv", "gpu_by_prefix.csv",
                 "activities.csv"]:
        assert (tmp_path / "vm" / name).read_bytes() == (tmp_path / "prom" / name
                                                         ).read_bytes(), name
    if "--step" in options:
        return
    unlimited, _ = run("peaks", prom.url, n, tmp_path / "p")
    limited, _ = run("peaks", vm.url, n, tmp_path / "v", *options)
    found = json.loads(limited)
    assert len(found) == WORKERS * 2 and found == json.loads(unlimited)
    spiked = [p for p in found if p["worker"] == "w-3" and str(p["gpu"]) == "0"]
    assert [p["peak_bytes"] for p in spiked] == [15 * 2**30]


@requires_prometheus
@requires_victoria_metrics
@pytest.mark.integration
@pytest.mark.parametrize(("api", "seconds"), [("query", SECONDS), ("export", SECONDS),
                                               ("query", 86_400)],
                         ids=["query", "export", "day"])
def test_a_limit_below_the_clusters_gpus_gives_the_unlimited_stores_numbers(
        stores: Stores, tmp_path: Path, api: str, seconds: int) -> None:
    """Which GPUs and workers the cluster has, and whether a long range holds any, are
    questions about every GPU, and the exporters' peak windows about every worker: refused,
    they are asked by parts of the GPUs' UUIDs and of the workers' names; the files, the
    peaks and the report's numbers are those of the unlimited store."""
    n, _, prom, _, tight = stores
    options = ("--read-api", api, "--since", str(n - seconds))
    refuses(tight, "dask_gpu_info", TIGHT)  # the cluster's GPUs, whole
    refuses(tight, "dask_gpu_exporter_peak_window_seconds", TIGHT)  # its workers, whole
    refuses(tight, "dask_job_worker_rmm_used_bytes", TIGHT)  # whether RMM is there, whole
    run("export", prom.url, n, tmp_path / "prom", *options[2:])
    _, err = run("export", tight.url, n, tmp_path / "tight", *options)
    assert "Traceback" not in err
    record = json.loads((tmp_path / "tight" / "export.json").read_text())
    assert record["files"] == [f"w-{i}.csv" for i in range(WORKERS)]
    assert "rmm-used" in record["metrics"]  # present: found by parts of the workers
    for name in [*record["files"], "workers.csv", "jobs.csv", "gpu_by_prefix.csv",
                 "activities.csv"]:
        assert (tmp_path / "tight" / name).read_bytes() == (tmp_path / "prom" / name
                                                            ).read_bytes(), name
    limited = json.loads(run("peaks", tight.url, n, tmp_path / "v", *options)[0])
    assert len(limited) == WORKERS * 2
    assert limited == json.loads(run("peaks", prom.url, n, tmp_path / "p", *options[2:])[0])
    reports = {}
    for name, store in (("prom", prom), ("tight", tight)):
        done = collector("report", "--out", str(tmp_path / f"report-{name}"), "--until",
                         str(n), "--prometheus", store.url, "--cluster", CLUSTER, *options)
        assert done.code == 0, done.err
        reports[name] = json.loads((tmp_path / f"report-{name}" / "report.json").read_text())
    for part in ("jobs", "headline", "where_the_time_went"):
        assert reports["tight"][part] == reports["prom"][part], part
    from dask_metrics.collector.query.scope import Scope
    from dask_metrics.collector.sources.worker_series import peak_windows
    from dask_metrics.collector.store.client import ConnectionSettings, PrometheusClient

    windows = []
    for store in (prom, tight):
        with PrometheusClient(ConnectionSettings(store.url)) as client:
            windows.append(peak_windows(client, (n - seconds) * 1000, n * 1000, Scope(CLUSTER)))
    assert windows[0] == windows[1] == {f"w-{i}": (5500, 500) for i in range(WORKERS)}
    assert reports["tight"]["headline"]["peak"]["peak_bytes"] == 15 * 2**30


@requires_prometheus
@requires_victoria_metrics
@pytest.mark.integration
def test_workers_named_by_their_addresses_on_one_port_are_found_under_a_limit(
        stores: Stores, tmp_path: Path) -> None:
    """Workers whose names end alike (one port) over the limit: their peak windows, RMM
    gauges and GPUs are asked by parts split before the port; the files and the peaks are
    those of the unlimited store."""
    n, _, prom, _, tight = stores
    ports = ("--cluster", "ports")
    refuses(tight, "dask_gpu_exporter_peak_window_seconds", TIGHT, "ports")
    run("export", prom.url, n, tmp_path / "prom", *ports)
    _, err = run("export", tight.url, n, tmp_path / "tight", *ports)
    assert "Traceback" not in err
    record = json.loads((tmp_path / "tight" / "export.json").read_text())
    assert len(record["files"]) == PORTS and "rmm-used" in record["metrics"]
    for name in [*record["files"], "workers.csv"]:
        assert (tmp_path / "tight" / name).read_bytes() == (tmp_path / "prom" / name
                                                            ).read_bytes(), name
    limited = json.loads(run("peaks", tight.url, n, tmp_path / "v", *ports)[0])
    assert len(limited) == PORTS
    assert limited == json.loads(run("peaks", prom.url, n, tmp_path / "p", *ports)[0])
    from dask_metrics.collector.query.scope import Scope
    from dask_metrics.collector.sources.worker_series import peak_windows
    from dask_metrics.collector.store.client import ConnectionSettings, PrometheusClient

    with PrometheusClient(ConnectionSettings(tight.url)) as client:
        windows = peak_windows(client, (n - SECONDS) * 1000, n * 1000, Scope("ports"))
    assert windows == {address(i): (5500, 500) for i in range(PORTS)}


@requires_prometheus
@requires_victoria_metrics
@pytest.mark.integration
def test_a_monitor_session_between_two_scrapes_ends_alike_under_a_limit_below_the_gpus(
        stores: Stores) -> None:
    """A session shorter than a scrape interval ends once every GPU was scraped after its
    stop: whether any GPU has a sample in it and each GPU's next scrape are questions
    about every GPU, asked by parts of their UUIDs where the store refuses them whole."""
    from dask_metrics.collector.query.scope import Scope
    from dask_metrics.collector.sources.session_window import scrapes_after, window
    from dask_metrics.collector.store.client import ConnectionSettings, PrometheusClient
    from dask_metrics.contract import UP

    n, interval, prom, _, tight = stores
    start = n - 2 * interval + 0.2 * interval  # just after a scrape, stopped before the next
    stop = start + 0.5 * interval
    ends, said = {}, []
    # VictoriaMetrics 1.79 lets a question over its limit pass once its series API has
    # listed the same series (its tag filters cache): asked before any listing of them
    refuses(tight, "dask_gpu_up", TIGHT)  # whether every GPU was scraped past the stop
    for name, store in (("prom", prom), ("tight", tight)):
        with PrometheusClient(ConnectionSettings(store.url)) as client:
            if store is tight:  # asked whole, the same is refused
                with pytest.raises(PrometheusError, match=f"exceeds {TIGHT}"):
                    scrapes_after(client, stop, Scope(CLUSTER), UP.name)
            ends[name] = window(client, start, stop, Scope(CLUSTER), stretch=True,
                                patience=5.0, warn=said.append)
            firsts = scrapes_after(client, stop, Scope(CLUSTER), UP.name, gpus=True)
            assert len(firsts) == WORKERS * 2 and set(firsts) == {n - interval}
    assert ends["tight"] == ends["prom"] == (start, n - interval)
    assert len(said) == 2 and all("less than one scrape" in line for line in said)


@requires_prometheus
@requires_victoria_metrics
@pytest.mark.integration
def test_each_store_lists_a_labels_values_by_the_api_it_answers(stores: Stores) -> None:
    """Prometheus and VictoriaMetrics under its limit list by the labels API; the tight
    VictoriaMetrics refuses that (its match[] counts against the limit) and lists by the
    series API, and the client asks that one from then on."""
    from dask_metrics.collector.store.client import ConnectionSettings, PrometheusClient

    n, _, prom, vm, tight = stores
    sel = f'dask_gpu_info{{dask_cluster="{CLUSTER}"}}'
    gpus = sorted(gpu_uuid(CLUSTER, i, g) for i in range(WORKERS) for g in range(2))
    for store, by_labels in ((prom, True), (vm, True), (tight, False)):
        with PrometheusClient(ConnectionSettings(store.url)) as client:
            found = client.label_values("uuid", sel, n - SECONDS, n)
            assert sorted(found) == gpus
            assert client._lists_labels is by_labels
            workers = client.label_values("worker", sel, n - SECONDS, n)
            assert sorted(set(workers)) == sorted(f"w-{i}" for i in range(WORKERS))
            # the series API says "" for a series without the label, the labels API nothing
            missing = set(client.label_values("nosuch", sel, n - SECONDS, n))
            assert missing == (set() if by_labels else {""})


@requires_prometheus
@requires_victoria_metrics
@pytest.mark.integration
def test_a_long_range_over_the_activity_counters_limit_gives_the_same_activities(
        stores: Stores, tmp_path: Path) -> None:
    """A day before the fleet's ten minutes: where the range is narrowed to the counters'
    samples (a question about all of them, refused), it is read whole instead."""
    n, _, prom, vm, _ = stores
    day = ("--since", str(n - 86_400))
    run("export", prom.url, n, tmp_path / "prom", *day)
    run("export", vm.url, n, tmp_path / "vm", *day)
    found = (tmp_path / "vm" / "activities.csv").read_bytes()
    assert len(found.splitlines()) - 1 > LIMIT
    assert found == (tmp_path / "prom" / "activities.csv").read_bytes()


@requires_prometheus
@requires_victoria_metrics
@pytest.mark.integration
@pytest.mark.parametrize("seconds", [SECONDS, 86_400], ids=["range", "day"])
def test_a_cluster_not_on_the_store_is_said_so_with_the_clusters_it_holds(
        stores: Stores, seconds: int) -> None:
    """Both clusters' GPUs are over the limit: the one named is found alone; one that is
    not there is said so in one line, with the clusters there (listed by parts of their
    GPUs), not as the store's refusal of a question about both."""
    n, _, _, vm, tight = stores
    for store in (vm, tight):
        done = collector("peaks", "--since", str(n - seconds), "--until", str(n),
                         "--prometheus", store.url, "--cluster", "nosuch")
        assert done.code == 1 and len(done.err.splitlines()) == 1, done.err
        assert done.err.startswith("collector: error: no GPU series of Dask cluster 'nosuch' ")
        assert f"(clusters: '{CLUSTER}', 'other', 'ports')" in done.err


def test_a_cluster_not_on_a_store_that_will_not_list_its_clusters_is_said_so() -> None:
    """Where even the parts of the GPUs are refused, the cluster named is said absent in
    one line that says the store would not list its clusters; unnamed, the store's error
    is the collector's."""
    from dask_metrics.collector.sources.discovery import NoGpuSeries, find_workers

    class Refusing:
        url = "http://store"
        series_limits = SeriesLimits()

        def query(self, expr: str, *_: object) -> list[object]:
            if expr.startswith("count(") and 'dask_cluster="nosuch"' in expr:
                return []  # the long range's first question: nothing of that cluster
            raise PrometheusError("the number of matching timeseries exceeds 5", 422,
                                  "execution", splittable=True, series_bound=True)

        query_range = query

        def label_values(self, *_: object) -> list[str]:  # nor will its series API
            raise PrometheusError("the number of matching timeseries exceeds 30000", 422,
                                  "execution", splittable=True, series_bound=True)

    day = 86_400_000
    with pytest.raises(NoGpuSeries, match="the store would not list its clusters"):
        find_workers(Refusing(), 0, day, 3_600_000, None, "nosuch")  # type: ignore[arg-type]
    with pytest.raises(PrometheusError, match="exceeds 5"):
        find_workers(Refusing(), 0, day, 3_600_000, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("error", "series"), [
    ("error when searching tsids: the number of matching timeseries exceeds 100; either "
     "narrow down the search or increase -search.max* command-line flag values", True),
    ("the query exceeded the maximum number of series (limit: 100 series) "
     "(err-mimir-max-series-per-query)", True),
    ("the query hit the max number of series limit (limit: 100 series)", True),
    ("rpc error: code = Aborted desc = exceeded series limit: limit 100 violated", True),
    ("the query exceeded the maximum number of chunks fetched (limit: 2000000 chunks) "
     "(err-mimir-max-chunks-per-query)", False),
    ("query processing would load too many samples into memory in query execution", False),
    ("cannot select more than -search.maxSamplesPerQuery=1000000000 samples; possible "
     "solutions: to increase the -search.maxSamplesPerQuery; to reduce time range for the "
     "query; to use more specific label filters in order to select lower number of series",
     False),
])
def test_a_limit_on_series_is_told_from_the_others(error: str, series: bool) -> None:
    """Stores' own words: a limit on series is met by fewer workers (a shorter range only
    where series come and go), the others by either."""
    from dask_metrics.collector.store.answer import series_limit, too_big

    assert too_big(error) and series_limit(error) is series


def test_a_refused_batch_is_asked_again_as_halves_down_to_one_worker() -> None:
    """by_values: a batch over the store's limit is halved until each part fits, the size
    kept for the rest; a worker alone is let halve its range; an error that fewer workers
    cannot help (a wrong password) is raised at once; a worker alone over the limit is the
    store's error."""
    asked: list[tuple[tuple[str, ...], bool]] = []

    def fetch(limit: int) -> object:
        def answer(names: list[str], halve: bool) -> dict[str, int]:
            asked.append((tuple(names), halve))
            if len(names) > limit:
                raise PrometheusError("too many series", 422, "execution", splittable=True)
            return {w: len(w) for w in names}
        return answer

    names = [f"w{i}" for i in range(5)]
    question = ("worker", "m")
    assert by_values(fetch(2), names, SeriesLimits(), question) == {w: 2 for w in names}
    assert asked == [(tuple(names), False), (("w0", "w1"), False), (("w2", "w3"), False),
                     (("w4",), True)]
    asked.clear()
    with pytest.raises(PrometheusError, match="too many series"):
        by_values(fetch(0), names[:2], SeriesLimits(), question)
    assert asked == [(("w0", "w1"), False), (("w0",), True)]

    def refused(names: list[str], halve: bool) -> dict[str, int]:
        asked.append((tuple(names), halve))
        raise PrometheusError("refused the credentials", 401)

    asked.clear()
    with pytest.raises(PrometheusError, match="credentials"):
        by_values(refused, names, SeriesLimits(), question)
    assert asked == [(tuple(names), False)]


def test_later_batches_are_cut_where_the_first_was_refused_for_its_series() -> None:
    """What one batch learnt of a limit on series serves the next batches of the same
    question: they are halved before they are asked, into the parts the store would have
    had, without its refusals; a limit on samples is not remembered (a range's, not the
    workers'), nor is one question's limit another's."""
    asked: list[tuple[str, ...]] = []

    def fetch(limit: int, series: bool) -> object:
        def answer(names: list[str], halve: bool) -> dict[str, int]:
            asked.append(tuple(names))
            if len(names) > limit:
                raise PrometheusError("over a limit", 422, "execution", splittable=True,
                                      series_bound=series)
            return {w: 1 for w in names}
        return answer

    first, later = ([f"{b}{i}" for i in range(8)] for b in "ab")
    limits = SeriesLimits()
    gpu, ran, samples = (("worker", m) for m in ("gpu", "ran", "samples"))
    assert by_values(fetch(2, True), first, limits, gpu) == {w: 1 for w in first}
    assert limits.size(gpu, 8) == 2  # 8, then the first 4 refused: 2 at a time
    assert asked == [tuple(first), tuple(first[:4])] + [tuple(first[i:i + 2])
                                                         for i in range(0, 8, 2)]
    asked.clear()
    assert by_values(fetch(2, True), later, limits, gpu) == {w: 1 for w in later}
    assert asked == [tuple(later[i:i + 2]) for i in range(0, 8, 2)]
    asked.clear()
    by_values(fetch(2, True), later, limits, ran)
    assert len(asked) == 6 and limits.size(ran, 8) == 2
    asked.clear()
    by_values(fetch(2, False), later, limits, samples)
    by_values(fetch(2, False), later, limits, samples)
    assert len(asked) == 12 and not limits.known(samples)


def test_a_chunk_refused_for_its_series_is_halved_twice_at_most() -> None:
    """A shorter range selects fewer series only where they come and go: a chunk refused
    for a limit on series is halved SERIES_SPLITS deep, not MAX_SPLITS, before the store's
    error is the collector's; other limits keep every halving."""
    from dask_metrics.collector.model.series import halve_range
    from dask_metrics.collector.query.refusals import MAX_SPLITS, SERIES_SPLITS, halved

    for series, splits in ((True, SERIES_SPLITS), (False, MAX_SPLITS)):
        tried: list[tuple[int, int]] = []

        def refuse(lo: int, hi: int, series: bool = series,
                   tried: list[tuple[int, int]] = tried) -> list[object]:
            tried.append((lo, hi))
            raise PrometheusError("over a limit", 422, "execution", splittable=True,
                                  series_bound=series)

        with pytest.raises(PrometheusError, match="over a limit"):
            halved(refuse, 0, 3_600_000, halve_range)  # type: ignore[arg-type]
        assert len(tried) == splits + 1  # depth-first: the first half of each, then raised


def test_workers_that_executed_tasks_are_all_read_where_no_part_of_them_is_answered(
) -> None:
    """A store that refuses even one worker's part for a limit on series has every worker
    read, said in a warning; as has one that refuses for another limit, without asking
    parts (they would hold as many samples). The workers are known: none is listed."""
    from dask_metrics.collector.sources.cluster import executing_workers

    class Refusing:
        def __init__(self, series_bound: bool) -> None:
            self.asked: list[str] = []
            self.warnings: list[str] = []
            self.series_bound = series_bound

        def query(self, expr: str, *_: object) -> list[object]:
            self.asked.append(expr)
            raise PrometheusError("the number of matching timeseries exceeds 5", 422,
                                  "execution", splittable=True,
                                  series_bound=self.series_bound)

        query_range = query

        def warn(self, message: str) -> None:
            self.warnings.append(message)

    client = Refusing(series_bound=True)
    workers = {f"w-{i}" for i in range(7)}
    found = executing_workers(client, 0, 600_000, 3_600_000, 60_000, workers)  # type: ignore[arg-type]
    assert found == workers and len(client.warnings) == 1
    assert "every worker's prefix tasks are read" in client.warnings[0]
    assert any('worker="w-0"' in e for e in client.asked)  # down to one worker's part
    client = Refusing(series_bound=False)  # a limit on samples: a part would not help
    found = executing_workers(client, 0, 600_000, 3_600_000, 60_000, workers)  # type: ignore[arg-type]
    assert found == workers and not any("worker=" in e for e in client.asked)


def test_a_question_about_every_series_is_split_by_a_label_the_series_have() -> None:
    """A GPU's series by its UUID, a worker's by its name: a part of a label the series
    lack would hold them all."""
    from dask_metrics.collector.query.scope import split_label
    from dask_metrics.contract import INFO, SPECS, UUID, WORKER

    per_gpu_or_worker = [spec for spec in SPECS if {UUID, WORKER} & set(spec.labels)]
    assert len(per_gpu_or_worker) > 20
    for spec in per_gpu_or_worker:
        assert split_label(spec.name) == (UUID if UUID in spec.labels else WORKER)
    assert split_label("dask_job_worker_rmm_used_bytes") == WORKER
    assert split_label(INFO.name) == UUID


def test_a_selector_is_narrowed_by_more_matchers() -> None:
    from dask_metrics.collector.query.promql import narrower

    more = ['uuid=~".*0"', 'uuid!~".*[0-9]0"']
    assert narrower("m", []) == "m"
    assert narrower("m", more[:1]) == 'm{uuid=~".*0"}'
    assert narrower('m{a="}"}', more) == 'm{a="}",uuid=~".*0",uuid!~".*[0-9]0"}'
    assert narrower('{__name__=~"a|b"}', more[:1]) == '{__name__=~"a|b",uuid=~".*0"}'


def unescaped(text: str) -> str:
    """A PromQL string literal's text (or an escaped regex's characters) as it reads."""
    return re.sub(r"\\(.)", lambda c: "\n" if c[1] == "n" else c[1], text)


class Labelled:
    """A scripted store of one series per value of a label (``weights``: more for some; ""
    a series without it), refusing a question of more than ``limit`` series as a store's
    limit on series does, its matchers read as PromQL reads them (a quoted, anchored RE2
    regex; "" matches a series without the label)."""

    def __init__(self, name: str, values: list[str], limit: int,
                 weights: dict[str, int] | None = None) -> None:
        self.name, self.values, self.limit = name, values, limit
        self.weights = weights or {}
        self.asked: list[list[str]] = []

    def __call__(self, matchers: list[str]) -> dict[str, int]:
        self.asked.append(matchers)
        chosen = self.values
        for m in matchers:
            name, op, quoted = re.fullmatch(r'(\w+)(=~|!~|=)"(.*)"', m, re.S).groups()
            assert name == self.name
            text = unescaped(quoted)
            pattern = text if op != "=" else re.escape(text)
            chosen = [i for i in chosen
                      if bool(re.fullmatch(pattern, i, re.S)) == (op != "!~")]
        if sum(self.weights.get(i, 1) for i in chosen) > self.limit:
            raise PrometheusError(f"too many series: {matchers}", 422, "execution",
                                  splittable=True, series_bound=True)
        return {i: 1 for i in chosen}

    def listed(self) -> list[str]:
        """What the store's labels API lists, and the "" every listing adds."""
        return [v for v in self.values if v] + [""]

    def joined(self, parts: object = None) -> dict[str, int]:
        """Every part's answer: no value in two of them."""
        from dask_metrics.collector.query.refusals import LabelParts

        found: dict[str, int] = {}
        for part in (parts or LabelParts(self.name, self.listed)).answers(self):
            assert not found.keys() & part.keys()
            found.update(part)
        return found


KUBERNETES = ".dask-worker-headless.data-science-production.svc.cluster.local:8788"
NAMES = {
    "job ids": [str(i) for i in range(1234)] + ["", "x", "7x", "a3"],
    "gpu uuids": [gpu_uuid("c", w, g) for w in range(500) for g in range(8)]
    + ["", "GPU-X", "MIG-GPU-0/1/Z"],
    "addresses on one port": [f"tcp://10.0.{i // 200}.{i % 200}:9000" for i in range(1000)]
    + ["tcp://10.9.9.9:9001", "w-1", ""],
    "a pod's service": [f"tcp://dask-worker-{i}{KUBERNETES}" for i in range(300)],
    "any shape": [f"worker-{i:03d}" for i in range(500)]
    + ["w-Q", "W_Z", "", "x\ny0", "\n0", "Ärger-1", "工作者", 'a"b\\c', "x|y", ".*", "(?s:.*)"],
}


@pytest.mark.parametrize("values", NAMES.values(), ids=NAMES.keys())
def test_a_question_refused_for_its_series_is_asked_by_batches_of_the_listed_values(
        values: list[str]) -> None:
    """LabelParts: the parts hold every value once, whatever the values look like (numbers,
    hex, a shared port or domain, unicode, newlines, quotes, regex characters, none), in
    about series / limit parts: each batch halved only where refused, the size kept."""
    from dask_metrics.collector.query.refusals import LabelParts

    store = Labelled("worker", values, len(values))
    assert store.joined() == {i: 1 for i in values}
    assert store.asked == [[]]  # under the limit: asked once, whole, nothing listed
    limit = 25
    store = Labelled("worker", values, limit)
    parts = LabelParts("worker", store.listed)
    assert store.joined(parts) == {i: 1 for i in values}  # every value, each once
    needed = math.ceil(len(values) / limit)
    refusals = sum(1 for m in store.asked if m) - needed
    assert len(store.asked) <= 1 + 2 * needed + math.ceil(math.log2(len(values) / limit))
    assert refusals <= 2 * needed  # a batch is never more than halved below the limit
    store.asked.clear()
    assert store.joined(parts) == {i: 1 for i in values}  # the size kept: no refusal now
    assert len(store.asked) <= 2 * needed and [] not in store.asked


def test_one_value_over_the_limit_alone_is_the_stores_error() -> None:
    from dask_metrics.collector.query.refusals import LabelParts

    names = [f"tcp://10.0.0.{i}:9000" for i in range(30)]
    store = Labelled("worker", names, 25, weights={names[7]: 40})
    with pytest.raises(PrometheusError, match="too many series") as refused:
        store.joined()
    assert str(refused.value) == f"too many series: ['worker=\"{names[7]}\"']"
    asked: list[list[str]] = []

    def wrong_password(matchers: list[str]) -> dict[str, int]:
        asked.append(matchers)
        raise PrometheusError("refused the credentials", 401)

    with pytest.raises(PrometheusError, match="credentials"):
        list(LabelParts("worker", store.listed).answers(wrong_password))
    assert asked == [[]]  # no part would help: asked once, nothing listed
    store = Labelled("worker", names, 5)
    assert next(LabelParts("worker", store.listed).answers(store))  # any() stops early
    assert len(store.asked) <= 2 + math.ceil(math.log2(31 / 5))


def test_a_store_that_will_not_list_the_values_is_said_in_one_line() -> None:
    from dask_metrics.collector.query.refusals import parts_of

    class Unlisting:
        series_limits = SeriesLimits()

        def label_values(self, *_: object) -> list[str]:
            raise PrometheusError("Prometheus rejected the values of worker (422: the "
                                  "number of matching timeseries exceeds 30000)\nmore", 422)

    store = Labelled("worker", [f"w{i}" for i in range(10)], 5)
    with pytest.raises(PrometheusError) as refused:
        list(parts_of(Unlisting(), "m", "worker", 0, 1000).answers(store))  # type: ignore[arg-type]
    message = str(refused.value)
    assert "\n" not in message and "would not list the values of worker either" in message
    assert message.startswith("too many series: []; ") and "exceeds 30000" in message


def test_a_part_stays_within_a_stores_query_length() -> None:
    """VictoriaMetrics refuses a query over 16 KB: a part's values are at most
    BATCH_CHARACTERS long, however high the limit on series."""
    from dask_metrics.collector.query.refusals import BATCH_CHARACTERS, LabelParts

    values = [gpu_uuid("c", w, g) for w in range(1000) for g in range(8)]
    store = Labelled("uuid", values, len(values) - 1)  # the whole refused, any part passes
    assert store.joined(LabelParts("uuid", lambda: values)) == {v: 1 for v in values}
    parts = [m[0] for m in store.asked if m]
    assert max(map(len, parts)) <= BATCH_CHARACTERS + 20  # the matcher's own characters
    assert len(parts) <= 2 * len("|".join(values)) // BATCH_CHARACTERS + 2


def test_batches_of_known_values_stay_within_a_stores_query_length() -> None:
    """by_values: long worker names (a pod's service) are batched under BATCH_CHARACTERS
    whatever the store takes, each asked once; a refusal learnt is kept per question."""
    from dask_metrics.collector.query.refusals import BATCH_CHARACTERS

    names = [f"tcp://dask-worker-{i}{KUBERNETES}" for i in range(600)]
    asked: list[list[str]] = []

    def answer(batch: list[str], alone: bool) -> dict[str, int]:
        asked.append(list(batch))
        return {w: 1 for w in batch}

    limits = SeriesLimits()
    assert by_values(answer, names, limits, ("worker", "m")) == {w: 1 for w in names}
    assert sorted(w for batch in asked for w in batch) == sorted(names)  # each once
    assert all(len("|".join(b)) <= BATCH_CHARACTERS for b in asked) and len(asked) > 1
    assert not limits.known(("worker", "m"))  # nothing was refused
