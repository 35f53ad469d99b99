"""Where the time went, end to end on the local stack: a scheduler with the preload, two workers
each with a sidecar on the fake NVML driver, a real Prometheus. Two jobs whose time per activity
is known (a task sleeping inside ``context_meter.meter("I/O")``, a task spinning the CPU for a
known CPU time, a custom ``digest_metric`` in bytes), a prefix that runs while the fake GPU's
utilisation is scripted high and one that runs while it idles, and a task holding a known
allocation; then Monitor.activities(), Monitor.gpu_by_prefix() and the worker columns.

Dask's accounting tolerance: a metered block or a CPU spin is recorded within
ACCOUNTING_TOLERANCE of its length (Dask's own overhead around the task, plus the thread
switch); bytes from digest_metric are exact.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Iterator
from typing import Any

import pytest
from distributed import Client
from distributed.metrics import context_meter

from dask_metrics import Monitor
from dask_metrics.demo.localstack import LocalStack, StackOptions, WorkerSpec
from tests.fake_nvml import FakeNVML, GiB, MiB
from tests.helpers import clean_env, wait_for

pytestmark = pytest.mark.integration
GPU_WORKER, CPU_WORKER = "gpu-w", "cpu-w"
KERNEL_SECONDS = 3.0  # gpu_kernel sleeps this long while the fake GPU is 90 % busy
BUSY = 0.9
CPU_SECONDS = 1.5  # spin_cpu's thread CPU time
IO_SECONDS = 1.0  # each of the two read_blob tasks, metered as "I/O"
PAYLOAD = 4096  # bytes each of three digest tasks reports as "payload"
HOLD = 600 * MiB  # what hold keeps allocated for HOLD_SECONDS
HOLD_SECONDS = 3.0
ACCOUNTING_TOLERANCE = 0.25  # seconds
HEARTBEAT_LAG = 2.0  # seconds from a worker's state to the scraped heartbeat that reports it
COLUMNS = ["total-mem", "compute-util", "worker-mem", "worker-cpu", "worker-tasks"]


def gpu_kernel() -> None:
    time.sleep(KERNEL_SECONDS)


def spin_cpu() -> None:
    start = time.thread_time()
    while time.thread_time() - start < CPU_SECONDS:
        pass


def read_blob(i: int) -> int:
    with context_meter.meter("I/O"):
        time.sleep(IO_SECONDS)
    return i


def digest(i: int) -> int:
    context_meter.digest_metric("payload", PAYLOAD, "bytes")
    return i


def hold() -> int:
    block = b"\x01" * HOLD  # written, so resident
    time.sleep(HOLD_SECONDS)
    return len(block)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_nvml_lib: Any
          ) -> Iterator[tuple[LocalStack, FakeNVML]]:
    tmp = tmp_path_factory.mktemp("breakdown")
    fake = FakeNVML(tmp / "nvml_state", fake_nvml_lib, gpus=2)
    for gpu in fake.gpus:
        gpu.gpu_util, gpu.memory_used = 0, 1 * GiB
    fake.write()
    options = StackOptions(
        tmp / "stack", env=clean_env(fake.env), sample_interval=0.1,
        worker_specs=[WorkerSpec(GPU_WORKER, gpus=fake.uuid(0)),
                      WorkerSpec(CPU_WORKER, gpus=fake.uuid(1))])
    with LocalStack(options) as running:
        yield running, fake


def _counter(stack: LocalStack, prefix: str, activity: str, unit: str) -> float:
    found = stack.query(f'sum(dask_job_activity_{unit}_total{{prefix="{prefix}",'
                        f'activity="{activity}"}})')
    return float(found[0]["value"][1]) if found else 0.0


@pytest.fixture(scope="module")
def session(stack: tuple[LocalStack, FakeNVML]) -> dict[str, Any]:
    """One monitor session, two jobs; returns what the checks need to know of it."""
    running, fake = stack
    addr = running.scheduler_address
    known: dict[str, Any] = {}
    with Client(addr, name="job-a") as a:
        monitor = Monitor(a).attach(COLUMNS)
        monitor.start()
        fake.gpus[0].gpu_util, fake.gpus[0].memory_used = int(BUSY * 100), 8 * GiB
        fake.write()
        known["kernel"] = time.time()
        a.submit(gpu_kernel, workers=[GPU_WORKER], pure=False).result()
        known["kernel_end"] = time.time()
        fake.gpus[0].gpu_util, fake.gpus[0].memory_used = 0, 1 * GiB
        fake.write()
        # the GPU's busy counter has stopped growing in Prometheus before the CPU work starts
        wait_for(lambda: running.scraped_since("dask_gpu_up", known["kernel_end"] + 1.5),
                 timeout=30, what="a GPU scrape after the kernel")
        known["spin"] = time.time()
        a.submit(spin_cpu, workers=[GPU_WORKER], pure=False).result()
        known["hold"] = time.time()
        assert a.submit(hold, workers=[GPU_WORKER], pure=False).result() == HOLD
        known["hold_end"] = time.time()
    with Client(addr, name="job-b") as b:
        assert b.gather(b.map(read_blob, range(2), workers=[CPU_WORKER], pure=False)) == [0, 1]
        assert b.gather(b.map(digest, range(3), workers=[CPU_WORKER], pure=False)) == [0, 1, 2]
    # the workers' last heartbeats have reached the scheduler and Prometheus has scraped them
    wait_for(lambda: _counter(running, "digest", "payload", "bytes") == 3 * PAYLOAD
             and _counter(running, "hold", "thread-noncpu", "seconds") > 0, timeout=60,
             what="the activity counters of both workers' last tasks in Prometheus")
    with Client(addr) as c:
        monitor = Monitor(c)
        monitor.stop()
        known["activities"] = monitor.activities()
        known["gpu_by_prefix"] = monitor.gpu_by_prefix()
        known["session"] = monitor.session()
        known["export"] = monitor.to_csv(running.options.folder / "results")
    return known


def _value(rows: list[dict[str, Any]], **match: str) -> float:
    found = [r["value"] for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(found) == 1, (match, rows)
    return found[0]


def test_activities_match_the_known_workload(session: dict[str, Any]) -> None:
    rows = session["activities"]
    assert {r["job_name"] for r in rows} >= {"job-a", "job-b"}
    io = _value(rows, job_name="job-b", prefix="read_blob", activity="I/O", unit="seconds")
    assert io == pytest.approx(2 * IO_SECONDS, abs=ACCOUNTING_TOLERANCE)
    cpu = _value(rows, job_name="job-a", prefix="spin_cpu", activity="thread-cpu",
                 unit="seconds")
    assert cpu == pytest.approx(CPU_SECONDS, abs=ACCOUNTING_TOLERANCE)
    assert _value(rows, job_name="job-b", prefix="digest", activity="payload",
                  unit="bytes") == 3 * PAYLOAD
    # the sleeping kernel's time is not CPU time
    sleep = _value(rows, job_name="job-a", prefix="gpu_kernel", activity="thread-noncpu",
                   unit="seconds")
    assert sleep == pytest.approx(KERNEL_SECONDS, abs=ACCOUNTING_TOLERANCE)


def test_gpu_seconds_go_to_the_prefix_that_ran_while_the_gpu_was_busy(
        session: dict[str, Any]) -> None:
    rows = {r["prefix"]: r for r in session["gpu_by_prefix"]}
    kernel = rows["gpu_kernel"]
    busy_window = session["kernel_end"] - session["kernel"]  # the fake GPU at 90 % this long
    # at most one scrape interval (1 s) lost at each end of the task to the as-of join
    assert BUSY * (KERNEL_SECONDS - 2) <= kernel["gpu_seconds"] <= BUSY * busy_window + 0.2
    assert kernel["peak_mem"] == 8 * GiB
    assert kernel["energy"] is not None and kernel["energy"] > 0
    assert kernel["job_name"] == "job-a"
    for prefix in ("spin_cpu", "hold", "read_blob", "digest"):  # only while the GPUs idled
        if prefix in rows:
            assert rows[prefix]["gpu_seconds"] == 0, rows[prefix]
            assert rows[prefix]["peak_mem"] == 1 * GiB, rows[prefix]
    assert "spin_cpu" in rows and "hold" in rows


def test_worker_mem_follows_a_held_allocation(session: dict[str, Any]) -> None:
    out = session["export"].out
    start = session["session"]["start"]
    with open(out / f"{GPU_WORKER}.csv", newline="") as fh:
        rows = [(start + float(r["timestamp"]), r) for r in csv.DictReader(fh)]
    assert list(rows[0][1])[-len(COLUMNS):] == COLUMNS

    def mem(lo: float, hi: float) -> list[float]:
        return [float(r["worker-mem"]) for t, r in rows if lo <= t <= hi and r["worker-mem"]]

    before = mem(session["hold"] - 3, session["hold"])
    during = mem(session["hold"] + 1, session["hold_end"] + HEARTBEAT_LAG)
    assert before and during, rows
    assert max(during) - min(before) >= 0.8 * HOLD
    # % of one core while spin_cpu ran; the heartbeat that reports it may come up to a
    # heartbeat and a scrape (about 2 s) later
    spinning = [float(r["worker-cpu"]) for t, r in rows
                if session["spin"] <= t <= session["hold"] + HEARTBEAT_LAG and r["worker-cpu"]]
    assert spinning and max(spinning) >= 40, spinning
