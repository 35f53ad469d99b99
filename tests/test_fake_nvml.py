"""The fake libnvidia-ml answers the real pynvml binding exactly as scripted.

Most tests run pynvml in a fresh interpreter (LD_LIBRARY_PATH is only read at process start,
and each process gets its own NVML init state); one test loads the fake in-process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests import fake_nvml as fn
from tests.fake_nvml import FakeGPU, FakeMIG, FakeNVML, GiB, MiB

PRELUDE = """
import json, sys, time
import pynvml as nv

def err(func, *args, **kwargs):
    '''The NVMLError class name func raises, or None when it succeeds.'''
    try:
        func(*args, **kwargs)
    except nv.NVMLError as exc:
        return type(exc).__name__
    return None
"""


def run_pynvml(fake: FakeNVML, code: str, *, init: bool = True, timeout: float = 20) -> Any:
    """Run ``code`` with real pynvml against the fake in a subprocess; return its ``out``."""
    script = PRELUDE + ("nv.nvmlInit()\n" if init else "") + textwrap.dedent(code)
    script += "\nprint(json.dumps(out))\n"
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=fake.env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.integration
def test_identity_and_telemetry(fake_nvml: FakeNVML) -> None:
    """Every static field comes back through pynvml, per GPU."""
    g0, g1 = fake_nvml.gpus
    g0.energy_follows_power = False
    g1.uuid = "GPU-6b5a4d1e-1111-2222-3333-444455556666"
    g1.name = "NVIDIA H100 80GB HBM3"
    g1.pci_bus_id = "00000001:8A:00.0"
    g1.memory_total, g1.memory_used, g1.memory_reserved = 80 * GiB, 7 * GiB, 300 * MiB
    g1.gpu_util, g1.memory_util = 87, 41
    g1.power_mw, g1.energy_mj, g1.energy_follows_power = 312_345, 987_654_321, False
    g1.temperature_c, g1.sm_clock_mhz, g1.mem_clock_mhz = 71, 1980, 2619
    fake_nvml.driver_version, fake_nvml.cuda_driver_version = "535.183.01", 12020
    fake_nvml.write()
    out = run_pynvml(
        fake_nvml,
        """
        out = {"driver": nv.nvmlSystemGetDriverVersion(), "nvml": nv.nvmlSystemGetNVMLVersion(),
               "cuda": nv.nvmlSystemGetCudaDriverVersion_v2(),
               "count": nv.nvmlDeviceGetCount(), "gpus": []}
        for i in range(out["count"]):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            pci = nv.nvmlDeviceGetPciInfo(h)
            m1 = nv.nvmlDeviceGetMemoryInfo(h)
            m2 = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
            u = nv.nvmlDeviceGetUtilizationRates(h)
            out["gpus"].append({
                "index": nv.nvmlDeviceGetIndex(h), "name": nv.nvmlDeviceGetName(h),
                "uuid": nv.nvmlDeviceGetUUID(h), "bus_id": pci.busId, "domain": pci.domain,
                "bus": pci.bus, "m1": [m1.total, m1.used, m1.free],
                "m2": [m2.total, m2.reserved, m2.used, m2.free], "util": [u.gpu, u.memory],
                "power": nv.nvmlDeviceGetPowerUsage(h),
                "energy": nv.nvmlDeviceGetTotalEnergyConsumption(h),
                "temp": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                "temp_v": nv.nvmlDeviceGetTemperatureV(h, nv.NVML_TEMPERATURE_GPU),
                "sm": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                "mem": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            })
        """,
    )
    assert (out["driver"], out["nvml"], out["cuda"]) == ("535.183.01", "12.550.54.15", 12020)
    assert out["count"] == 2
    a, b = out["gpus"]
    assert (a["index"], a["name"], a["uuid"]) == (
        0,
        "NVIDIA A100-SXM4-80GB",
        "GPU-00000000-0000-0000-0000-000000000000",
    )
    assert a["bus_id"] == "00000000:01:00.0"
    assert a["m1"] == [80 * GiB, 512 * MiB, 80 * GiB - 512 * MiB]
    assert (a["power"], a["energy"], a["temp"], a["sm"], a["mem"]) == (
        60_000,
        1_000_000,
        35,
        1410,
        1593,
    )
    assert (b["index"], b["name"], b["uuid"]) == (1, g1.name, g1.uuid)
    assert (b["bus_id"], b["domain"], b["bus"]) == ("00000001:8A:00.0", 1, 0x8A)
    taken = 7 * GiB + 300 * MiB
    assert b["m1"] == [80 * GiB, taken, 80 * GiB - taken]  # v1 used includes reserved
    assert b["m2"] == [80 * GiB, 300 * MiB, 7 * GiB, 80 * GiB - taken]
    assert b["util"] == [87, 41]
    assert (b["power"], b["energy"], b["temp"], b["temp_v"]) == (312_345, 987_654_321, 71, 71)
    assert (b["sm"], b["mem"]) == (1980, 2619)


@pytest.mark.integration
def test_struct_versions_checked(fake_nvml: FakeNVML) -> None:
    """A wrong struct version is refused as real NVML does (v2 memory, TemperatureV)."""
    out = run_pynvml(
        fake_nvml,
        """
        from ctypes import byref
        h = nv.nvmlDeviceGetHandleByIndex(0)
        t = nv.c_nvmlTemperature_v1_t()
        t.version = 1
        raw = nv._nvmlGetFunctionPointer("nvmlDeviceGetTemperatureV")(h, byref(t))
        out = [err(nv.nvmlDeviceGetMemoryInfo, h, version=0x01000028), raw]
        """,
    )
    assert out == ["NVMLError_ArgumentVersionMismatch", 25]


@pytest.mark.integration
def test_handle_lookups(fake_nvml: FakeNVML) -> None:
    """Handles by UUID and PCI bus id (any spelling) are the GPUs'; unknown ones NotFound."""
    fake_nvml.gpus[1].pci_bus_id = "0000:3b:00.0"
    fake_nvml.write()
    out = run_pynvml(
        fake_nvml,
        """
        idx = lambda h: nv.nvmlDeviceGetIndex(h)
        out = [idx(nv.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000001")),
               idx(nv.nvmlDeviceGetHandleByPciBusId("00000000:3B:00.0")),
               idx(nv.nvmlDeviceGetHandleByPciBusId("3b:00.0")),
               idx(nv.nvmlDeviceGetHandleByPciBusId("00000000:01:00.0")),
               err(nv.nvmlDeviceGetHandleByUUID, "GPU-nope"),
               err(nv.nvmlDeviceGetHandleByPciBusId, "0000:99:00.0"),
               err(nv.nvmlDeviceGetHandleByIndex, 2)]
        """,
    )
    assert out == [1, 1, 1, 0, "NVMLError_NotFound", "NVMLError_NotFound",
                   "NVMLError_InvalidArgument"]  # fmt: skip


