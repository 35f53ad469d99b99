"""The sidecar exporter as a real process over the real pynvml binding and the fake driver."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from dask_metrics import contract
from dask_metrics.exporter.identity import GpuRef, WorkerIdentity, write_info_file
from tests.fake_nvml import FakeGPU, FakeMIG, FakeNVML, GiB, MiB
from tests.helpers import (
    clean_env,
    exporter_process,
    free_port,
    http_get,
    no_nvml_env,
    processes,
    promtool_lint,
    scrape,
    sidecar,
    value,
    values,
    wait_for,
)

pytestmark = pytest.mark.integration  # every test runs the exporter as a program
FAST = ("--interval", "0.1")


def gpu_labels(fake: FakeNVML, index: int, worker: str = "w0", position: int | None = None):
    return {"worker": worker, "gpu": str(index if position is None else position),
            "uuid": fake.uuid(index)}


def wait_until_scripted(fake: FakeNVML, t: float) -> None:
    """Wait for the fake driver's scripted time ``t`` (epoch + t) to have passed."""
    wait_for(lambda: time.time() >= fake.epoch + t, timeout=t + 30, what=f"scripted t={t}")


def test_scripted_values_come_out_in_base_units(fake_nvml):
    g = fake_nvml.gpus[0]
    g.memory_used, g.memory_reserved, g.memory_total = 3 * GiB, 256 * MiB, 40 * GiB
    g.gpu_util, g.memory_util, g.power_mw, g.temperature_c = 75, 20, 250_500, 61
    g.sm_clock_mhz, g.energy_mj, g.energy_follows_power = 1980, 5_000_000, False
    g.processes = [(os.getpid(), 1 * GiB), (999_999, 2 * GiB)]
    g.name = "NVIDIA H100 80GB HBM3"
    fake_nvml.write()
    # the energy counter read at every sample: exactly the (constant) scripted value
    with sidecar("--worker", "w0", "--pids", str(os.getpid()), "--energy-interval", "0.5",
                 env=fake_nvml.env) as base:
        s = scrape(base + "/metrics")
    gpu0 = gpu_labels(fake_nvml, 0)
    assert value(s, "dask_gpu_up", **gpu0) == 1
    assert value(s, "dask_gpu_memory_used_bytes", **gpu0) == 3 * GiB
    assert value(s, "dask_gpu_memory_reserved_bytes", **gpu0) == 256 * MiB
    assert value(s, "dask_gpu_memory_total_bytes", **gpu0) == 40 * GiB
    assert value(s, "dask_gpu_memory_peak_bytes", **gpu0) == 3 * GiB
    assert value(s, "dask_gpu_utilization_ratio", **gpu0) == 0.75
    assert value(s, "dask_gpu_memory_bandwidth_utilization_ratio", **gpu0) == 0.20
    assert value(s, "dask_gpu_power_watts", **gpu0) == 250.5
    assert value(s, "dask_gpu_energy_joules_total", **gpu0) == 5000
    assert value(s, "dask_gpu_temperature_celsius", **gpu0) == 61
    assert value(s, "dask_gpu_sm_clock_hertz", **gpu0) == 1.98e9
    procs = values(s, "dask_gpu_process_memory_used_bytes", **gpu0)
    assert {dict(k)["pid"]: v for k, v in procs.items()} == {str(os.getpid()): 1 * GiB}
    (info,) = values(s, "dask_gpu_info", **gpu0)
    assert dict(info)["name"] == "NVIDIA H100 80GB HBM3"
    assert dict(info)["pci_bus_id"] == "00000000:01:00.0"
    assert dict(info)["driver_version"] == "550.54.15"
    assert dict(info)["simulated"] == "false"
    assert value(s, "dask_gpu_up", **gpu_labels(fake_nvml, 1)) == 1
    assert value(s, "dask_gpu_exporter_nvml_up", worker="w0") == 1


