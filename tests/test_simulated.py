"""Simulated GPUs mirror the process they are attached to, so a demo workload shows up."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from dask_metrics.exporter.simulated import SimulatedSource, process_usage, simulated_uuid

GiB = 2**30


def test_process_usage_reads_proc():
    usage = process_usage([os.getpid()])
    assert usage is not None and usage.rss_bytes > 10 * 2**20 and usage.cpu_seconds > 0
    assert process_usage([2**22 + 12345]) is None  # no such pid


def test_mirrors_memory_and_cpu_of_the_worker_process():
    source = SimulatedSource(1, memory_total=8 * GiB)
    uuid = simulated_uuid(0)
    pid = [os.getpid()]
    before = source.read(uuid, pid)
    held = bytearray(b"\x01") * (512 * 2**20)
    end = time.perf_counter() + 0.5
    while time.perf_counter() < end:
        sum(range(1000))
    during = source.read(uuid, pid)
    del held
    assert during.memory_used - before.memory_used >= 400 * 2**20
    assert during.memory_total == 8 * GiB
    assert during.utilization > 0.3  # half a second of one busy core, on a loaded machine
    assert during.processes == {os.getpid(): during.memory_used}
    assert during.energy_joules > before.energy_joules >= 0


@pytest.mark.integration
def test_gone_process_is_an_idle_gpu_and_no_process_a_wave():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    source = SimulatedSource(2)
    gone = source.read(simulated_uuid(0), [child.pid])
    assert (gone.memory_used, gone.utilization) == (0, 0)
    alone = source.read(simulated_uuid(1), [])
    assert 0.1 * 16 * GiB <= alone.memory_used <= 0.7 * 16 * GiB
    assert 0 <= alone.utilization <= 1
