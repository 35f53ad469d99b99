"""A fake ``libnvidia-ml.so.1`` for tests: built here from NVIDIA's ``nvml.h``, scripted per test.

The real ``pynvml`` binding (nvidia-ml-py) loads the fake unmodified, through its ordinary
``CDLL("libnvidia-ml.so.1")``; nothing is monkeypatched. The C source is
``tests/fake_nvml/fake_nvml.c``; it is compiled against the header of the ``nvidia-nvml-dev``
package, so the compiler checks every prototype against NVIDIA's.

GPU state lives in a text file named by ``$FAKE_NVML_STATE``; the library re-reads it when
the file's inode, mtime or size change, so tests rewrite it (atomically) while a process runs.
State file format (one statement per line, ``#`` comments; full reference atop the C file)::

    driver_version 550.54.15            # globals: driver_version, nvml_version,
    init_error 0                        #   cuda_driver_version, init_error, epoch
    epoch 1700000000.5
    gpu 0 uuid GPU-00000000-0000-0000-0000-000000000000
    gpu 0 memory_used 1073741824        # any FakeGPU field, same name
    gpu 0 processes 1234:1048576,5678:0 # pid:bytes list, "-" for none
    gpu 0 unsupported GetPowerUsage     # calls that return NVML_ERROR_NOT_SUPPORTED
    mig 0 1 uuid MIG-...                # MIG child 1 of GPU 0 (FakeMIG fields)
    at 2.0 gpu 0 memory_used 8589934592 # from epoch + 2 s on (latest t <= now wins)
    at 1.0 gpu 0 lost 1                 # GPU lost from 1 s ...
    at 4.0 gpu 0 lost 0                 # ... and back at 4 s
    at 0.5 init_error 9                 # globals can be scripted too (not epoch)

Energy: ``energy_mj`` is the counter's value when it is set (at ``epoch`` for the static
value, at ``epoch + t`` for a timeline entry). With ``energy_follows_power`` (the default) the
counter then grows by ``power_mw`` times elapsed seconds, following power changes on the
timeline, like a real GPU's; set it False for a constant counter.

Memory: ``memory_used`` is allocated memory (``used`` of ``nvmlDeviceGetMemoryInfo_v2``); the
v1 call reports ``used = memory_used + memory_reserved``, as real NVML does.

Usage::

    lib_dir = build_fake_nvml(tmp_dir)
    fake = FakeNVML(tmp_dir / "nvml_state", lib_dir)       # two A100s by default
    fake.gpus[1].unsupported.add("GetPowerUsage")
    fake.at(2.0, 0, memory_used=60 * GiB)                  # spike from t=2 s ...
    fake.at(3.0, 0, memory_used=1 * GiB)                   # ... to t=3 s
    fake.write()
    subprocess.run([...], env=fake.env)                    # or load_in_process(lib_dir)
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("fake_nvml") / "fake_nvml.c"
LIBRARY_NAME = "libnvidia-ml.so.1"
GiB = 1024**3
MiB = 1024**2

#: Names accepted in ``unsupported`` (each makes that call return NVML_ERROR_NOT_SUPPORTED).
UNSUPPORTED_NAMES = frozenset(
    {
        "GetName",
        "GetUUID",
        "GetPciInfo",
        "GetMemoryInfo",  # v1 and v2
        "GetMemoryInfo_v2",  # v2 only
        "GetUtilizationRates",
        "GetPowerUsage",
        "GetTotalEnergyConsumption",
        "GetTemperature",  # nvmlDeviceGetTemperature and ...V
        "GetTemperatureV",  # ...V only
        "GetClockInfo",
        "GetComputeRunningProcesses",
        "GetGraphicsRunningProcesses",
        "GetMigMode",  # also: max MIG device count 0
    }
)

# A few nvmlReturn_t values, so tests need not import pynvml to script errors.
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_UNKNOWN = 999


class FakeNVMLBuildError(RuntimeError):
    """The fake library cannot be built here (missing compiler or header)."""


def find_nvml_header() -> Path:
    """Locate ``nvml.h`` from the installed ``nvidia-nvml-dev`` package (newest CUDA first)."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec else []
    headers = sorted(
        (h for root in roots for h in Path(root).glob("*/include/nvml.h")),
        key=lambda p: p.parent.parent.name,
        reverse=True,
    )
    if not headers:
        raise FakeNVMLBuildError(
            "nvml.h not found: the fake NVML library is built from NVIDIA's header; "
            "pip install nvidia-nvml-dev"
        )
    return headers[0]