def test_every_exported_name_is_documented_and_promtool_agrees(fake_nvml):
    fake_nvml.gpus[0].processes = [(os.getpid(), GiB)]
    fake_nvml.gpus[0].gpm = True
    fake_nvml.write()
    with sidecar("--worker", "w0", "--pids", str(os.getpid()), env=fake_nvml.env) as base:
        names = wait_for(lambda: set(scrape(base + "/metrics").samples),
                         lambda found: contract.SM_ACTIVE.name in found, what="GPM activity")
        text = http_get(base + "/metrics")[1]
    documented = {spec.name for spec in contract.GPU_SPECS}
    ours = {n for n in names if n.startswith("dask_")}
    # absent by design here: no NVML error, and memory never fell below its peak
    optional = {"dask_gpu_exporter_nvml_errors_total", contract.MEMORY_NEXT_PEAK.name,
                contract.MEMORY_NEXT_PEAK_TIME.name}
    assert ours - optional <= documented
    assert documented - ours <= optional
    promtool_lint(text)


def test_spike_between_two_scrapes_shows_in_the_peak_with_its_time(fake_nvml):
    with sidecar("--worker", "w0", "--interval", "0.25", "--peak-window", "20",
                 env=fake_nvml.env) as base:
        fake_nvml.epoch = time.time()
        fake_nvml.at(1.5, 0, memory_used=60 * GiB).at(2.5, 0, memory_used=0)
        fake_nvml.write()
        before = scrape(base + "/metrics")
        wait_until_scripted(fake_nvml, 3.0)
        after = scrape(base + "/metrics")
    gpu0 = gpu_labels(fake_nvml, 0)
    assert value(before, "dask_gpu_memory_used_bytes", **gpu0) == 0
    assert value(after, "dask_gpu_memory_used_bytes", **gpu0) == 0  # no scrape saw the spike
    assert value(after, "dask_gpu_memory_peak_bytes", **gpu0) == 60 * GiB
    assert value(after, "dask_gpu_memory_peak_bytes", **gpu_labels(fake_nvml, 1)) == 0
    # the time of the last internal sample at 60 GiB: inside the spike
    stamp = value(after, "dask_gpu_memory_peak_timestamp_seconds", **gpu0)
    assert fake_nvml.epoch + 1.5 <= stamp < fake_nvml.epoch + 2.5
    # the largest value after it: the 0 bytes since, dated after the spike ended
    assert value(after, "dask_gpu_memory_next_peak_bytes", **gpu0) == 0
    assert value(after, "dask_gpu_memory_next_peak_timestamp_seconds", **gpu0) >= (
        fake_nvml.epoch + 2.5)
    assert value(after, "dask_gpu_exporter_peak_window_seconds", worker="w0") == 20


@pytest.mark.parametrize("longest", [None, "1"])
def test_the_peak_window_grows_to_the_gap_between_two_scrapes(fake_nvml, longest):
    """A 0.5 s shortest window, scraped 3 s apart: the spike in between is in the peak; with
    --peak-window-max 1 (a fixed window shorter than the gap) it is not."""
    fixed = ("--peak-window-max", longest) if longest else ()
    with sidecar("--worker", "w0", "--interval", "0.1", "--peak-window", "0.5", *fixed,
                 env=fake_nvml.env) as base:
        fake_nvml.epoch = time.time()
        fake_nvml.at(1.0, 0, memory_used=60 * GiB).at(1.3, 0, memory_used=0)
        fake_nvml.write()
        before = scrape(base + "/metrics")
        wait_until_scripted(fake_nvml, 3.0)
        after = scrape(base + "/metrics")
    gpu0 = gpu_labels(fake_nvml, 0)
    assert value(before, "dask_gpu_memory_peak_bytes", **gpu0) == 0
    window = value(after, "dask_gpu_exporter_peak_window_seconds", worker="w0")
    if longest:
        assert window <= 1.0
        assert value(after, "dask_gpu_memory_peak_bytes", **gpu0) == 0  # lost, as configured
    else:
        assert window >= 2.0  # since the scrape before, plus an interval
        assert value(after, "dask_gpu_memory_peak_bytes", **gpu0) == 60 * GiB