@pytest.mark.integration
def test_processes(fake_nvml: FakeNVML) -> None:
    """The two-call INSUFFICIENT_SIZE protocol pynvml drives returns every process."""
    many = [(10_000 + i, i * MiB) for i in range(40)]
    fake_nvml.gpus[0].processes = [(1234, 3 * GiB), (5678, 0)]
    fake_nvml.gpus[0].graphics_processes = [(42, 64 * MiB)]
    fake_nvml.gpus[1].processes = many
    fake_nvml.write()
    out = run_pynvml(
        fake_nvml,
        """
        procs = lambda ps: [[p.pid, p.usedGpuMemory, p.gpuInstanceId] for p in ps]
        h0, h1 = nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlDeviceGetHandleByIndex(1)
        out = [procs(nv.nvmlDeviceGetComputeRunningProcesses(h0)),
               procs(nv.nvmlDeviceGetGraphicsRunningProcesses(h0)),
               procs(nv.nvmlDeviceGetComputeRunningProcesses(h1)),
               procs(nv.nvmlDeviceGetGraphicsRunningProcesses(h1))]
        """,
    )
    no_mig = 0xFFFFFFFF
    assert out[0] == [[1234, 3 * GiB, no_mig], [5678, 0, no_mig]]
    assert out[1] == [[42, 64 * MiB, no_mig]]
    assert out[2] == [[pid, used, no_mig] for pid, used in many]
    assert out[3] == []


