"""The rows of "where the time went" (the export's activities.csv and gpu_by_prefix.csv) that
a report keeps (pure): the largest, as the page ranks them. A fleet's day is millions of
such rows (DAGs x task prefixes x activities); report.json keeps ``ROWS_KEPT`` of each file
and says how many the export wrote."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dask_metrics.collector.report.listed import Listed

SIZE = {"activities": "value", "gpu_by_prefix": "gpu_seconds"}  # each file's size column
ROWS_KEPT = 1000


def size(row: Mapping[str, Any], key: str) -> float:
    """A row's size (its file's own text; not a number: 0)."""
    try:
        return float(row.get(SIZE[key]))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0


def rank(row: Mapping[str, Any], key: str) -> tuple[bool, float]:
    """Larger first: activities in seconds before those in other units, which do not compare
    with them; then by size."""
    return row.get("unit", "seconds") == "seconds", size(row, key)


def largest(rows: Iterable[dict[str, str]], key: str, most: int = ROWS_KEPT
            ) -> tuple[list[dict[str, str]], int]:
    """The ``most`` largest of ``rows`` in their order, and how many rows there were."""
    kept: Listed[dict[str, str]] = Listed(most)
    for row in rows:
        kept.offer(rank(row, key), row)
    return list(kept), kept.offered