def test_busy_seconds_rate_is_the_mean_utilisation(fake_nvml):
    fake_nvml.gpus[0].gpu_util = 40
    fake_nvml.write()
    with sidecar("--worker", "w0", "--interval", "0.1", env=fake_nvml.env) as base:
        fake_nvml.epoch = time.time()
        fake_nvml.at(1.0, 1, gpu_util=100).at(2.0, 1, gpu_util=0)
        fake_nvml.write()
        first = scrape(base + "/metrics")
        wait_until_scripted(fake_nvml, 3.0)
        last = scrape(base + "/metrics")

    def delta(name, labels):
        return value(last, name, **labels) - value(first, name, **labels)

    stamp = "dask_gpu_exporter_last_sample_timestamp_seconds"
    elapsed = delta(stamp, {"worker": "w0"})
    assert elapsed > 2
    constant = delta("dask_gpu_busy_seconds_total", gpu_labels(fake_nvml, 0)) / elapsed
    assert constant == pytest.approx(0.40, rel=0.03)
    # One second at 100 %: exact up to one sampling interval at each edge.
    assert delta("dask_gpu_busy_seconds_total", gpu_labels(fake_nvml, 1)) == pytest.approx(
        1.0, abs=0.21)


def test_gpm_activity_exact_on_hopper_absent_with_a_note_elsewhere(fake_nvml):
    """SM and tensor activity from GPM: the gauges are the exact means of the scripted
    activity, the counters its exact integral across a step (not a sum of scraped values);
    a GPU without GPM gets no such series and one line at start-up; a MIG device reads its
    GPU instance's activity."""
    h100 = FakeGPU(name="NVIDIA H100 80GB HBM3", gpm=True, sm_active=25.0, sm_occupancy=10.0,
                   dram_active=5.0, fp32_active=20.0)
    mig_parent = FakeGPU(name="NVIDIA H100 80GB HBM3", gpm=True,
                         mig=[FakeMIG(gpu_instance_id=1, sm_active=40.0, tensor_active=30.0)])
    fake_nvml.gpus = [h100, FakeGPU(), mig_parent]
    fake_nvml.epoch = time.time() + 8  # the sidecar is up well before t = 0
    fake_nvml.at(1.0, 0, sm_active=90.0, tensor_active=60.0)
    fake_nvml.at(2.0, 0, sm_active=25.0, tensor_active=0.0)
    fake_nvml.write()
    port = free_port()
    cmd = [sys.executable, "-m", "dask_metrics.exporter", "--listen", f"127.0.0.1:{port}",
           "--worker", "w0", "--gpus", f"0,1,{fake_nvml.uuid(2, 0)}", *FAST]
    base = f"http://127.0.0.1:{port}"
    with processes((cmd, fake_nvml.env)) as (proc,):
        wait_for(lambda: http_get(base + "/healthz")[0] == 200, what="the exporter's /healthz")
        wait_until_scripted(fake_nvml, 0.3)
        first = scrape(base + "/metrics")
        assert time.time() < fake_nvml.epoch + 0.9, "the first scrape came after the step"
        wait_until_scripted(fake_nvml, 2.5)
        last = scrape(base + "/metrics")
        promtool_lint(http_get(base + "/metrics")[1])
    h, a100 = gpu_labels(fake_nvml, 0), gpu_labels(fake_nvml, 1)
    assert value(first, "dask_gpu_sm_active_ratio", **h) == pytest.approx(0.25, abs=1e-6)
    assert value(first, "dask_gpu_sm_occupancy_ratio", **h) == pytest.approx(0.10, abs=1e-6)
    assert value(first, "dask_gpu_tensor_active_ratio", **h) == 0
    assert value(first, "dask_gpu_dram_active_ratio", **h) == pytest.approx(0.05, abs=1e-6)
    assert value(first, "dask_gpu_fp32_active_ratio", **h) == pytest.approx(0.20, abs=1e-6)
    assert value(first, "dask_gpu_fp64_active_ratio", **h) == 0

    def delta(name: str, labels: dict[str, str]) -> float:
        return value(last, name, **labels) - value(first, name, **labels)

    # one second at 60 %: exact, wherever the samples fell around the steps
    assert delta("dask_gpu_tensor_active_seconds_total", h) == pytest.approx(0.6, abs=0.01)
    elapsed = delta("dask_gpu_exporter_last_sample_timestamp_seconds", {"worker": "w0"})
    assert delta("dask_gpu_sm_active_seconds_total", h) == pytest.approx(
        0.25 * elapsed + 0.65, abs=0.02)
    for name in ("dask_gpu_sm_active_ratio", "dask_gpu_tensor_active_seconds_total",
                 "dask_gpu_sm_active_seconds_total"):
        assert not values(last, name, **a100), name
    mig = {"worker": "w0", "uuid": fake_nvml.uuid(2, 0)}
    assert value(last, "dask_gpu_sm_active_ratio", **mig) == pytest.approx(0.40, abs=1e-6)
    assert value(last, "dask_gpu_tensor_active_ratio", **mig) == pytest.approx(0.30, abs=1e-6)
    notes = [line for line in proc.output.splitlines() if "GPM" in line]
    assert len(notes) == 1 and fake_nvml.uuid(1) in notes[0], proc.output


