"""Which GPUs belong to a worker: pure parsing and matching, no NVML.

Tokens name devices the way CUDA does in ``CUDA_VISIBLE_DEVICES``: an NVML index (PCI bus
order, as nvidia-smi shows; set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so CUDA agrees), a
``GPU-…`` UUID, a ``MIG-…`` UUID, or a unique prefix of a UUID. Like CUDA, parsing stops
at the first token that names no device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Values that batch systems put in CUDA_VISIBLE_DEVICES to mean "no GPU at all".
_NO_DEVICE_VALUES = {"", "-1", "none", "nodevfiles", "void"}
ALL = "all"  # --gpus all: every device the process can see, not only its first


@dataclass(frozen=True)
class Candidate:
    """A device the process can see: its NVML index (None for MIG devices) and UUID."""

    nvml_index: int | None
    uuid: str


@dataclass(frozen=True)
class Selection:
    devices: tuple[Candidate, ...]
    unmatched: str | None = None  # the token where parsing stopped, if any


def split_tokens(spec: str) -> list[str]:
    """Tokens of a ``--gpus`` or ``CUDA_VISIBLE_DEVICES`` value; [] means no device."""
    if spec.strip().lower() in _NO_DEVICE_VALUES:
        return []
    return [t.strip() for t in spec.split(",")]


def owned(option: str | None, visible: str | None) -> str | None:
    """The spec of the GPUs a worker owns: ``option`` (``--gpus``) where given, else the
    first device of ``visible`` (``CUDA_VISIBLE_DEVICES``); None where neither says.

    dask-cuda gives every worker all of a node's GPUs, its own first (``"1,2,3,0"``), and
    distributed and dask-cuda take the first as the worker's: so does this. ``all`` keeps
    every device ``visible`` lists, or every GPU where it is unset."""
    if option is not None and option.strip().lower() == ALL:
        return visible
    if option is not None:
        return option
    if visible is None:
        return None
    return ",".join(split_tokens(visible)[:1])


def _match(token: str, candidates: Sequence[Candidate]) -> Candidate | None:
    if token.isdigit():
        index = int(token)
        return next((c for c in candidates if c.nvml_index == index), None)
    if not token.upper().startswith(("GPU-", "MIG-")):
        return None
    prefix = token.lower()
    hits = [c for c in candidates if c.uuid.lower().startswith(prefix)]
    exact = [c for c in hits if c.uuid.lower() == prefix]
    if exact:
        return exact[0]
    return hits[0] if len(hits) == 1 else None


def select(spec: str | None, candidates: Sequence[Candidate]) -> Selection:
    """Resolve ``spec`` against the visible devices; ``None`` selects every full GPU."""
    if spec is None:
        return Selection(tuple(c for c in candidates if c.nvml_index is not None))
    chosen: list[Candidate] = []
    for token in split_tokens(spec):
        device = _match(token, candidates)
        if device is None:
            return Selection(tuple(chosen), unmatched=token)
        if device not in chosen:
            chosen.append(device)
    return Selection(tuple(chosen))


def select_uuids(uuids: Sequence[str], candidates: Sequence[Candidate]) -> Selection:
    """Keep the devices a worker-info file names, in its order (its ``gpu`` numbering)."""
    return select(",".join(uuids) if uuids else "", candidates)
