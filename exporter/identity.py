"""Who a Dask worker is, as the worker preload publishes it.

The identity travels two ways: to the scheduler in the worker's ``startup_information``
(it lands in ``WorkerState.extra[STARTUP_KEY]``), and to a sidecar exporter through a
small JSON file on a shared volume, so the sidecar can label its series with the
worker's name and its cluster's (``dask_cluster``) and keep only the worker's GPUs.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from dask_metrics.atomicfile import atomic_write_text
from dask_metrics.configfile import read_small_file

STARTUP_KEY = "dask_metrics"


def worker_label(name: object, address: str) -> str:
    """The ``worker`` label of every series: the worker's name, else its address."""
    if name is None or name == "":
        return address
    return str(name)


@dataclass(frozen=True)
class GpuRef:
    """One GPU of a worker: its index among the worker's visible GPUs and its UUID."""

    index: int
    uuid: str


@dataclass(frozen=True)
class WorkerIdentity:
    name: str
    address: str
    pid: int
    host: str
    gpus: tuple[GpuRef, ...] = field(default_factory=tuple)
    # The dask_cluster label: in the worker-info file, the value the worker uses ("" until
    # it knows it); to the scheduler, the worker's own setting ("" when it has none).
    cluster: str = ""
    # Where the worker's GPU series are served (its own /metrics or a sidecar's), for the
    # scheduler's /dask-metrics/targets; "" where nowhere is known.
    metrics_url: str = ""

    @property
    def label(self) -> str:
        return worker_label(self.name, self.address)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = [asdict(g) for g in self.gpus]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerIdentity:
        """Parse a published identity; raises ValueError on anything malformed."""
        try:
            gpus = tuple(GpuRef(int(g["index"]), _utf8(g["uuid"]))
                         for g in data.get("gpus", ()))
            return cls(
                name=_utf8(data.get("name") or ""),
                address=_utf8(data["address"]),
                pid=int(data["pid"]),
                host=_utf8(data.get("host") or ""),
                gpus=gpus,
                cluster=_utf8(data.get("cluster") or ""),
                metrics_url=_utf8(data.get("metrics_url") or ""),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:  # pid: Infinity
            raise ValueError(f"malformed worker identity: {exc!r}") from None


def write_info_file(path: str | os.PathLike[str], identity: WorkerIdentity) -> None:
    """Publish the identity for a sidecar; atomic so a sidecar never reads half a file."""
    atomic_write_text(path, json.dumps(identity.to_dict(), indent=2) + "\n")


def _utf8(value: object) -> str:
    """Text that encodes as UTF-8: JSON may carry a lone surrogate ("\\udcff"), which would
    fail every scrape's encoding."""
    text = str(value)
    text.encode("utf-8")  # UnicodeEncodeError is a ValueError
    return text


MAX_INFO_FILE_BYTES = 1 << 20  # a worker's identity is a few hundred bytes


def read_info_file(path: str | os.PathLike[str]) -> WorkerIdentity:
    """Read a worker-info file; raises OSError or ValueError with a readable message. Only
    a regular file of at most MAX_INFO_FILE_BYTES is read: a FIFO would block for good."""
    raw = read_small_file(path, MAX_INFO_FILE_BYTES)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{os.fspath(path)}: not JSON ({exc.msg})") from None
    except (UnicodeDecodeError, RecursionError):
        raise ValueError(f"{os.fspath(path)}: not JSON text") from None
    if not isinstance(data, dict):
        raise ValueError(f"{os.fspath(path)}: expected a JSON object")
    return WorkerIdentity.from_dict(data)