def test_gpm_nan_means_are_left_out_never_served_or_counted(fake_nvml):
    """NVML can answer a GPM mean as NaN with success (a real H200's DRAM activity over the
    first interval after start): that series has no sample for such a round, and the
    activity counters stay finite, credit nothing for the unknown time and never go back."""
    nan = float("nan")
    fake_nvml.gpus = [FakeGPU(name="NVIDIA H100 80GB HBM3", gpm=True, sm_active=40.0,
                              tensor_active=50.0, dram_active=nan)]
    fake_nvml.epoch = time.time() + 4  # the sidecar is up well before t = 0
    fake_nvml.at(1.0, 0, dram_active=30.0, sm_active=nan).at(2.0, 0, sm_active=40.0)
    fake_nvml.write()
    scrapes = {}
    with sidecar("--worker", "w0", *FAST, env=fake_nvml.env) as base:
        for t in (0.5, 1.5, 3.0):
            wait_until_scripted(fake_nvml, t)
            scrapes[t] = scrape(base + "/metrics")
            assert time.time() < fake_nvml.epoch + t + 0.4, f"the scrape at t={t} came late"
        text = http_get(base + "/metrics")[1]
    h = gpu_labels(fake_nvml, 0)
    ratio, sm, tensor = ("dask_gpu_{}_active_ratio", "dask_gpu_sm_active_seconds_total",
                         "dask_gpu_tensor_active_seconds_total")
    assert not values(scrapes[0.5], ratio.format("dram"), **h)
    assert value(scrapes[0.5], ratio.format("sm"), **h) == pytest.approx(0.40, abs=1e-6)
    assert not values(scrapes[1.5], ratio.format("sm"), **h)
    assert value(scrapes[1.5], ratio.format("dram"), **h) == pytest.approx(0.30, abs=1e-6)
    assert value(scrapes[3.0], ratio.format("sm"), **h) == pytest.approx(0.40, abs=1e-6)
    assert "NaN" not in text
    counts = [value(scrapes[t], sm, **h) for t in (0.5, 1.5, 3.0)]
    assert counts == sorted(counts) and counts[0] >= 0, counts
    stamp = "dask_gpu_exporter_last_sample_timestamp_seconds"
    elapsed = value(scrapes[3.0], stamp, worker="w0") - value(scrapes[0.5], stamp, worker="w0")
    assert value(scrapes[3.0], tensor, **h) - value(scrapes[0.5], tensor, **h) == (
        pytest.approx(0.5 * elapsed, abs=0.02))
    # the NaN second and the rounds overlapping its edges (0.1 s each) are credited nothing
    assert 0.4 * (elapsed - 1.2) - 0.02 <= counts[2] - counts[0] <= 0.4 * (elapsed - 1.0) + 0.02


def test_energy_between_counter_reads_advances_by_power_times_time(fake_nvml):
    """NVML's energy counter is read once an hour here and held constant by the fake driver:
    the served counter still grows at the power reading, from the estimate between reads."""
    g = fake_nvml.gpus[0]
    g.power_mw, g.energy_mj, g.energy_follows_power = 200_000, 5_000_000, False
    fake_nvml.write()
    with sidecar("--worker", "w0", "--interval", "0.1", "--energy-interval", "3600",
                 env=fake_nvml.env) as base:
        first, since = scrape(base + "/metrics"), time.time()
        wait_for(lambda: time.time() > since + 2, timeout=30, what="2 s of samples")
        last = scrape(base + "/metrics")
    gpu0, stamp = gpu_labels(fake_nvml, 0), "dask_gpu_exporter_last_sample_timestamp_seconds"
    elapsed = value(last, stamp, worker="w0") - value(first, stamp, worker="w0")
    served = [value(s, "dask_gpu_energy_joules_total", **gpu0) for s in (first, last)]
    assert served[0] >= 5000 and elapsed > 1
    assert (served[1] - served[0]) / elapsed == pytest.approx(200, rel=0.03)