def build_fake_nvml(out_dir: Path) -> Path:
    """Compile the fake library (cached by source and header) and return its directory.

    The directory holds only ``libnvidia-ml.so.1``, ready for ``LD_LIBRARY_PATH``.
    """
    header = find_nvml_header()
    compiler = shutil.which("gcc")
    if compiler is None:
        raise FakeNVMLBuildError("gcc not found: the fake NVML library is C; apt-get install gcc")
    flags = ["-shared", "-fPIC", "-O2", "-Wall", "-Wmissing-prototypes", "-Werror",
             f"-I{header.parent}", f"-Wl,-soname,{LIBRARY_NAME}"]  # fmt: skip
    key = SOURCE.read_bytes() + "\0".join([str(header), *flags]).encode()
    lib_dir = Path(out_dir) / f"fake-nvml-{hashlib.sha256(key).hexdigest()[:16]}"
    target = lib_dir / LIBRARY_NAME
    if target.exists():
        return lib_dir
    lib_dir.mkdir(parents=True, exist_ok=True)
    tmp = lib_dir / f".{LIBRARY_NAME}.{os.getpid()}.tmp"
    cmd = [compiler, *flags, "-o", str(tmp), str(SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise FakeNVMLBuildError(f"building the fake NVML failed: {' '.join(cmd)}\n{proc.stderr}")
    os.replace(tmp, target)  # atomic: concurrent builders (xdist) never see half a library
    return lib_dir


def load_in_process(lib_dir: Path) -> ctypes.CDLL:
    """Load the fake into this process so that pynvml's ``CDLL("libnvidia-ml.so.1")`` gets it.

    The dynamic loader matches an already loaded object by soname, so pynvml's later dlopen
    by bare name returns this library without searching ``LD_LIBRARY_PATH`` (which the
    loader reads only at process start). Raises if another libnvidia-ml was loaded first.
    """
    lib = ctypes.CDLL(str(Path(lib_dir).resolve() / LIBRARY_NAME), mode=ctypes.RTLD_GLOBAL)
    by_soname = ctypes.CDLL(LIBRARY_NAME)
    if by_soname._handle != lib._handle:
        raise RuntimeError(f"another {LIBRARY_NAME} is already loaded in this process")
    return lib


def _uuid(kind: str, n: int) -> str:
    return f"{kind}-00000000-0000-0000-0000-{n:012x}"


@dataclass
class _Activities:
    """GPM activities in percent (a MIG child's: its GPU instance's, read through the parent);
    nvmlGpmMetricsGet returns their exact means between two samples."""

    sm_active: float = 0.0
    sm_occupancy: float = 0.0
    tensor_active: float = 0.0
    dram_active: float = 0.0
    fp64_active: float = 0.0
    fp32_active: float = 0.0
    fp16_active: float = 0.0


@dataclass
class FakeMIG(_Activities):
    """One MIG child (compute instance) of a FakeGPU: own UUID, name and memory."""

    uuid: str = ""  # filled from position when empty
    name: str = "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
    memory_total: int = 9728 * MiB
    memory_used: int = 0
    memory_reserved: int = 0
    gpu_instance_id: int = 0
    compute_instance_id: int = 0
    processes: list[tuple[int, int]] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False


@dataclass
class FakeGPU(_Activities):
    """One scripted GPU; the defaults are an idle A100 80 GB. Field names are file keys."""

    uuid: str = ""  # filled from the index when empty: GPU-00000000-0000-0000-0000-00000000000N
    name: str = "NVIDIA A100-SXM4-80GB"
    pci_bus_id: str = ""  # filled from the index when empty: 00000000:{index+1:02X}:00.0
    pci_device_id: int = 0x20B210DE
    memory_total: int = 80 * GiB
    memory_used: int = 0
    memory_reserved: int = 512 * MiB
    gpu_util: int = 0
    memory_util: int = 0
    power_mw: int = 60_000
    energy_mj: int = 1_000_000
    energy_follows_power: bool = True
    temperature_c: int = 35
    sm_clock_mhz: int = 1410
    mem_clock_mhz: int = 1593
    processes: list[tuple[int, int]] = field(default_factory=list)
    graphics_processes: list[tuple[int, int]] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False
    mig_mode: int | None = None  # None: enabled when `mig` is not empty
    mig: list[FakeMIG] = field(default_factory=list)
    # GPM (Hopper and newer): off on the default A100
    gpm: bool = False


_GPU_KEYS = frozenset(f.name for f in dataclasses.fields(FakeGPU)) - {"mig"}
_MIG_KEYS = frozenset(f.name for f in dataclasses.fields(FakeMIG))
_GLOBAL_TIMELINE_KEYS = frozenset({"driver_version", "nvml_version", "cuda_driver_version",
                                   "init_error"})  # fmt: skip


def _format(key: str, value: Any) -> str:
    """Render one value in the state file's syntax."""
    if key in ("processes", "graphics_processes"):
        return ",".join(f"{int(pid)}:{int(used)}" for pid, used in value) or "-"
    if key == "unsupported":
        names = set(value)
        unknown = names - UNSUPPORTED_NAMES
        if unknown:
            raise ValueError(f"unknown unsupported call(s) {sorted(unknown)}")
        return ",".join(sorted(names)) or "-"
    if key == "mig_mode":
        return "auto" if value is None else str(int(value))
    if key == "init_error":
        return str(int(value or 0))
    if isinstance(value, bool):
        return "1" if value else "0"
    text = str(value)
    if "\n" in text or "\r" in text or text != text.strip() or not text:
        raise ValueError(f"{key}: value {value!r} must be one non-empty line without edge spaces")
    return text


@dataclass
class _Entry:
    t: float
    gpu: int | None
    mig: int | None
    key: str
    value: object


class FakeNVML:
    """The scripted state of one fake NVML: GPUs, globals and a timeline, written to a file.

    Mutate ``gpus`` and the attributes, add timeline entries with ``at()``, then ``write()``;
    hand ``env`` to subprocesses (or ``load_in_process`` plus ``FAKE_NVML_STATE``).
    """

    def __init__(
        self,
        state_path: Path,
        lib_dir: Path,
        gpus: int | Iterable[FakeGPU] = 2,
        *,
        epoch: float | None = None,
    ) -> None:
        self.state_path = Path(state_path)
        self.lib_dir = Path(lib_dir)
        self.gpus: list[FakeGPU] = (
            [FakeGPU() for _ in range(gpus)] if isinstance(gpus, int) else list(gpus)
        )
        self.driver_version = "550.54.15"
        self.nvml_version = "12.550.54.15"
        self.cuda_driver_version = 12040
        self.init_error: int | None = None
        self.epoch: float = time.time() if epoch is None else epoch
        self.timeline: list[_Entry] = []
        self._last_mtime_ns = 0

    def at(self, t: float, gpu_index: int | None, *, mig_index: int | None = None,
           **fields: object) -> FakeNVML:  # fmt: skip
        """Script ``fields`` to take effect ``t`` seconds after ``epoch`` (until a later entry).

        ``gpu_index`` None scripts globals (init_error, driver_version, ...); ``mig_index``
        targets a MIG child. Returns self, so calls chain.
        """
        allowed = (
            _GLOBAL_TIMELINE_KEYS if gpu_index is None
            else _MIG_KEYS if mig_index is not None else _GPU_KEYS
        )  # fmt: skip
        for key, value in fields.items():
            if key not in allowed:
                raise ValueError(f"{key!r} cannot be scripted here; allowed: {sorted(allowed)}")
            _format(key, value)  # validate now, not at write()
            self.timeline.append(_Entry(float(t), gpu_index, mig_index, key, value))
        return self

    def render(self) -> str:
        """The state file's text."""
        lines = [
            f"driver_version {_format('driver_version', self.driver_version)}",
            f"nvml_version {_format('nvml_version', self.nvml_version)}",
            f"cuda_driver_version {int(self.cuda_driver_version)}",
            f"init_error {_format('init_error', self.init_error)}",
            f"epoch {self.epoch!r}",
        ]
        for i, gpu in enumerate(self.gpus):
            values = dataclasses.asdict(gpu)
            values["uuid"] = gpu.uuid or _uuid("GPU", i)
            values["pci_bus_id"] = gpu.pci_bus_id or f"00000000:{i + 1:02X}:00.0"
            values.pop("mig")
            lines += [f"gpu {i} {k} {_format(k, v)}" for k, v in values.items()]
            for j, mig in enumerate(gpu.mig):
                mvalues = dataclasses.asdict(mig)
                mvalues["uuid"] = mig.uuid or _uuid("MIG", i * 16 + j)
                lines += [f"mig {i} {j} {k} {_format(k, v)}" for k, v in mvalues.items()]
        for e in self.timeline:
            where = (
                "" if e.gpu is None else f"gpu {e.gpu} " if e.mig is None
                else f"mig {e.gpu} {e.mig} "
            )  # fmt: skip
            lines.append(f"at {e.t!r} {where}{e.key} {_format(e.key, e.value)}")
        return "\n".join(lines) + "\n"

    def uuid(self, gpu_index: int, mig_index: int | None = None) -> str:
        """The UUID the fake reports for a GPU or MIG child (defaults filled in)."""
        gpu = self.gpus[gpu_index]
        if mig_index is None:
            return gpu.uuid or _uuid("GPU", gpu_index)
        return gpu.mig[mig_index].uuid or _uuid("MIG", gpu_index * 16 + mig_index)

    def write(self) -> Path:
        """Write the state file atomically; a running fake sees the change at its next call.

        The mtime is forced to increase, so a rewrite is detected even when the new file
        reuses a freed inode within the filesystem's timestamp granularity.
        """
        text = self.render()
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".nvml_state.", dir=self.state_path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            mtime = max(time.time_ns(), self._last_mtime_ns + 1)
            os.utime(tmp, ns=(mtime, mtime))
            self._last_mtime_ns = mtime
            os.replace(tmp, self.state_path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return self.state_path

    @property
    def env(self) -> dict[str, str]:
        """``os.environ`` plus LD_LIBRARY_PATH (fake first) and FAKE_NVML_STATE, for Popen."""
        env = dict(os.environ)
        old = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = str(self.lib_dir) + (f":{old}" if old else "")
        env["FAKE_NVML_STATE"] = str(self.state_path)
        return env
