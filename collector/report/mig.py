"""The MIG slices of the GPU a job ran on that would hold what it needs (pure): the advice
"a smaller GPU" names other models, which a cluster of H200s does not have; a MIG slice of
the GPUs it has is what it can ask for. The profiles come from mig_profiles.csv, shipped
with the package."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

GIB = 2**30
GB = 10**9
SAME_SIZE = 0.06
"""A GPU is a table row's size when its memory (NVML's total) is within this share of the
row's nominal GiB: an H100 of 80 (79.6 GiB), 94 (93.6) or 96 (95.6) is told apart."""


@dataclass(frozen=True)
class MigGpu:
    """A GPU model that offers MIG: a word of its NVML name, its nominal memory, and its
    GPU instance profiles, the smallest first, the whole GPU's left out."""

    family: str
    memory_gib: float
    profiles: tuple[str, ...]


def load_mig(text: str) -> list[MigGpu]:
    """A table of MIG profiles in mig_profiles.csv's format."""
    lines = [line for line in io.StringIO(text) if not line.startswith("#")]
    return [MigGpu(r["family"], float(r["memory_gib"]), tuple(r["profiles"].split()[:-1]))
            for r in csv.DictReader(lines)]


@cache
def shipped_mig() -> tuple[MigGpu, ...]:
    """The table shipped with the package, read once."""
    return tuple(load_mig(resources.files("dask_metrics.collector.report").joinpath(
        "mig_profiles.csv").read_text(encoding="utf-8")))


def slice_bytes(profile: str) -> int:
    """The memory a profile's name gives (``1g.18gb``: 18 GB of 10^9 bytes): nominal, the
    slice's share of the GPU rounded; what a process can use is a little less, which the
    headroom covers, as for whole GPUs."""
    return round(float(profile.rsplit(".", 1)[1].removesuffix("gb")) * GB)


def mig_gpu(table: Sequence[MigGpu], name: str | None, capacity: float | None,
            uuid: str | None = None) -> MigGpu | None:
    """The row of the GPU called ``name`` in NVML with ``capacity`` bytes (None: it offers
    no MIG the table knows, or it is a MIG slice already: its capacity is the slice's)."""
    if not name or not capacity or (uuid or "").startswith("MIG-") \
            or re.search(r"\bMIG\b", name):
        return None
    size = capacity / GIB
    rows = [r for r in table if re.search(rf"(?<!\w){re.escape(r.family)}(?!\w)", name)
            and abs(size - r.memory_gib) <= SAME_SIZE * r.memory_gib]
    return min(rows, key=lambda r: abs(size - r.memory_gib), default=None)


def smallest_slices(gpu: MigGpu, need: float) -> list[str]:
    """The profiles of the smallest memory that holds ``need`` bytes (all of that size:
    ``1g.35gb`` and ``2g.35gb``, the second with more SMs); none where only the whole GPU
    does."""
    fitting = [p for p in gpu.profiles if slice_bytes(p) >= need]
    if not fitting:
        return []
    least = min(map(slice_bytes, fitting))
    return [p for p in fitting if slice_bytes(p) == least]
