"""Collector export against a backfilled Prometheus: ours, a ``requests`` floor, and a peer.

    python benchmarks/bench_collector.py --workers 32 --gpus 4 --hours 1 --rounds 3 \
        --out /tmp/collector.md
    python benchmarks/bench_collector.py --workers 100 --gpus 8 --interval 5 \
        --arms floor ours --before 452050a

Writes a deterministic OpenMetrics fixture (``dask_gpu_info``, six ``dask_gpu_*`` source
series and the busy counter, every ``--interval`` seconds (1 s by default), and the
scheduler's ``dask_job_*`` series at the same interval, half an interval (half a second at
1 s) after the GPU scrapes), backfills it with ``promtool tsdb create-blocks-from
openmetrics`` (cached under the temp dir, keyed by the parameters), starts Prometheus on a
copy of the blocks and then runs, each in a fresh subprocess so that its peak RSS is its own
(``os.wait4`` in LAUNCHER), alternating over ``--rounds``, the ``--arms`` asked for (all
by default):

- ``floor``: plain ``requests`` POSTs of a fixed list of queries of the data the export
  reads (floor_queries): discovery, the cluster's job/DAG, per worker one query of its GPU
  series (the six columns' and the two counters gpu_by_prefix reads) and one each of its
  tasks and its prefix tasks, then the DAGs' status and names and the activity counters,
  each over the collector's time chunks; ``resp.json()``, nothing else. The same queries
  at any scrape interval, five per worker for an hour; not the collector's own list (seven
  per worker at 452050a; since 91add31 one query reads a batch of workers): the report
  gives each arm's count;
- ``ours``: ``python -m dask_metrics.collector export ... --quiet`` (the real CLI), of this
  checkout or, with ``--at REF``, of git revision REF;
- ``before`` (with ``--before REF``): the same CLI of git revision REF, e.g. the commit
  before a change; its files must be byte-identical to ours';
- ``peer``: ``prometheus-api-client``'s ``get_metric_range_data`` per worker and series
  (``metric{worker='w'}[Δ]`` instant queries), ``MetricRangeDataFrame``, one CSV per worker;
- ``plain``: the floor with ``Accept-Encoding: identity``;
- ``scales``: ``ours`` on the first 1 and 8 workers only, to show that memory does not grow
  with the number of workers, and an import-only baseline of the collector.

A git revision's code runs as installed (before_tree: ``git archive``, laid out as
``dask_metrics/`` with collector/ and exporter/ inside, first on PYTHONPATH) from a folder
outside the checkout, so that the checkout's ``dask_metrics/`` does not shadow it. The
queries each arm sends are counted by Prometheus itself (``prometheus_http_requests_total``
of /api/v1/query and /api/v1/query_range, read before and after the arm).

Prints (and with ``--out`` writes) markdown tables: median wall time, max RSS, queries,
ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from dask_metrics.collector.model.series import (
    plan_chunks,  # the floor's windows are the collector's
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURE_VERSION = 3  # bump when the fixture changes: the cached TSDB is keyed by it
GiB = 2**30
MiB = 2**20
SCRAPE_OFFSET = 0.5  # the scheduler is scraped half an interval after the GPU exporters
SCHED_LEAD = 300  # seconds of scheduler data before the range (the collector looks back 2 m)
MAX_INTERVAL = 60  # seconds: a scrape interval well within the collector's --max-age (2 m)
MAX_AGE_MS = 120_000  # the collector's default --max-age
CHUNK_MS = 3_600_000  # the collector's default --chunk
READ_TIMEOUT = 60.0  # the collector's default read timeout (it sends 90 % as "timeout")
# The fixture's series have no dask_cluster label: the collector finds that one cluster ("")
# and scopes its cluster and worker queries to it; its discovery queries are unscoped.
CLUSTER = 'dask_cluster=""'
STORE_PARAMS = {"nocache": "1", "latency_offset": "0"}  # sent with the collector's queries

METRICS = ["total-mem", "mem-util", "compute-util", "peak-mem", "power", "temperature"]
# The series those columns read, in the collector's order
# (dask_metrics.collector.model.columns.source_metrics).
SOURCES = ["dask_gpu_memory_used_bytes", "dask_gpu_utilization_ratio",
           "dask_gpu_memory_peak_bytes", "dask_gpu_power_watts",
           "dask_gpu_temperature_celsius", "dask_gpu_memory_total_bytes"]
# What the export also reads for gpu_by_prefix.csv (dask_metrics.collector.query.scope
# ATTRIBUTION_METRICS not among the columns' series), in the same query; the fixture has the
# busy counter (every exporter serves it), not the energy one.
ATTRIBUTION = ["dask_gpu_busy_seconds_total", "dask_gpu_energy_joules_total"]
PREFIXES = ("load", "train", "save")
ACTIVITIES = ("thread-cpu", "thread-noncpu", "executor", "other")
PROM_ARGS = ["--query.max-samples=500000000", "--query.timeout=10m",
             "--storage.tsdb.retention.time=100y", "--query.lookback-delta=5m"]


# ---- the fixture ---------------------------------------------------------------------------


def worker_name(i: int) -> str:
    """The ``worker`` label of the i-th worker."""
    return f"w-{i}"


def gpu_value(metric: str, w: int, g: int, t: int) -> str:
    """The sample of ``metric`` of worker ``w``, GPU ``g`` at ``t`` seconds into the data."""
    used = (1 + g) * GiB + ((t * 37 + w * 101 + g * 13) % 4096) * MiB
    if metric == "dask_gpu_memory_used_bytes":
        return str(used)
    if metric == "dask_gpu_memory_total_bytes":
        return str(80 * GiB)
    if metric == "dask_gpu_memory_peak_bytes":
        return str(used + 256 * MiB)
    if metric == "dask_gpu_utilization_ratio":
        return repr(((t + w + g) % 101) / 100)
    if metric == "dask_gpu_power_watts":
        return repr(100 + ((t * 7 + w + g) % 3000) / 10)
    if metric == "dask_gpu_temperature_celsius":
        return str(40 + (t // 60 + w + g) % 40)
    if metric == "dask_gpu_busy_seconds_total":
        return repr(t * ((w + g) % 10) / 10)
    raise KeyError(metric)


def cluster_state(s: int) -> tuple[int, int]:
    """(current_job, current_dag) at scheduler scrape ``s`` (seconds into the data): jobs of
    15 minutes, three DAGs of 5 minutes each, idle (-1) for the last minute of every job."""
    if s % 900 >= 840:
        return -1, -1
    return s // 900, s % 900 // 300


def worker_dag(w: int, s: int) -> tuple[int, int] | None:
    """The DAG with tasks on worker ``w`` at scrape ``s``: the cluster's, 3 scrapes in 4."""
    job, dag = cluster_state(s)
    return (job, dag) if job >= 0 and (s // 10 + w) % 4 else None


def _labels(labels: dict[str, str]) -> str:
    """``{a="1",b="2"}`` (the fixture's label values need no escaping)."""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def write_openmetrics(path: Path, workers: int, gpus: int, t0: int, seconds: int,
                      fine: bool = True, interval: int = 1) -> int:
    """Write the fixture as OpenMetrics text (families together, samples in time order);
    return the number of samples. ``fine`` False leaves out where the time went (the busy
    counter, prefix tasks, activity counters): the data of an older scheduler preload.
    ``interval``: seconds between two scrapes of every series; the scheduler's are
    SCRAPE_OFFSET of an interval after the GPU exporters', from at least SCHED_LEAD seconds
    before the data on (a whole number of intervals)."""
    times = range(0, seconds + 1, interval)
    lead = -(-SCHED_LEAD // interval) * interval
    sched_times = range(-lead, seconds + 1, interval)
    sched = {"instance": "scheduler:8787", "job": "dask-scheduler"}
    stamp = {t: str(t0 + t) for t in times}  # OpenMetrics timestamps: seconds

    def sched_stamp(s: int) -> str:
        return f"{t0 + s + SCRAPE_OFFSET * interval:.3f}"

    count = 0
    with open(path, "w", encoding="utf-8") as fh:

        def series(name: str, labels: dict[str, str], points: Iterator[tuple[str, str]]
                   ) -> None:
            nonlocal count
            prefix = name + _labels(labels) + " "
            lines = [f"{prefix}{v} {t}\n" for t, v in points]
            count += len(lines)
            fh.write("".join(lines))

        fh.write("# TYPE dask_gpu_info gauge\n")
        for w in range(workers):
            for g in range(gpus):
                info = {"worker": worker_name(w), "gpu": str(g), "uuid": f"GPU-{w}-{g}",
                        "hostname": f"node-{w}", "name": "Fake GPU",
                        "instance": f"node-{w}:9446", "job": "dask-gpu"}
                series("dask_gpu_info", info, ((stamp[t], "1") for t in times))
        for metric in SOURCES:
            fh.write(f"# TYPE {metric} gauge\n")
            for w in range(workers):
                for g in range(gpus):
                    labels = {"worker": worker_name(w), "gpu": str(g), "uuid": f"GPU-{w}-{g}",
                              "instance": f"node-{w}:9446", "job": "dask-gpu"}
                    series(metric, labels,
                           ((stamp[t], gpu_value(metric, w, g, t)) for t in times))
        busy = ATTRIBUTION[0]
        fh.write(f"# TYPE {busy.removesuffix('_total')} counter\n")
        for w in range(workers if fine else 0):
            for g in range(gpus):
                labels = {"worker": worker_name(w), "gpu": str(g), "uuid": f"GPU-{w}-{g}",
                          "instance": f"node-{w}:9446", "job": "dask-gpu"}
                series(busy, labels, ((stamp[t], gpu_value(busy, w, g, t)) for t in times))
        for name, index in (("dask_job_current_job", 0), ("dask_job_current_dag", 1)):
            fh.write(f"# TYPE {name} gauge\n")
            series(name, sched, ((sched_stamp(s), str(cluster_state(s)[index]))
                                 for s in sched_times))
        fh.write("# TYPE dask_job_worker_tasks gauge\n")
        for w in range(workers):
            dags = sorted({d for s in sched_times if (d := worker_dag(w, s)) is not None})
            for job, dag in dags:
                labels = {**sched, "worker": worker_name(w), "job_id": str(job),
                          "dag_id": str(dag)}
                series("dask_job_worker_tasks", labels,
                       ((sched_stamp(s), str(1 + w % 3)) for s in sched_times
                        if worker_dag(w, s) == (job, dag)))
        fh.write("# TYPE dask_job_worker_prefix_tasks gauge\n")  # one prefix per DAG
        for w in range(workers if fine else 0):
            dags = sorted({d for s in sched_times if (d := worker_dag(w, s)) is not None})
            for job, dag in dags:
                labels = {**sched, "worker": worker_name(w), "job_id": str(job),
                          "dag_id": str(dag), "prefix": PREFIXES[dag % len(PREFIXES)]}
                series("dask_job_worker_prefix_tasks", labels,
                       ((sched_stamp(s), str(1 + w % 3)) for s in sched_times
                        if worker_dag(w, s) == (job, dag)))
        jobs = sorted({cluster_state(s)[0] for s in sched_times} - {-1})
        fh.write("# TYPE dask_job_dag_info gauge\n")
        for job in jobs:
            for dag in range(3):
                labels = {**sched, "job_id": str(job), "dag_id": str(dag),
                          "job_name": f"job-{job}", "client": "c"}
                series("dask_job_dag_info", labels,
                       ((sched_stamp(s), "1") for s in sched_times if s >= job * 900))
        fh.write("# TYPE dask_job_dag_status gauge\n")  # running, finished at its end
        for job in jobs:
            for dag in range(3):
                labels = {**sched, "job_id": str(job), "dag_id": str(dag)}
                end = job * 900 + (dag + 1) * 300
                series("dask_job_dag_status", labels,
                       ((sched_stamp(s), "1" if s < end else "2") for s in sched_times
                        if s >= job * 900))
        fh.write("# TYPE dask_job_activity_seconds counter\n")  # from each job's start on
        for job in jobs if fine else ():
            for dag, prefix in enumerate(PREFIXES):
                for a, activity in enumerate(ACTIVITIES):
                    labels = {**sched, "job_id": str(job), "dag_id": str(dag),
                              "prefix": prefix, "activity": activity}
                    series("dask_job_activity_seconds_total", labels,
                           ((sched_stamp(s), repr((s - job * 900) * (a + 1) / 10))
                            for s in sched_times if s >= job * 900))
        fh.write("# EOF\n")
    return count


@dataclass(frozen=True)
class Fixture:
    """Backfilled TSDB blocks and the data's range (unix seconds)."""

    blocks: Path
    t0: int
    t1: int
    samples: int
    seconds_to_build: float | None  # None when it came from the cache
    compacted: bool = False  # its blocks are those Prometheus made of promtool's (compact)


def fixture(workers: int, gpus: int, hours: float, cache: Path, promtool: str,
            fine: bool = True, interval: int = 1, fleet: bool = False) -> Fixture:
    """TSDB blocks of the fixture, built once per parameters and kept under ``cache``
    (``fine``: with the series of where the time went; ``interval``: seconds between
    scrapes; see write_openmetrics). ``fleet``: fleet_data's fleet instead, every series
    the exporter and the scheduler preload write.

    The data ends at a whole hour at least three hours ago, as promtool's block rules like.
    """
    if fleet:
        import fleet_data  # a sibling script; it reads the names of dask_metrics.contract
    kind = (f"fleet-v{fleet_data.VERSION}" if fleet
            else f"v{FIXTURE_VERSION}{'' if fine else '-nofine'}")
    folder = cache / f"{kind}-w{workers}-g{gpus}-h{hours:g}-i{interval}"
    meta = folder / "meta.json"
    if meta.exists() and (folder / "blocks").is_dir():
        info = json.loads(meta.read_text())
        return Fixture(folder / "blocks", info["t0"], info["t1"], info["samples"], None,
                       info.get("compacted", False))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    began = time.perf_counter()
    seconds = round(hours * 3600)
    t1 = int(time.time()) // 3600 * 3600 - 3 * 3600
    t0 = t1 - seconds
    source = folder / "input.om"
    samples = (fleet_data.write_fleet(source, workers, gpus, t0, seconds, interval) if fleet
               else write_openmetrics(source, workers, gpus, t0, seconds, fine, interval))
    tmp_blocks = folder / "blocks.tmp"
    result = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics",
                             str(source), str(tmp_blocks)], capture_output=True, text=True,
                            check=False)
    source.unlink()
    if result.returncode != 0:
        raise SystemExit(f"promtool failed: {result.stderr[-2000:]}")
    tmp_blocks.rename(folder / "blocks")
    meta.write_text(json.dumps({"t0": t0, "t1": t1, "samples": samples}))
    return Fixture(folder / "blocks", t0, t1, samples, time.perf_counter() - began)


