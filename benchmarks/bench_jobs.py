"""What jobs.csv adds to an export: ``cluster.fetch_jobs`` over one hour of a backfilled
Prometheus, by the number of DAGs the scheduler exported in that hour.

    python benchmarks/bench_jobs.py --dags 100 1000 --hours 1 --scrape 1 --rounds 3

Each DAG runs ``--life`` seconds and is then kept, finished, for ``--ttl`` seconds (the
scheduler preload's ``finished-dag-ttl``), scraped every ``--scrape`` seconds: two series
(``dask_job_dag_info``, ``dask_job_dag_status``) with a sample per scrape while kept. The
DAGs start evenly over the hour. Prints, per count, the raw samples ``fetch_jobs`` transfers
(the status series'; of dask_job_dag_info only the label sets), its median wall time (one
Prometheus, a fresh client per round) and the rows it made.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dask_metrics.collector.query.scope import Scope  # noqa: E402
from dask_metrics.collector.sources.cluster import fetch_jobs  # noqa: E402
from dask_metrics.collector.store.client import ConnectionSettings, PrometheusClient  # noqa: E402
from tests.prometheus_helpers import OpenMetrics, create_blocks, run_prometheus  # noqa: E402


def dataset(dags: int, start: int, hours: float, scrape: float, life: float, ttl: float
            ) -> tuple[OpenMetrics, int]:
    """The DAGs' series, and how many samples their status series hold."""
    om, samples, span = OpenMetrics(), 0, hours * 3600
    sched = {"instance": "scheduler:8787", "job": "dask-scheduler", "dask_cluster": "bench"}
    for i in range(dags):
        born = start + span * i / dags
        times = [born + k * scrape for k in range(int((life + ttl) / scrape) + 1)
                 if born + k * scrape <= start + span]
        ids = {**sched, "job_id": str(i // 10), "dag_id": str(i % 10)}
        om.add("dask_job_dag_info", {**ids, "job_name": f"job-{i // 10}", "client": "c"},
               [(t, 1.0) for t in times])
        om.add("dask_job_dag_status", ids,
               [(t, 1.0 if t < born + life else 2.0) for t in times])
        samples += len(times)
    return om, samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dags", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--scrape", type=float, default=1.0)
    parser.add_argument("--life", type=float, default=60.0)
    parser.add_argument("--ttl", type=float, default=300.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    start = (int(time.time()) - 6 * 3600) // 3600 * 3600  # whole hours, as promtool likes
    end = int(start + args.hours * 3600)
    print("| DAGs in the hour | status samples | fetch_jobs s (median) | samples/s | rows |")
    print("|---:|---:|---:|---:|---:|")
    for dags in args.dags:
        with tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp:
            om, samples = dataset(dags, start, args.hours, args.scrape, args.life, args.ttl)
            blocks = create_blocks(om, Path(tmp) / "blocks")
            with run_prometheus(Path(tmp) / "prom", blocks=blocks,
                                extra_args=["--storage.tsdb.retention.time=100y"]) as prom:
                times, rows = [], 0
                for _ in range(args.rounds):
                    client = PrometheusClient(ConnectionSettings(prom.url))
                    began = time.perf_counter()
                    rows = len(fetch_jobs(client, start * 1000, end * 1000, 3_600_000, 120_000,
                                          Scope("bench")))
                    times.append(time.perf_counter() - began)
        wall = statistics.median(times)
        print(f"| {dags} | {samples} | {wall:.2f} | {samples / wall:,.0f} | {rows} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