@pytest.mark.integration
def test_mig_children(fake_nvml: FakeNVML) -> None:
    """MIG children have their own UUID, name, memory and processes; no utilisation."""
    fake_nvml.gpus[1].mig = [
        FakeMIG(memory_used=1 * GiB, gpu_instance_id=1, compute_instance_id=0),
        FakeMIG(name="NVIDIA A100-SXM4-80GB MIG 3g.40gb", memory_total=40 * GiB,
                memory_used=2 * GiB, gpu_instance_id=2, processes=[(777, 2 * GiB)]),
    ]  # fmt: skip
    fake_nvml.write()
    mig_uuid = fake_nvml.uuid(1, 1)
    out = run_pynvml(
        fake_nvml,
        f"""
        h0, h1 = nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlDeviceGetHandleByIndex(1)
        m = nv.nvmlDeviceGetMigDeviceHandleByIndex(h1, 1)
        mem = nv.nvmlDeviceGetMemoryInfo(m, version=nv.nvmlMemory_v2)
        parent = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
        by_uuid = nv.nvmlDeviceGetHandleByUUID({mig_uuid!r})
        out = {{"modes": [nv.nvmlDeviceGetMigMode(h0), nv.nvmlDeviceGetMigMode(h1)],
               "max": [nv.nvmlDeviceGetMaxMigDeviceCount(h0),
                       nv.nvmlDeviceGetMaxMigDeviceCount(h1)],
               "uuids": [nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetMigDeviceHandleByIndex(h1, j))
                         for j in range(2)],
               "name": nv.nvmlDeviceGetName(m), "index": nv.nvmlDeviceGetIndex(m),
               "mem": [mem.total, mem.used], "is_mig": [nv.nvmlDeviceIsMigDeviceHandle(m).value,
                                                      nv.nvmlDeviceIsMigDeviceHandle(h1).value],
               "parent": nv.nvmlDeviceGetUUID(parent),
               "by_uuid": [nv.nvmlDeviceGetUUID(by_uuid),
                           nv.nvmlDeviceIsMigDeviceHandle(by_uuid).value],
               "gi": nv.nvmlDeviceGetGpuInstanceId(m),
               "procs": [[p.pid, p.usedGpuMemory, p.gpuInstanceId]
                         for p in nv.nvmlDeviceGetComputeRunningProcesses(m)],
               "errors": [err(nv.nvmlDeviceGetUtilizationRates, m),
                          err(nv.nvmlDeviceGetPowerUsage, m),
                          err(nv.nvmlDeviceGetMigDeviceHandleByIndex, h1, 2),
                          err(nv.nvmlDeviceGetMigDeviceHandleByIndex, h1, 7),
                          err(nv.nvmlDeviceGetMigDeviceHandleByIndex, h0, 0)]}}
        """,
    )
    assert out["modes"] == [[0, 0], [1, 1]]
    assert out["max"] == [0, 7]
    assert out["uuids"] == [fake_nvml.uuid(1, 0), mig_uuid]
    assert mig_uuid.startswith("MIG-")
    assert (out["name"], out["index"]) == ("NVIDIA A100-SXM4-80GB MIG 3g.40gb", 1)
    assert out["mem"] == [40 * GiB, 2 * GiB]
    assert out["is_mig"] == [1, 0]
    assert out["parent"] == fake_nvml.uuid(1)
    assert out["by_uuid"] == [mig_uuid, 1]
    assert out["gi"] == 2
    assert out["procs"] == [[777, 2 * GiB, 2]]
    assert out["errors"] == ["NVMLError_NotSupported", "NVMLError_NotSupported",
                             "NVMLError_NotFound", "NVMLError_InvalidArgument",
                             "NVMLError_InvalidArgument"]  # fmt: skip