# ---- children: the floor and the peer --------------------------------------------------------


def floor_queries(t0: float, t1: float, workers: Sequence[str], kind: str = "all"
                  ) -> list[tuple[str, float]]:
    """(PromQL, evaluation time) of the floor's queries of what ``collector export`` reads for
    this range, one per worker and kind of series and per time chunk as the collector plans
    them: ``kind`` "all": all of it (where the time went and jobs.csv included); "columns":
    only the columns' data (worker discovery, the cluster's job/DAG, per worker its columns'
    series and its tasks), the export's floor. None depends on the scrape interval; the
    collector's own queries differ (it reads a batch of workers in one query, and the edges
    of some series apart)."""
    start, end = round(t0 * 1000), round(t1 * 1000)

    def ranged(sel: str, lo_ms: int, wrap: str = "{}") -> list[tuple[str, float]]:
        out = []
        for lo, hi in plan_chunks(lo_ms, end, CHUNK_MS):
            window = hi - lo + (1 if lo == lo_ms else 0)
            out.append((wrap.format(f"{sel}[{window}ms]"), hi / 1000))
        return out

    queries = [*ranged("dask_gpu_info", start, "last_over_time({})"),
               *ranged("dask_job_worker_gpu_info", start, "last_over_time({})"),
               *ranged(f'{{__name__=~"dask_job_current_job|dask_job_current_dag",{CLUSTER}}}',
                       start - MAX_AGE_MS)]
    if kind == "columns":
        for w in workers:
            queries += ranged(f'{{__name__=~"{"|".join(SOURCES)}",worker="{w}",{CLUSTER}}}',
                              start)
            queries += ranged(f'{{__name__=~"dask_job_worker_tasks",worker="{w}",{CLUSTER}}}',
                              start - MAX_AGE_MS)
        return queries
    for w in workers:
        queries += ranged(f'{{__name__=~"{"|".join(SOURCES + ATTRIBUTION)}",worker="{w}",'
                          f'{CLUSTER}}}', start)
        queries += ranged(f'{{__name__=~"dask_job_worker_tasks",worker="{w}",{CLUSTER}}}',
                          start - MAX_AGE_MS)
        queries += ranged(f'{{__name__=~"dask_job_worker_prefix_tasks",worker="{w}",'
                          f'{CLUSTER}}}', start - MAX_AGE_MS)
    queries += ranged(f"dask_job_dag_status{{{CLUSTER}}}", start - MAX_AGE_MS)  # jobs.csv
    queries += ranged(f"dask_job_dag_info{{{CLUSTER}}}", start, "last_over_time({})")
    queries += ranged(f'{{__name__=~"dask_job_activity_.+_total",{CLUSTER}}}',
                      start - MAX_AGE_MS)
    return queries


