"""The demo's example workload: two jobs of several DAGs, a memory spike, idle phases, and
three kinds of work that Dask's fine performance metrics tell apart: an I/O-bound step
(``read_input``, metered as activity ``I/O``), a CPU-bound step (``transform``:
``thread-cpu``) and a GPU step (``gpu_kernel``, metered as activity ``gpu``).

The task functions live in this importable module so that the workers unpickle them by
reference. Each job is a client of its own: the scheduler preload (client job mode) numbers
jobs by client and DAGs by graph submission.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import dask
from distributed import Client
from distributed.metrics import context_meter

from dask_metrics.collector.errors import CollectorError


def busy(seconds: float, i: int = 0) -> int:
    """Keeps one core busy, as a kernel keeps a GPU busy."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(2000))
    return i


def read_input(seconds: float, i: int = 0) -> int:
    """I/O-bound: waits as a read from storage or the network would; Dask counts the time
    as activity ``I/O`` (``context_meter``), not as thread time."""
    with context_meter.meter("I/O"):
        time.sleep(seconds)
    return i


def transform(seconds: float, i: int = 0) -> int:
    """CPU-bound: computes for ``seconds`` of its thread's CPU time, which Dask counts as
    ``thread-cpu`` (waiting for a core on a busy machine shows as ``thread-noncpu``)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        sum(range(2000))
    return i


def _gpu_work(seconds: float) -> None:
    """Kernels on the GPU for ``seconds`` through CuPy or PyTorch when one is usable, else
    one busy core, which simulated GPUs mirror as GPU utilisation."""
    end = time.perf_counter() + seconds
    try:
        import cupy

        a = cupy.ones((1024, 1024), dtype=cupy.float32)
        while time.perf_counter() < end:
            a = a @ a / 1024
            cupy.cuda.Device().synchronize()
        return
    except Exception:  # not installed, or no usable GPU
        pass
    try:
        import torch

        if torch.cuda.is_available():
            t = torch.ones((1024, 1024), device="cuda")
            while time.perf_counter() < end:
                t = t @ t / 1024
                torch.cuda.synchronize()
            return
    except Exception:
        pass
    busy(max(0.0, end - time.perf_counter()))


def gpu_kernel(seconds: float, i: int = 0) -> int:
    """The GPU step: Dask counts its time as activity ``gpu`` (``context_meter``)."""
    with context_meter.meter("gpu"):
        _gpu_work(seconds)
    return i


def _allocate(nbytes: int) -> tuple[object, str, Callable[[], None]]:
    """``nbytes`` of GPU memory through CuPy or PyTorch when one is importable, else host
    memory, which simulated GPUs mirror; with what hands freed blocks back to the driver
    (both libraries keep them in a pool, where NVML still counts them as used)."""
    try:
        import cupy

        pool = cupy.get_default_memory_pool()
        return cupy.ones(nbytes, dtype=cupy.uint8), "GPU memory (CuPy)", pool.free_all_blocks
    except Exception:  # not installed, or no usable GPU
        pass
    try:
        import torch

        if torch.cuda.is_available():
            block = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
            return block, "GPU memory (PyTorch)", torch.cuda.empty_cache
    except Exception:
        pass
    return bytearray(b"\x01") * nbytes, "host memory", lambda: None


def spike(nbytes: int, seconds: float) -> str:
    """Holds ``nbytes`` for ``seconds`` while computing, then frees them, back to the
    driver too, so that the spike ends in the GPU's used memory; says where."""
    block, where, release = _allocate(nbytes)
    gpu_kernel(seconds)
    del block
    release()
    return where


@dataclass(frozen=True)
class Plan:
    """Durations in seconds; ``spike_bytes`` held by one task on the first worker."""

    spike_bytes: int = 2**30
    idle: float = 3.0
    task: float = 1.5
    spike_seconds: float = 2.0


def run(address: str, plan: Plan, say: Callable[[str], None]) -> str:
    """Run the workload on the cluster at ``address``; returns where the spike allocated."""
    with Client(address, name="demo-control", set_as_default=False) as control:
        workers = sorted((w["name"], a) for a, w in control.scheduler_info()["workers"].items())
    if not workers:
        raise CollectorError(f"no worker is connected to the scheduler at {address}")
    tasks = 2 * len(workers)
    first = workers[0]

    say(f"idle for {plan.idle:g} s")
    time.sleep(plan.idle)
    with Client(address, name="etl", set_as_default=False) as etl:
        say(f"job 0 'etl', DAG 0: {tasks} I/O-bound tasks (read_input) of {plan.task:g} s "
            f"over {len(workers)} workers")
        etl.gather(etl.map(read_input, [plan.task] * tasks, range(tasks), pure=False))
        say(f"job 0 'etl', DAG 1: a reduction of {tasks} short CPU-bound tasks (transform), "
            "one graph")
        parts = [dask.delayed(transform)(plan.task / 2, i) for i in range(tasks)]
        etl.compute(dask.delayed(sum)(parts), sync=True)
    say(f"idle for {plan.idle:g} s")
    time.sleep(plan.idle)
    with Client(address, name="train", set_as_default=False) as train:
        say(f"job 1 'train', DAGs 0 and 1: a {plan.spike_bytes / 2**30:g} GiB memory spike on "
            f"{first[0]} for {plan.spike_seconds:g} s, while the other workers run GPU "
            "kernels (gpu_kernel)")
        held = train.submit(spike, plan.spike_bytes, plan.spike_seconds, workers=[first[1]],
                            pure=False)
        others = [a for _, a in workers[1:]] or [first[1]]
        side = train.map(gpu_kernel, [plan.spike_seconds] * len(others), range(len(others)),
                         workers=others, pure=False)
        where = train.gather([held, *side])[0]
        say(f"job 1 'train', DAG 2: {tasks} GPU tasks (gpu_kernel) of {plan.task / 2:g} s")
        train.gather(train.map(gpu_kernel, [plan.task / 2] * tasks, range(tasks), pure=False))
    say(f"idle for {plan.idle:g} s")
    time.sleep(plan.idle)
    return where