GPM_READ = """
def gpm(first, second, ids):
    get = nv.c_nvmlGpmMetricsGet_t()
    get.version = nv.NVML_GPM_METRICS_GET_VERSION
    get.numMetrics = len(ids)
    get.sample1, get.sample2 = first, second
    for i, metric in enumerate(ids):
        get.metrics[i].metricId = metric
    nv.nvmlGpmMetricsGet(get)
    return [[get.metrics[i].nvmlReturn, get.metrics[i].value] for i in range(len(ids))]

def stamped(take):
    before = time.time() - EPOCH
    take()
    return [before, time.time() - EPOCH]
"""


@pytest.mark.integration
def test_gpm_exact_means(fake_nvml: FakeNVML) -> None:
    """GPM metrics are the exact mean of the scripted activity between two samples: across a
    timeline step, per MIG GPU instance; unsupported on the default A100, on MIG handles and
    for metric ids the fake does not script."""
    fake_nvml.epoch = time.time()
    g0, g1 = fake_nvml.gpus
    g0.gpm, g0.sm_active, g0.tensor_active, g0.fp16_active = True, 20.0, 0.0, 12.5
    fake_nvml.at(0.6, 0, sm_active=80.0, tensor_active=50.0)
    g1.gpm = True
    g1.mig = [FakeMIG(gpu_instance_id=3, sm_active=40.0), FakeMIG(gpu_instance_id=5)]
    fake_nvml.write()
    ids = "[nv.NVML_GPM_METRIC_SM_UTIL, nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL, " \
          "nv.NVML_GPM_METRIC_FP16_UTIL, nv.NVML_GPM_METRIC_PCIE_TX_PER_SEC]"
    prelude = GPM_READ.replace("EPOCH", repr(fake_nvml.epoch))
    out = run_pynvml(fake_nvml, prelude + textwrap.dedent(f"""
        h0, h1 = nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlDeviceGetHandleByIndex(1)
        a, b, c, d = (nv.nvmlGpmSampleAlloc() for _ in range(4))
        while time.time() - {fake_nvml.epoch!r} < 0.2:
            time.sleep(0.01)
        t1 = stamped(lambda: nv.nvmlGpmSampleGet(h0, a))
        m1 = stamped(lambda: nv.nvmlGpmMigSampleGet(h1, 3, c))
        while time.time() - {fake_nvml.epoch!r} < 1.2:
            time.sleep(0.01)
        t2 = stamped(lambda: nv.nvmlGpmSampleGet(h0, b))
        m2 = stamped(lambda: nv.nvmlGpmMigSampleGet(h1, 3, d))
        mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(h1, 0)
        out = {{"t": [t1, t2], "m": [m1, m2], "gpu": gpm(a, b, {ids}),
               "mig": gpm(c, d, {ids}),
               "support": [nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice
                           for h in (h0, h1, mig)],
               "errors": [err(nv.nvmlGpmSampleGet, mig, a),
                          err(nv.nvmlGpmMigSampleGet, h1, 9, a),
                          err(nv.nvmlGpmMigSampleGet, h0, 3, a),
                          err(gpm, a, c, [2])]}}
        for s in (a, b, c, d):
            nv.nvmlGpmSampleFree(s)
        """))

    def mean(rate_before: float, rate_after: float, start: float, end: float) -> float:
        step = min(max(0.6, start), end)
        return (rate_before * (step - start) + rate_after * (end - step)) / (end - start)

    (b1, a1), (b2, a2) = out["t"]
    s1, s2 = (b1 + a1) / 2, (b2 + a2) / 2
    (sm_rc, sm), (tensor_rc, tensor), (fp16_rc, fp16), (pcie_rc, _) = out["gpu"]
    assert (sm_rc, tensor_rc, fp16_rc) == (0, 0, 0) and pcie_rc != 0
    assert sm == pytest.approx(mean(20, 80, s1, s2), abs=0.2)
    assert tensor == pytest.approx(mean(0, 50, s1, s2), abs=0.2)
    assert 20 < sm < 80 and 0 < tensor < 50  # the step at 0.6 s fell between the samples
    assert fp16 == pytest.approx(12.5, abs=1e-9)  # constant: exact whatever the times
    assert [row[1] for row in out["mig"][:3]] == [pytest.approx(40.0), 0.0, 0.0]
    assert out["support"] == [1, 1, 1]
    assert out["errors"] == ["NVMLError_NotSupported", "NVMLError_NotFound",
                             "NVMLError_InvalidArgument", "NVMLError_InvalidArgument"]

    g0.gpm = False
    fake_nvml.write()
    out = run_pynvml(fake_nvml, """
        h0 = nv.nvmlDeviceGetHandleByIndex(0)
        out = [nv.nvmlGpmQueryDeviceSupport(h0).isSupportedDevice,
               err(nv.nvmlGpmSampleGet, h0, nv.nvmlGpmSampleAlloc())]
        """)
    assert out == [0, "NVMLError_NotSupported"]