def test_unsupported_calls_are_absent_not_zero(fake_nvml):
    fake_nvml.gpus[1].unsupported = {"GetPowerUsage", "GetTotalEnergyConsumption",
                                     "GetTemperature", "GetClockInfo"}
    fake_nvml.write()
    with sidecar("--worker", "w0", *FAST, env=fake_nvml.env) as base:
        s = scrape(base + "/metrics")
    for name in ("dask_gpu_power_watts", "dask_gpu_energy_joules_total",
                 "dask_gpu_temperature_celsius", "dask_gpu_sm_clock_hertz"):
        assert values(s, name, **gpu_labels(fake_nvml, 0)), name
        assert not values(s, name, **gpu_labels(fake_nvml, 1)), name
    assert value(s, "dask_gpu_up", **gpu_labels(fake_nvml, 1)) == 1
    assert not values(s, "dask_gpu_exporter_nvml_errors_total")


def test_memory_info_v1_fallback_when_v2_is_unsupported(fake_nvml):
    g = fake_nvml.gpus[0]
    g.memory_used, g.memory_reserved, g.unsupported = 2 * GiB, 512 * MiB, {"GetMemoryInfo_v2"}
    fake_nvml.write()
    with sidecar("--worker", "w0", *FAST, env=fake_nvml.env) as base:
        s = scrape(base + "/metrics")
    gpu0 = gpu_labels(fake_nvml, 0)
    assert value(s, "dask_gpu_memory_used_bytes", **gpu0) == 2 * GiB + 512 * MiB  # v1 semantics
    assert not values(s, "dask_gpu_memory_reserved_bytes", **gpu0)
    assert values(s, "dask_gpu_memory_reserved_bytes", **gpu_labels(fake_nvml, 1))


def test_gpu_lost_then_back(fake_nvml):
    fake_nvml.gpus[1].gpu_util = 100
    fake_nvml.write()
    gpu1 = gpu_labels(fake_nvml, 1)
    with sidecar("--worker", "w0", *FAST, env=fake_nvml.env) as base:
        fake_nvml.epoch = time.time()
        fake_nvml.at(0.5, 1, lost=True).at(2.5, 1, lost=False)
        fake_nvml.write()
        down = wait_for(
            lambda: (s := scrape(base + "/metrics")) and value(s, "dask_gpu_up", **gpu1) == 0
            and s, what="GPU 1 down")
        assert value(down, "dask_gpu_up", **gpu_labels(fake_nvml, 0)) == 1
        assert not values(down, "dask_gpu_memory_used_bytes", **gpu1)
        assert values(down, "dask_gpu_info", **gpu1)
        errors = values(down, "dask_gpu_exporter_nvml_errors_total", error="GPU_IS_LOST")
        assert sum(errors.values()) >= 1
        busy_down = value(down, "dask_gpu_busy_seconds_total", **gpu1)
        assert http_get(base + "/healthz")[0] == 200
        back = wait_for(
            lambda: (s := scrape(base + "/metrics")) and value(s, "dask_gpu_up", **gpu1) == 1
            and s, what="GPU 1 back")
        assert values(back, "dask_gpu_memory_used_bytes", **gpu1)
        assert value(back, "dask_gpu_busy_seconds_total", **gpu1) >= busy_down


