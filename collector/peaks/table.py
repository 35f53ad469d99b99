"""Peaks as people read them: the table ``collector peaks`` prints, and one line per reason a
peak is only a bound."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from dask_metrics.collector.model.timespec import format_rfc3339
from dask_metrics.collector.peaks.peak import Peak, gib_text


def _peak_cell(p: Peak) -> str:
    """The peak as a table shows it: ``>= 2.00 GiB`` where it is a lower bound, ``<= ...``
    where nothing inside the range was sampled (see Peak.caveat)."""
    if p.exact is not False or math.isnan(p.peak_bytes):
        return gib_text(p.peak_bytes)
    return ("<= " if p.upper_bytes == p.peak_bytes else ">= ") + gib_text(p.peak_bytes)


def _named(items: Sequence[str]) -> str:
    return ", ".join(items[:5]) + (f" and {len(items) - 5} more" if len(items) > 5 else "")


def caveats(found: Iterable[Peak]) -> list[str]:
    """One line per reason some peaks are only bounds, naming their GPUs, and one per GPU
    that several workers see (its memory is the device's, whoever held it): for stderr and
    warnings (the table marks bounds, the JSON says ``exact``)."""
    by_reason: dict[str, list[str]] = {}
    seen_by: dict[str, list[str]] = {}
    for p in found:
        if reason := p.caveat():
            by_reason.setdefault(reason, []).append(f"{p.worker} GPU {p.gpu}")
        workers = seen_by.setdefault(p.uuid, [])
        if p.uuid and p.worker not in workers:
            workers.append(p.worker)
    lines = [f"peak of {_named(gpus)}: {reason}" for reason, gpus in by_reason.items()]
    lines += [f"{uuid} is seen by {_named(workers)}: its peak is the whole device's (every "
              "process on it, whichever worker held the memory), listed under each"
              for uuid, workers in seen_by.items() if len(workers) > 1]
    return lines


def format_table(found: Sequence[Peak]) -> str:
    """A plain aligned table for a terminal; ``during``: the job (and DAG) by name."""
    header = ["worker", "gpu", "uuid", "peak", "total", "peak %", "time", "during"]
    lines = [header] + [
        [p.worker, p.gpu, p.uuid, _peak_cell(p), gib_text(p.total_bytes),
         "" if p.peak_percent is None else f"{p.peak_percent:.2f}", format_rfc3339(p.time),
         p.phase] for p in found]
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in lines)