@pytest.mark.integration
def test_unsupported_and_lost(fake_nvml: FakeNVML) -> None:
    """Unsupported calls raise NotSupported on that device only; a lost GPU still counts."""
    fake_nvml.gpus[0].unsupported = {"GetPowerUsage", "GetTemperature", "GetMemoryInfo_v2"}
    fake_nvml.gpus.append(FakeGPU(lost=True))
    fake_nvml.write()
    out = run_pynvml(
        fake_nvml,
        """
        h0, h1 = nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlDeviceGetHandleByIndex(1)
        out = [nv.nvmlDeviceGetCount(),
               err(nv.nvmlDeviceGetPowerUsage, h0), err(nv.nvmlDeviceGetTemperature, h0, 0),
               err(nv.nvmlDeviceGetTemperatureV, h0, 0),
               err(nv.nvmlDeviceGetMemoryInfo, h0, version=nv.nvmlMemory_v2),
               nv.nvmlDeviceGetMemoryInfo(h0).total, nv.nvmlDeviceGetUtilizationRates(h0).gpu,
               nv.nvmlDeviceGetPowerUsage(h1),
               err(nv.nvmlDeviceGetHandleByIndex, 2),
               err(nv.nvmlDeviceGetHandleByUUID, "GPU-00000000-0000-0000-0000-000000000002")]
        """,
    )
    assert out == [3, "NVMLError_NotSupported", "NVMLError_NotSupported",
                   "NVMLError_NotSupported", "NVMLError_NotSupported", 80 * GiB, 0, 60_000,
                   "NVMLError_GpuIsLost", "NVMLError_GpuIsLost"]  # fmt: skip


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (fn.NVML_ERROR_DRIVER_NOT_LOADED, "NVMLError_DriverNotLoaded"),
        (fn.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVMLError_LibRmVersionMismatch"),
    ],
)
@pytest.mark.integration
def test_init_error(fake_nvml: FakeNVML, code: int, error: str) -> None:
    """A scripted init error surfaces as pynvml's matching exception class."""
    fake_nvml.init_error = code
    fake_nvml.write()
    assert run_pynvml(fake_nvml, "out = err(nv.nvmlInit)", init=False) == error