def test_gpm_counters_credit_nothing_while_the_gpu_is_lost(fake_nvml):
    """A lost GPU keeps its activity counters (never going back) and gains nothing for the
    time it was away; once back, the means are exact again."""
    fake_nvml.gpus[1] = FakeGPU(name="NVIDIA H100 80GB HBM3", gpm=True, tensor_active=50.0)
    fake_nvml.epoch = time.time() + 4  # scripted before start: the activity integrals hold
    fake_nvml.at(0.5, 1, lost=True).at(2.5, 1, lost=False)
    fake_nvml.write()
    gpu1 = gpu_labels(fake_nvml, 1)
    tensor = "dask_gpu_tensor_active_seconds_total"
    with sidecar("--worker", "w0", *FAST, env=fake_nvml.env) as base:
        wait_until_scripted(fake_nvml, 0.0)
        before = scrape(base + "/metrics")
        down = wait_for(lambda: scrape(base + "/metrics"),
                        lambda s: value(s, "dask_gpu_up", **gpu1) == 0, what="GPU 1 down")
        assert value(down, tensor, **gpu1) >= value(before, tensor, **gpu1)
        assert not values(down, "dask_gpu_tensor_active_ratio", **gpu1)
        wait_until_scripted(fake_nvml, 2.4)
        gone = scrape(base + "/metrics")
        back = wait_for(lambda: scrape(base + "/metrics"),
                        lambda s: values(s, "dask_gpu_tensor_active_ratio", **gpu1),
                        what="GPU 1's activity back")
        time.sleep(1.0)
        later = scrape(base + "/metrics")
    assert value(back, "dask_gpu_tensor_active_ratio", **gpu1) == pytest.approx(0.5, abs=1e-6)
    # from the last count before the loss to the first mean after it: at most the sampling
    # rounds at either edge (0.1 s each at 50 %), not the 2 s away
    assert value(back, tensor, **gpu1) - value(gone, tensor, **gpu1) <= 0.5 * 0.35
    stamp = "dask_gpu_exporter_last_sample_timestamp_seconds"
    elapsed = value(later, stamp, worker="w0") - value(back, stamp, worker="w0")
    assert value(later, tensor, **gpu1) - value(back, tensor, **gpu1) == pytest.approx(
        0.5 * elapsed, abs=0.06)


@pytest.mark.parametrize(
    ("init_error", "needle"),
    [(9, "kernel driver is not loaded"), (18, "versions differ")],
)
def test_nvml_init_failure_is_one_line_and_exit_3(fake_nvml, init_error, needle):
    fake_nvml.init_error = init_error
    fake_nvml.write()
    result = exporter_process("--listen", f"127.0.0.1:{free_port()}", env=fake_nvml.env)
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "--simulate" in lines[0]
    assert "Traceback" not in result.stderr


def test_no_nvml_library_at_all():
    result = exporter_process("--listen", f"127.0.0.1:{free_port()}", env=no_nvml_env())
    assert result.returncode == 3
    assert "libnvidia-ml.so.1" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["--interval", "soon"], "--interval"), (["--listen", "nowhere"], "HOST:PORT"),
     (["--config", "/nonexistent.yaml"], "cannot read config file")],
)
def test_bad_options_exit_2_with_one_line(fake_nvml, args, needle):
    result = exporter_process(*args, env=fake_nvml.env)
    assert result.returncode == 2
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_listen_address_in_use(fake_nvml):
    port = free_port()
    with sidecar("--worker", "w0", env=fake_nvml.env, port=port):
        result = exporter_process("--listen", f"127.0.0.1:{port}", env=fake_nvml.env)
    assert result.returncode == 1 and "cannot listen" in result.stderr


def test_config_file_and_environment(fake_nvml, tmp_path):
    config = tmp_path / "exporter.yaml"
    config.write_text("worker: from-file\ngpus: '1'\ndask-cluster: file-cluster\n")
    env = {**fake_nvml.env, "DASK_METRICS_EXPORTER_WORKER": "from-env",
           "DASK_METRICS_CLUSTER": "env-cluster"}
    with sidecar("--config", str(config), env=env) as base:
        s = scrape(base + "/metrics").of_cluster("env-cluster")
    assert set(values(s, "dask_gpu_up")) == {
        tuple(sorted(gpu_labels(fake_nvml, 1, worker="from-env", position=0).items()))}


