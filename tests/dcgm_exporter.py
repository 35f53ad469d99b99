"""A stand-in for NVIDIA's dcgm-exporter 4.0-4.8.2, which needs DCGM and a GPU: its pages
rendered as its ``rendermetrics`` template renders them, from scripted GPUs whose truth
the test knows.

Faithful to the source (docs/research/dcgm-exporter.md, which cites the file of each
rule): families in ascending DCGM field id, ``# HELP``/``# TYPE`` verbatim from the
counters file, the labels ``gpu, UUID, pci_bus_id, device, modelName[, GPU_I_PROFILE,
GPU_I_ID], Hostname``, then the label-type fields sorted, then the pod attributes sorted
(only on a GPU allocated to a pod); integers as ``%d``, doubles as ``%f``; a blank value
is no line, a family without any no family; no timestamps; one trailing newline.
``old_namespace`` is ``--use-old-namespace`` (``uuid``, ``pod_name``…), ``hostname_label``
"hostname" the spelling of 4.8.3 on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Value = float | int | None
"""A field's reading; None: blank (DCGM's sentinel), which dcgm-exporter leaves out."""


@dataclass(frozen=True)
class Field:
    """A row of dcgm-exporter's counters file, with DCGM's field id and value type."""

    id: int
    name: str
    kind: str  # gauge, counter or label
    help: str
    double: bool = False  # DCGM_FT_DOUBLE: printed with six decimals


# The active rows of etc/default-counters.csv (4.5.3-4.8.2), which
# dcp-metrics-included.csv (the GPU Operator's) repeats.
DEFAULT_COUNTERS = (
    Field(100, "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    Field(101, "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    Field(140, "DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    Field(150, "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    Field(155, "DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", double=True),
    Field(156, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
          "Total energy consumption since boot (in mJ)."),
    Field(202, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    Field(203, "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    Field(204, "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    Field(206, "DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    Field(207, "DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    Field(230, "DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    Field(251, "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    Field(252, "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    Field(253, "DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    Field(449, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
          "Total number of NVLink bandwidth counters for all lanes."),
    Field(526, "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    Field(393, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
          "Number of remapped rows for uncorrectable errors"),
    Field(394, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
          "Number of remapped rows for correctable errors"),
    Field(395, "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    Field(1, "DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
    Field(1001, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge",
          "Ratio of time the graphics engine is active.", double=True),
    Field(1004, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
          "Ratio of cycles the tensor (HMMA) pipe is active.", double=True),
    Field(1005, "DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
          "Ratio of cycles the device memory interface is active sending or receiving data.",
          double=True),
    Field(1009, "DCGM_FI_PROF_PCIE_TX_BYTES", "gauge",
          "The rate of data transmitted over the PCIe bus - including both protocol headers "
          "and data payloads - in bytes per second."),
    Field(1010, "DCGM_FI_PROF_PCIE_RX_BYTES", "gauge",
          "The rate of data received over the PCIe bus - including both protocol headers and "
          "data payloads - in bytes per second."),
)

# Rows the counters file has commented out: a cluster enables them by editing it.
SM_ACTIVE = Field(1002, "DCGM_FI_PROF_SM_ACTIVE", "gauge",
                  "The ratio of cycles an SM has at least 1 warp assigned.", double=True)
SM_OCCUPANCY = Field(1003, "DCGM_FI_PROF_SM_OCCUPANCY", "gauge",
                     "The ratio of number of warps resident on an SM.", double=True)

_OLD_NAMES = {"pod": "pod_name", "namespace": "pod_namespace", "container": "container_name"}


@dataclass(frozen=True)
class Entity:
    """A GPU as dcgm-exporter monitors it: a whole GPU, or one MIG GPU instance of it
    (``profile`` such as "1g.10gb", ``instance`` its NVML GPU-instance id), whose ``gpu``,
    ``uuid`` and device are the parent's. ``pod``: the pod it is allocated to (pod,
    namespace, container), none for a GPU no pod holds."""

    gpu: int
    uuid: str
    pci_bus_id: str = ""
    model: str = "NVIDIA A100-SXM4-80GB"
    profile: str | None = None
    instance: int | None = None
    pod: Mapping[str, str] = field(default_factory=dict)


def render(readings: Sequence[tuple[Entity, Mapping[str, Value]]], *,
           hostname: str = "gpu-node-1", driver: str = "570.133.20",
           fields: Sequence[Field] = DEFAULT_COUNTERS, hostname_label: str = "Hostname",
           old_namespace: bool = False) -> str:
    """The /metrics page of ``readings`` (each entity, in DCGM's order, with {field name:
    value}; a field it lacks is blank)."""
    labels = {f.name: driver for f in fields if f.kind == "label"}
    out: list[str] = []
    for f in sorted((f for f in fields if f.kind != "label"), key=lambda f: f.id):
        lines = [_sample(f, value, _labels(entity, f, hostname, hostname_label, labels,
                                           old_namespace))
                 for entity, values in readings if (value := values.get(f.name)) is not None]
        if lines:
            out += [f"# HELP {f.name} {f.help}", f"# TYPE {f.name} {f.kind}", *lines]
    return "".join(line + "\n" for line in out)


def _labels(entity: Entity, f: Field, hostname: str, hostname_label: str,
            labels: Mapping[str, str], old_namespace: bool) -> str:
    """A sample's labels, in the template's order; values unescaped, as it writes them."""
    pairs = [("gpu", str(entity.gpu)), ("uuid" if old_namespace else "UUID", entity.uuid),
             ("pci_bus_id", entity.pci_bus_id), ("device", f"nvidia{entity.gpu}"),
             ("modelName", entity.model)]
    if entity.profile:
        pairs += [("GPU_I_PROFILE", entity.profile), ("GPU_I_ID", str(entity.instance))]
    if hostname:
        pairs.append((hostname_label, hostname))
    pairs += sorted(labels.items())
    attributes = {(_OLD_NAMES.get(k, k) if old_namespace else k): v
                  for k, v in entity.pod.items()}
    if f.name == "DCGM_FI_DEV_XID_ERRORS":
        attributes |= {"err_code": "0", "err_msg": "No Error"}
    pairs += sorted(attributes.items())
    return ",".join(f'{k}="{v}"' for k, v in pairs)


def _sample(f: Field, value: float | int, labels: str) -> str:
    """A sample line: ``%f`` for DCGM's doubles, ``%d`` for its integers."""
    text = f"{float(value):f}" if f.double else f"{int(value):d}"
    return f"{f.name}{{{labels}}} {text}"


class DcgmExporter:
    """dcgm-exporter's HTTP server on 127.0.0.1: ``/metrics`` is ``page()`` at each
    scrape, ``/health`` "OK"; the headers Go's net/http sends for a handler that sets only
    X-Content-Type-Options."""

    def __init__(self, page: Callable[[], str]) -> None:
        self.page = page
        self.scrapes = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics":
                    owner.scrapes += 1
                    body, status = owner.page().encode(), 200
                elif self.path == "/health":
                    body, status = b"OK", 200
                else:
                    body, status = b"404 page not found\n", 404
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.target = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> DcgmExporter:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