@pytest.mark.integration
def test_missing_or_malformed_state(fake_nvml: FakeNVML) -> None:
    """No file: DriverNotLoaded. Garbage: Unknown, reported once on stderr, no crash."""
    fake_nvml.state_path.unlink()
    assert run_pynvml(fake_nvml, "out = err(nv.nvmlInit)", init=False) == (
        "NVMLError_DriverNotLoaded"
    )
    fake_nvml.state_path.write_text("gpu 0 uuid GPU-x\ngpu 0 memory_used lots\n")
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + "print(err(nv.nvmlInit), err(nv.nvmlInit))"],
        env=fake_nvml.env, capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    assert proc.stdout.split() == ["NVMLError_Unknown", "NVMLError_Unknown"]
    lines = [line for line in proc.stderr.splitlines() if "fake NVML" in line]
    assert len(lines) == 1 and "line 2" in lines[0] and "memory_used" in lines[0], proc.stderr


@pytest.mark.integration
def test_refcounted_init(fake_nvml: FakeNVML) -> None:
    """Init is reference counted; calls after the last shutdown are Uninitialized."""
    out = run_pynvml(
        fake_nvml,
        """
        nv.nvmlInit()
        nv.nvmlShutdown()
        still = nv.nvmlDeviceGetCount()
        nv.nvmlShutdown()
        out = [still, err(nv.nvmlDeviceGetCount), err(nv.nvmlSystemGetDriverVersion),
               err(nv.nvmlShutdown)]
        """,
    )
    assert out == [2, "NVMLError_Uninitialized", "NVMLError_Uninitialized",
                   "NVMLError_Uninitialized"]  # fmt: skip


POLL = """
epoch, deadline = {epoch!r}, time.time() + 15
h0, h1 = nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlDeviceGetHandleByIndex(1)
runs = []  # [value, first sample's end time, last sample's start time] per run of equal values
energy = []
while time.time() < deadline:
    before = time.time() - epoch
    m = nv.nvmlDeviceGetMemoryInfo(h0, version=nv.nvmlMemory_v2).used
    u = nv.nvmlDeviceGetUtilizationRates(h0).gpu
    lost = err(nv.nvmlDeviceGetUUID, h1)
    e = nv.nvmlDeviceGetTotalEnergyConsumption(h0)
    after = time.time() - epoch
    energy.append([before, after, e])
    value = [m, u, lost]
    if runs and runs[-1][0] == value:
        runs[-1][2] = before
    else:
        runs.append([value, after, before])
    if after > 1.9:
        break
    time.sleep(0.005)
out = {{"runs": runs, "energy": energy}}
"""


@pytest.mark.integration
def test_timeline(fake_nvml: FakeNVML) -> None:
    """Timeline entries take effect at epoch + t: a memory spike, a utilisation step, a GPU
    lost and back, energy following power. Every sample is checked against its time bounds."""
    fake_nvml.epoch = time.time()
    g0 = fake_nvml.gpus[0]
    g0.memory_used, g0.gpu_util, g0.power_mw = 1 * GiB, 100, 100_000
    fake_nvml.at(0.4, 1, lost=True).at(1.2, 1, lost=False)
    fake_nvml.at(0.8, 0, memory_used=60 * GiB)
    fake_nvml.at(1.6, 0, memory_used=1 * GiB, gpu_util=30, power_mw=250_000)
    fake_nvml.write()
    out = run_pynvml(fake_nvml, POLL.format(epoch=fake_nvml.epoch))

    lost = "NVMLError_GpuIsLost"
    windows = [  # (from, until, [memory used, utilisation, GPU 1 error])
        (0.0, 0.4, [1 * GiB, 100, None]),
        (0.4, 0.8, [1 * GiB, 100, lost]),
        (0.8, 1.2, [60 * GiB, 100, lost]),
        (1.2, 1.6, [60 * GiB, 100, None]),
        (1.6, 99.0, [1 * GiB, 30, None]),
    ]
    assert [run[0] for run in out["runs"]] == [w[2] for w in windows], out["runs"]
    for (start, until, _), (_, first_end, last_start) in zip(windows, out["runs"], strict=True):
        # the run's first sample ended after its window opened, its last began before it closed
        assert start <= first_end and last_start < until, (start, until, first_end, last_start)

    def energy(t: float) -> float:
        return 1_000_000 + 100_000 * min(t, 1.6) + 250_000 * max(t - 1.6, 0.0)

    assert len(out["energy"]) > 10
    for before, after, e in out["energy"]:
        assert energy(before) - 1 <= e <= energy(after) + 1, (before, after, e)


