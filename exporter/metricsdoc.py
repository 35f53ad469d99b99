"""Generate docs/metrics.md from the metric declarations:
``python -m dask_metrics.exporter.metricsdoc``.

A test compares the file with this output, so the reference cannot drift from the code.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dask_metrics import contract
from dask_metrics.atomicfile import atomic_write_text
from dask_metrics.metricspec import markdown_table

DOC = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"

HEADER = """\
# Metrics reference

Generated from the code by `python -m dask_metrics.exporter.metricsdoc`; a test fails when this file
and the code disagree. Names follow Prometheus conventions: base units in the name, `_total`
for counters, `_info` for constant 1 series that carry labels.

The `worker` label is the same string in every series of every part: the Dask worker's name,
or its address when it has none, so GPU series and job/DAG series join on it. Label names
are never `job` or `instance`, which Prometheus sets on every scraped series. `gpu` is the
index of the GPU among the worker's visible GPUs (its CUDA device number inside the worker),
`uuid` the NVML UUID (`GPU-…` or `MIG-…`).

`dask_cluster` names the Dask cluster a series is from, the same value on every series of
every part of one cluster, so one Prometheus can hold many (not `cluster`, which multi-
cluster Prometheus setups use for the Kubernetes cluster). It is `--dask-cluster`,
`DASK_METRICS_CLUSTER` or Dask config `dask-metrics.cluster` where set, else what the
scheduler derives (docs/scheduler.md); a worker and a sidecar export no GPU series until they
know it.

A value a device does not support is left out for that device, never exported as 0. A GPU
that stops answering keeps `dask_gpu_info` and `dask_gpu_up 0` (and its counters) but loses
its value series until it answers again.

"""


def render() -> str:
    return (HEADER + markdown_table("GPU exporter (`dask_gpu_*`)", contract.GPU_SPECS) + "\n"
            + markdown_table("Scheduler preload (`dask_job_*`)", contract.SCHEDULER_SPECS))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dask_metrics.exporter.metricsdoc",
                                     description=f"Write {DOC.name} from the metric specs.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the file is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = not DOC.exists() or DOC.read_text() != render()
        print(f"{DOC} is {'stale' if stale else 'up to date'}")
        return 1 if stale else 0
    atomic_write_text(DOC, render())
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
