"""The building blocks of the report's layout (pure): tables, sections, and numbers with
their units, as both the page and the terminal show them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GIB = 2**30
NONE = "-"  # no value


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    numeric: set[int] = field(default_factory=set)  # right-aligned columns
    shown: int | None = None  # rows shown before the rest is folded away


@dataclass
class Section:
    title: str
    level: int = 2
    anchor: str = ""
    banner: str | None = None
    figures: list[tuple[str, str, str]] = field(default_factory=list)  # (label, value, detail)
    notes: list[str] = field(default_factory=list)
    table: Table | None = None
    items: list[str] = field(default_factory=list)
    more_items: list[str] = field(default_factory=list)  # folded away
    images: list[tuple[str, str]] = field(default_factory=list)  # (chart, caption)


# ---- numbers with units ------------------------------------------------------------------------


def gib(value: float | None) -> str:
    return NONE if value is None else f"{value / GIB:.2f} GiB"


def seconds(value: float | None) -> str:
    if value is None:
        return NONE
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value:.0f} s ({value / 60:.1f} min)"
    return f"{value:.0f} s ({value / 3600:.2f} h)"


def percent(value: float | None) -> str:
    return NONE if value is None else f"{value:.1f} %"


def energy(use: Mapping[str, Any]) -> str:
    if use.get("energy_joules") is None:
        return "not reported"
    return f"{use['energy_joules']:,.0f} J ({use['energy_kwh']:.4f} kWh)"


def peak_text(peak: Mapping[str, Any] | None) -> str:
    if not peak:
        return NONE
    return (f"{gib(peak['peak_bytes'])} ({percent(peak['peak_percent'])} of "
            f"{gib(peak['capacity_bytes'])}) on {peak['worker']} GPU {peak['gpu']} at "
            f"{peak['time']}")


def name(job: Mapping[str, Any]) -> str:
    return job.get("job_name") or NONE


def ref(job: Mapping[str, Any]) -> str:
    """The job's id, with its scheduler's start where a restart reused the id."""
    return str(job.get("job_label") or job["job"])


def gpu_hours(value: float | None, minutes: bool = False) -> str:
    """GPU time, in GPU-hours (``minutes``: in GPU-minutes, for sessions under an hour)."""
    if value is None:
        return NONE
    return f"{value * 60:,.1f} GPU-min" if minutes else f"{value:,.2f} GPU-h"