def run_floor(url: str, t0: float, t1: float, workers: Sequence[str], gzip: bool = True,
              kind: str = "all") -> dict[str, int]:
    """The collector's queries with plain requests; parse the JSON and drop it. ``gzip``:
    requests' default Accept-Encoding (Prometheus then compresses); else identity."""
    import requests

    received = samples = 0
    queries = floor_queries(t0, t1, workers, kind)
    timeout = f"{round(READ_TIMEOUT * 900)}ms"
    with requests.Session() as session:
        if not gzip:
            session.headers["Accept-Encoding"] = "identity"
        for expr, at in queries:
            resp = session.post(f"{url}/api/v1/query",
                                data={"query": expr, "time": f"{at:.3f}", **STORE_PARAMS,
                                      "timeout": timeout},
                                timeout=(5, READ_TIMEOUT))
            resp.raise_for_status()
            body = resp.json()
            received += len(resp.content)
            samples += sum(len(r.get("values", ())) for r in body["data"]["result"])
        session.get(f"{url}/api/v1/status/buildinfo", timeout=(5, READ_TIMEOUT)).json()
    return {"queries": len(queries) + 1, "bytes_in": received, "samples": samples}


def run_peer(url: str, t0: float, t1: float, workers: Sequence[str], out: Path
             ) -> dict[str, int]:
    """prometheus-api-client: get_metric_range_data per worker and series, then
    MetricRangeDataFrame(...).to_csv, one file per worker."""
    from prometheus_api_client import MetricRangeDataFrame, PrometheusConnect

    start = datetime.fromtimestamp(t0, tz=timezone.utc)
    end = datetime.fromtimestamp(t1, tz=timezone.utc)
    out.mkdir(parents=True, exist_ok=True)
    rows = written = queries = 0
    with PrometheusConnect(url=url, disable_ssl=True) as prom:
        for w in workers:
            data = []
            for metric in SOURCES:
                data += prom.get_metric_range_data(metric, label_config={"worker": w},
                                                   start_time=start, end_time=end)
                queries += 1
            frame = MetricRangeDataFrame(data)
            path = out / f"{w}.csv"
            frame.to_csv(path)
            rows += len(frame)
            written += path.stat().st_size
    return {"queries": queries, "rows": rows, "bytes_out": written}