@pytest.mark.integration
def test_rewrite_seen_by_running_process(fake_nvml: FakeNVML) -> None:
    """A state rewrite (atomic replace) reaches a process that already initialised NVML."""
    script = PRELUDE + textwrap.dedent(
        """
        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(0)
        first = nv.nvmlDeviceGetName(h)
        print("ready", flush=True)
        deadline = time.time() + 10
        while nv.nvmlDeviceGetName(h) == first and time.time() < deadline:
            time.sleep(0.01)
        print(json.dumps([first, nv.nvmlDeviceGetName(h), nv.nvmlDeviceGetCount()]))
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", script],
        env=fake_nvml.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        fake_nvml.gpus[0].name = "NVIDIA H100 80GB HBM3"
        fake_nvml.gpus.append(FakeGPU())
        fake_nvml.write()
        stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr
    assert json.loads(stdout) == ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", 3]


@pytest.mark.integration
def test_in_process(fake_nvml: FakeNVML, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_in_process makes pynvml's CDLL("libnvidia-ml.so.1") the fake; rapid rewrites and
    a changed FAKE_NVML_STATE are seen at the next call."""
    import pynvml

    fn.load_in_process(fake_nvml.lib_dir)
    monkeypatch.setenv("FAKE_NVML_STATE", str(fake_nvml.state_path))
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(1)
        assert pynvml.nvmlDeviceGetUUID(handle) == fake_nvml.uuid(1)
        for used in range(1, 30):  # same size, quick succession: inode reuse must not hide it
            fake_nvml.gpus[1].memory_used = used
            fake_nvml.write()
            assert pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).used == used
        other = FakeNVML(tmp_path / "other_state", fake_nvml.lib_dir, gpus=5)
        other.write()
        monkeypatch.setenv("FAKE_NVML_STATE", str(other.state_path))
        assert pynvml.nvmlDeviceGetCount() == 5
    finally:
        pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


@pytest.mark.integration
def test_harness_env_and_validation(fake_nvml: FakeNVML, monkeypatch: pytest.MonkeyPatch) -> None:
    """env prepends the fake to LD_LIBRARY_PATH; bad scripts fail in Python, not in C."""
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/elsewhere")
    env = fake_nvml.env
    assert env["LD_LIBRARY_PATH"] == f"{fake_nvml.lib_dir}:/opt/elsewhere"
    assert env["FAKE_NVML_STATE"] == str(fake_nvml.state_path)
    with pytest.raises(ValueError, match="cannot be scripted"):
        fake_nvml.at(1.0, 0, colour="green")
    with pytest.raises(ValueError, match="unknown unsupported"):
        fake_nvml.at(1.0, 0, unsupported={"GetFanSpeed"})


def test_build_names_missing_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without gcc or nvml.h the build says what to install."""
    monkeypatch.setattr(fn.shutil, "which", lambda name: None)
    with pytest.raises(fn.FakeNVMLBuildError, match="apt-get install gcc"):
        fn.build_fake_nvml(tmp_path)
    monkeypatch.setattr(fn.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(fn.FakeNVMLBuildError, match="pip install nvidia-nvml-dev"):
        fn.build_fake_nvml(tmp_path)