def test_selection_by_cuda_visible_devices_and_uuid(fake_nvml):
    env = {**fake_nvml.env, "CUDA_VISIBLE_DEVICES": "1,0"}
    with sidecar("--worker", "w0", env=env) as base:
        # no worker-info file to learn dask_cluster from: the host name
        s = scrape(base + "/metrics").of_cluster(socket.gethostname())
    # dask-cuda's rotated list: the worker's own device is the first
    assert list(values(s, "dask_gpu_up")) == [
        tuple(sorted(gpu_labels(fake_nvml, 1, position=0).items()))]
    with sidecar("--worker", "w0", "--gpus", "all", env=env) as base:
        s = scrape(base + "/metrics").of_cluster(socket.gethostname())
    assert value(s, "dask_gpu_up", **gpu_labels(fake_nvml, 1, position=0)) == 1
    assert value(s, "dask_gpu_up", **gpu_labels(fake_nvml, 0, position=1)) == 1
    with sidecar("--worker", "w0", "--gpus", fake_nvml.uuid(1), env=env) as base:
        s = scrape(base + "/metrics").of_cluster()
    assert list(values(s, "dask_gpu_up")) == [
        tuple(sorted(gpu_labels(fake_nvml, 1, position=0).items()))]


def test_mig_slice_selected_by_uuid(fake_nvml):
    fake_nvml.gpus[0] = FakeGPU(mig=[FakeMIG(memory_used=3 * GiB), FakeMIG()])
    fake_nvml.write()
    mig = fake_nvml.uuid(0, 1)
    with sidecar("--worker", "w0", "--gpus", mig, env=fake_nvml.env) as base:
        s = scrape(base + "/metrics")
    labels = {"worker": "w0", "gpu": "0", "uuid": mig}
    assert value(s, "dask_gpu_up", **labels) == 1
    assert value(s, "dask_gpu_memory_used_bytes", **labels) == 0
    assert value(s, "dask_gpu_memory_total_bytes", **labels) > 0
    assert not values(s, "dask_gpu_utilization_ratio", **labels)  # NVML: not on MIG slices
    (info,) = values(s, "dask_gpu_info", **labels)
    assert dict(info)["pci_bus_id"] == "00000000:01:00.0"  # the parent GPU's


def test_worker_info_file_written_after_start(fake_nvml, tmp_path):
    path = tmp_path / "shared" / "worker.json"
    path.parent.mkdir()
    fake_nvml.gpus[1].processes = [(4242, 5 * GiB)]
    fake_nvml.write()
    with sidecar("--worker-info-file", str(path), *FAST, env=clean_env(fake_nvml.env)) as base:
        assert not values(scrape(base + "/metrics"), "dask_gpu_up")  # only the worker's GPUs
        identity = WorkerIdentity("w-9", "tcp://10.1.2.3:40000", 4242, "node-a",
                                  (GpuRef(0, fake_nvml.uuid(1)),), cluster="c-1")
        write_info_file(path, identity)
        labels = {"worker": "w-9", "gpu": "0", "uuid": fake_nvml.uuid(1)}
        s = wait_for(lambda: (s := scrape(base + "/metrics"))
                     and values(s, "dask_gpu_up", **labels) and s, what="the worker's GPU")
    assert len(values(s, "dask_gpu_up")) == 1
    assert value(s, "dask_gpu_process_memory_used_bytes", **labels, pid="4242") == 5 * GiB
    (info,) = values(s, "dask_gpu_info", **labels)
    assert dict(info)["hostname"] == "node-a"
    assert s.clusters() == {"c-1"}  # the worker's dask_cluster, from the file


def test_simulated_gpus_are_labelled(fake_nvml):
    with sidecar("--simulate", "3", "--worker", "sim", env=fake_nvml.env) as base:
        s = scrape(base + "/metrics")
        status, body = http_get(base + "/healthz")
        assert http_get(base + "/nope")[0] == 404
    info = values(s, "dask_gpu_info", worker="sim")
    assert len(info) == 3 and all(dict(k)["simulated"] == "true" for k in info)
    assert status == 200 and body.startswith("ok")


def test_tls(fake_nvml, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    with sidecar("--worker", "w0", "--tls-cert-file", str(cert), "--tls-key-file", str(key),
                 env=fake_nvml.env, ca_file=str(cert)) as base:
        status, text = http_get(base + "/metrics", ca_file=str(cert))
        assert status == 200 and "dask_gpu_up" in text
        with pytest.raises(OSError):  # plain HTTP gets no answer from a TLS port
            http_get(base.replace("https://", "http://") + "/metrics")
    result = exporter_process("--tls-cert-file", str(cert), "--tls-key-file", str(cert),
                          "--listen", f"127.0.0.1:{free_port()}", env=fake_nvml.env)
    assert result.returncode == 2 and "TLS" in result.stderr