# ---- the parent ----------------------------------------------------------------------------


ARMS = ("floor", "ours", "peer", "plain", "scales")


@dataclass
class Contender:
    """One way to export; ``walls``, ``rss`` and ``queries`` collect every timed run."""

    name: str
    what: str
    walls: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)
    queries: list[int] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)


# Runs argv[2:] as its child and writes "wall-seconds peak-RSS-KiB" of it into argv[1]: the
# peak RSS of a process the benchmark started itself would be at least the benchmark's own
# (Linux keeps the RSS high-water mark of the memory image an exec replaces, and a child
# spawned from the benchmark starts as, or shares, the benchmark's), whereas this launcher's
# child starts as a copy of the launcher (python -I -S: a few MiB).
LAUNCHER = """import os, sys, time
began = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - began
with open(sys.argv[1], "w") as fh:
    fh.write(f"{wall!r} {usage.ru_maxrss}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_child(cmd: Sequence[str], log: Path, pythonpath: str | Path | None = None
              ) -> tuple[float, int, str]:
    """Run ``cmd`` (through LAUNCHER); return (wall seconds, its own peak RSS in bytes, its
    stdout). ``pythonpath``: a folder holding another tree's ``dask_metrics/``
    (before_tree), first on PYTHONPATH; the child then runs in ``log``'s folder, not the
    checkout, whose own ``dask_metrics/`` would otherwise come first on sys.path and shadow
    it."""
    env, cwd = None, ROOT
    if pythonpath:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(pythonpath), os.environ.get("PYTHONPATH")]))}
        cwd = log.parent
    measured = log.with_suffix(".usage")
    measured.unlink(missing_ok=True)
    with open(log, "w+b") as out, open(log.with_suffix(".err"), "w+b") as err:
        code = subprocess.run([sys.executable, "-I", "-S", "-c", LAUNCHER, str(measured),
                               *cmd], stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                              cwd=cwd, env=env, check=False).returncode
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if code != 0 or not measured.exists():
        raise SystemExit(f"{' '.join(cmd[:4])} … failed ({code}):\n{stderr[-3000:]}")
    wall, rss_kib = measured.read_text().split()
    return float(wall), int(rss_kib) * 1024, stdout  # ru_maxrss is in KiB on Linux


def before_tree(ref: str, into: Path) -> Path:
    """The package of git revision ``ref`` laid out as installed (dask_metrics/ with
    collector/ and exporter/ inside), for PYTHONPATH (run_child's ``pythonpath``)."""
    src = into / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True,
                             check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(src, filter="data")
    pkg = into / "path" / "dask_metrics"
    shutil.copytree(src / "dask_metrics", pkg)
    for part in ("collector", "exporter"):
        shutil.copytree(src / part, pkg / part)
    return into / "path"


def imports_from(pythonpath: str | Path, work: Path) -> None:
    """Stop unless a child run as run_child runs it imports ``dask_metrics.collector`` from
    ``pythonpath`` (a tree that is not laid out as installed would import this checkout's)."""
    _, _, stdout = run_child([sys.executable, "-c", "import dask_metrics.collector as c; "
                              "print(c.__file__)"], work / "imports.log", pythonpath)
    where = Path(stdout.strip().splitlines()[-1]).resolve()
    if not where.is_relative_to(Path(pythonpath).resolve()):
        raise SystemExit(f"{pythonpath}: dask_metrics.collector comes from {where}, not from "
                         "it (give a folder holding dask_metrics/ with collector/ inside)")


def api_queries(url: str) -> int:
    """Queries Prometheus has answered since it started: its own
    ``prometheus_http_requests_total`` of /api/v1/query, /api/v1/query_range and the
    remote-read API /api/v1/read, all codes."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("prometheus_http_requests_total{") and (
                'handler="/api/v1/query"' in line or 'handler="/api/v1/query_range"' in line
                or 'handler="/api/v1/read"' in line):
            total += float(line.rsplit(" ", 1)[1])
    return round(total)


def identical(a: Path, b: Path) -> tuple[int, list[str]]:
    """(files compared, names that differ or are missing) of two export folders: every CSV
    file, and export.json but for its versions."""
    names = sorted(p.name for p in a.glob("*.csv"))
    if sorted(p.name for p in b.glob("*.csv")) != names:
        return len(names), ["the list of CSV files"]
    _, differ, missing = filecmp.cmpfiles(a, b, names, shallow=False)
    records = [json.loads((d / "export.json").read_text()) for d in (a, b)]
    for r in records:
        r.pop("versions", None)
    if records[0] != records[1]:
        differ.append("export.json")
    return len(names) + 1, differ + missing


def csv_stats(folder: Path) -> dict[str, int]:
    """Rows and bytes of a collector export (export.json's count, every worker CSV)."""
    record = json.loads((folder / "export.json").read_text())
    size = sum((folder / name).stat().st_size for name in record["files"])
    return {"rows": record["rows"], "bytes_out": size}


def versions(prometheus: str) -> dict[str, str]:
    """Versions of what the numbers depend on."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version(), "nproc": str(os.cpu_count())}
    first = subprocess.run([prometheus, "--version"], capture_output=True, text=True,
                           check=False).stdout.splitlines()
    out["prometheus"] = first[0].split("version ")[-1].split(" ")[0] if first else "?"
    for package in ("requests", "prometheus-api-client", "pandas", "dask-metrics"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
    return out


def mib(n: float) -> str:
    """Bytes as whole MiB."""
    return f"{n / MiB:.0f}"


DEFAULT_CACHE = Path(tempfile.gettempdir()) / "dask-metrics-bench-collector"
COMPACTION_TIMEOUT = 3600.0  # s: a week of a fleet's 2-hour blocks takes minutes


def compact(fix: Fixture, work: Path, run_prometheus: Any) -> None:
    """Replace the fixture's blocks, promtool's 2-hour ones, by those Prometheus compacts
    them into (what any Prometheus that ran a while holds), once: otherwise every benchmark
    on them measures while Prometheus compacts them in the background (minutes of CPU for a
    day of a fleet). Done when its compaction loop, which runs every minute and compacts
    until nothing is left to, has started twice."""
    print("compacting the fixture's blocks once (Prometheus' own compaction)…", file=sys.stderr)
    with run_prometheus(work, blocks=fix.blocks, extra_args=PROM_ARGS) as prom:
        deadline = time.monotonic() + COMPACTION_TIMEOUT
        while _metric(prom.url, "prometheus_tsdb_compactions_triggered_total") < 2:
            if time.monotonic() > deadline:
                raise SystemExit(f"Prometheus did not finish compacting {fix.blocks} in "
                                 f"{COMPACTION_TIMEOUT:.0f} s")
            time.sleep(5)
        data = prom.data_dir
    fresh = fix.blocks.with_name("blocks.compacted")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir()
    for block in data.iterdir():
        if (block / "meta.json").exists():
            shutil.move(block, fresh / block.name)
    old = fix.blocks.with_name("blocks.2h")
    shutil.rmtree(old, ignore_errors=True)
    fix.blocks.rename(old)
    fresh.rename(fix.blocks)
    shutil.rmtree(old)
    meta = fix.blocks.parent / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "compacted": True}))


def _metric(url: str, name: str) -> float:
    """The value of one of Prometheus' own metrics on its /metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=READ_TIMEOUT) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


@contextlib.contextmanager
def served_fixture(workers: int, gpus: int, hours: float, cache: str | Path | None, work: Path,
                   fine: bool = True, interval: int = 1, fleet: bool = False,
                   prom_args: Sequence[str] = PROM_ARGS) -> Iterator[tuple[Fixture, Any]]:
    """The fixture (built once, kept under ``cache``) served by a fresh Prometheus in
    ``work``: every benchmark on this fixture starts here. Yields (fixture, server)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.prometheus_helpers import PROMETHEUS, PROMTOOL, run_prometheus

    if not (PROMETHEUS and PROMTOOL):
        raise SystemExit("needs prometheus and promtool (Debian package 'prometheus')")
    fix = fixture(workers, gpus, hours, Path(cache or DEFAULT_CACHE), PROMTOOL, fine, interval,
                  fleet)
    built = (f"built in {fix.seconds_to_build:.0f} s" if fix.seconds_to_build is not None
             else "from the cache")
    print(f"fixture: {fix.samples:,} samples, {built}: {fix.blocks}", file=sys.stderr)
    if not fix.compacted:
        compact(fix, work / "compact", run_prometheus)
    with run_prometheus(work / "prom", blocks=fix.blocks, extra_args=prom_args,
                        ready_timeout=120) as prom:
        yield fix, prom


def benchmark(args: argparse.Namespace, report: TextIO) -> None:
    """Build or reuse the fixture, start Prometheus, run every contender, write the report."""
    names = [worker_name(i) for i in range(args.workers)]
    scales = sorted({n for n in args.scales if 0 < n < args.workers}) if "scales" in args.arms \
        else []
    me = [sys.executable, str(Path(__file__).resolve())]
    work = Path(tempfile.mkdtemp(prefix="bench-collector-"))
    try:
        trees: dict[str, Path | None] = {"ours": None}  # None: this checkout
        if args.at:
            trees["ours"] = before_tree(args.at, work / "tree-at")
        if args.before:
            trees["before"] = before_tree(args.before, work / "tree-before")
        for tree in trees.values():
            if tree is not None:
                imports_from(tree, work)
        with served_fixture(args.workers, args.gpus, args.hours, args.cache, work,
                            not args.without_fine, args.interval) as (fix, prom):
            url = prom.url
            span = ["--since", str(fix.t0), "--until", str(fix.t1)]

            def ours_cmd(n: int, out: Path) -> list[str]:
                cmd = [sys.executable, "-m", "dask_metrics.collector", "export",
                       "--prometheus", url, *span,
                       "--out", str(out), "--metrics", *METRICS, "--quiet"]
                return cmd + (["--workers", *names[:n]] if n < args.workers else [])

            at = f" at {args.at}" if args.at else ""
            floor = Contender("floor", "requests + resp.json(), the data's queries, per "
                                       "worker")
            plain = Contender("floor, no gzip", "the same with Accept-Encoding: identity")
            ours = Contender("ours", f"python -m dask_metrics.collector export{at} (tidy CSV)")
            before = Contender("before", f"the same CLI at {args.before}")
            peer = Contender("peer", "prometheus-api-client + MetricRangeDataFrame.to_csv")
            scaled = {n: Contender(f"ours, {n} worker{'s' if n > 1 else ''}", "") for n in scales}
            base = Contender("baseline",
                             "python -c 'import dask_metrics.collector.cli.main' (no export)")
            kept: dict[str, Path] = {}  # the last round's export of ours and before

            def once(c: Contender, i: int) -> None:
                out = work / f"{c.name}-{i}".replace(" ", "").replace(",", "")
                tree = None
                if c is floor or c is plain:
                    encoding = "gzip" if c is floor else "identity"
                    cmd = [*me, "_floor", url, str(fix.t0), str(fix.t1), encoding, *names]
                elif c is peer:
                    cmd = [*me, "_peer", url, str(fix.t0), str(fix.t1), str(out), *names]
                elif c is base:
                    cmd = [sys.executable, "-c", "import dask_metrics.collector.cli.main, "
                           "dask_metrics.collector.output.export"]
                    tree = trees["ours"]
                else:
                    n = next((k for k, v in scaled.items() if v is c), args.workers)
                    cmd = ours_cmd(n, out)
                    tree = trees["before"] if c is before else trees["ours"]
                asked = api_queries(url)
                wall, rss, stdout = run_child(cmd, work / "child.log", tree)
                c.queries.append(api_queries(url) - asked)
                c.walls.append(wall)
                c.rss.append(rss)
                if c in (floor, plain, peer):
                    c.stats = json.loads(stdout.strip().splitlines()[-1])
                elif c is not base:
                    c.stats = csv_stats(out)
                if c in (ours, before):
                    if c.name in kept:
                        shutil.rmtree(kept[c.name], ignore_errors=True)
                    kept[c.name] = out
                else:
                    shutil.rmtree(out, ignore_errors=True)
                print(f"  {c.name}: {wall:.2f} s, {mib(rss)} MiB, {c.queries[-1]} queries",
                      file=sys.stderr)

            print("warm-up", file=sys.stderr)
            once(floor, -1)
            floor.walls.clear()
            floor.rss.clear()
            floor.queries.clear()
            rotating = [c for c, on in ((floor, True), (ours, "ours" in args.arms),
                                        (before, bool(args.before)),
                                        (peer, "peer" in args.arms)) if on]
            after = [c for c, on in ((plain, "plain" in args.arms),
                                     (base, "scales" in args.arms)) if on]
            loads = [os.getloadavg()[0]]
            for r in range(args.rounds):
                print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
                k = r % len(rotating)
                for c in rotating[k:] + rotating[:k]:
                    once(c, r)
                for c in [*after, *scaled.values()]:
                    once(c, r)
                loads.append(os.getloadavg()[0])
            same = ""
            if len(kept) == 2:
                count, bad = identical(kept["ours"], kept["before"])
                same = (f"ours and before ({args.before}): {count} files, "
                        + (f"differ: {', '.join(bad)}" if bad else "byte-identical"))
            prom_log = prom.log_tail(500)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if "level=error" in prom_log:
        print(f"prometheus log:\n{prom_log}", file=sys.stderr)
    from tests.prometheus_helpers import PROMETHEUS

    main = [*rotating, *([plain] if plain in after else [])]
    scaling = [base, *scaled.values(), ours] if base in after else []
    write_report(report, args, fix, versions(str(PROMETHEUS)), main, scaling, loads, same)


def write_report(fh: TextIO, args: argparse.Namespace, fix: Fixture, ver: dict[str, str],
                 main: list[Contender], scaling: list[Contender], loads: list[float],
                 same: str = "") -> None:
    """Markdown tables: the contenders with ratios to the floor, then ours by workers."""
    floor = main[0]
    f_wall, f_rss = statistics.median(floor.walls), max(floor.rss)
    span = (f"{datetime.fromtimestamp(fix.t0, tz=timezone.utc):%Y-%m-%dT%H:%MZ} + "
            f"{args.hours:g} h")
    fh.write(f"Data: {args.workers} workers x {args.gpus} GPUs x {len(SOURCES)} series at "
             f"{args.interval} s ({span}), {fix.samples:,} samples backfilled in all; metrics "
             f"{' '.join(METRICS)}; median of {args.rounds} rounds, max RSS of the process; "
             "queries: /api/v1/query and /query_range requests Prometheus counted.\n")
    fh.write(f"Versions: {', '.join(f'{k} {v}' for k, v in ver.items())}. 1-minute load "
             f"average before/after each round: {', '.join(f'{x:.1f}' for x in loads)}.\n\n")
    fh.write("| contender | wall s (median) | min | x floor | max RSS MiB | x floor | queries | "
             "samples in / rows out | bytes in / out |\n"
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    for c in main:
        wall, rss = statistics.median(c.walls), max(c.rss)
        count = c.stats.get("samples", c.stats.get("rows", 0))
        size = c.stats.get("bytes_in", c.stats.get("bytes_out", 0))
        lo, hi = min(c.queries), max(c.queries)
        queries = f"{lo}" if lo == hi else f"{lo}-{hi}"
        fh.write(f"| {c.name}: {c.what} | {wall:.2f} | {min(c.walls):.2f} | "
                 f"{wall / f_wall:.2f} | {mib(rss)} | {rss / f_rss:.2f} | {queries} | "
                 f"{count:,} | {mib(size)} MiB |\n")
    if same:
        fh.write(f"\nFiles: {same}.\n")
    if not scaling:
        return
    fh.write("\nMemory against the number of workers exported (ours, same data and range):\n\n"
             "| run | wall s | max RSS MiB | RSS - baseline MiB | rows out |\n"
             "|---|---:|---:|---:|---:|\n")
    base = max(scaling[0].rss)
    for c in scaling:
        rss = max(c.rss)
        label = f"ours, {args.workers} workers" if c.name == "ours" else c.name
        if c.what:
            label += f": {c.what}"
        fh.write(f"| {label} | {statistics.median(c.walls):.2f} | {mib(rss)} | "
                 f"{mib(rss - base)} | {c.stats.get('rows', 0):,} |\n")


def main(argv: Sequence[str] | None = None) -> int:
    """The benchmark, or one of its children (``_floor``, ``_peer``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_floor"]:
        url, t0, t1, how, *workers = argv[1:]  # how: ENCODING[:KIND] (see run_floor)
        encoding, _, kind = how.partition(":")
        print(json.dumps(run_floor(url, float(t0), float(t1), workers, encoding == "gzip",
                                   kind or "all")))
        return 0
    if argv[:1] == ["_peer"]:
        url, t0, t1, out, *workers = argv[1:]
        print(json.dumps(run_peer(url, float(t0), float(t1), workers, Path(out))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--interval", type=int, default=1, metavar="SECONDS",
                        help=f"seconds between two scrapes of every series, 1-{MAX_INTERVAL} "
                             "(default 1)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS),
                        help="the contenders to run (default all; floor always runs)")
    parser.add_argument("--at", metavar="REF",
                        help="ours is git revision REF's code, not this checkout's")
    parser.add_argument("--before", metavar="REF",
                        help="also run the export of git revision REF ('before')")
    parser.add_argument("--scales", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 8], help="smaller worker counts for ours (default 1,8)")
    parser.add_argument("--cache", help="where the backfilled TSDB is kept between runs")
    parser.add_argument("--without-fine", action="store_true",
                        help="a fixture without where the time went (an older scheduler preload)")
    parser.add_argument("--out", help="also write the markdown tables to this file")
    args = parser.parse_args(argv)
    if not 1 <= args.interval <= MAX_INTERVAL:
        parser.error(f"--interval {args.interval}: give 1-{MAX_INTERVAL} seconds")
    if "scales" in args.arms and "ours" not in args.arms:
        parser.error("--arms scales compares with ours: add ours")
    if args.before and "ours" not in args.arms:
        parser.error("--before compares with ours: add ours to --arms")
    began = time.perf_counter()
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            benchmark(args, fh)
        print(Path(args.out).read_text())
    else:
        benchmark(args, sys.stdout)
    print(f"total {time.perf_counter() - began:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
