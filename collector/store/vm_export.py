"""VictoriaMetrics' ``/api/v1/export``, pure: the series of its answer.

Its raw samples come out as they are stored, a JSON line per series and block, for about a
fifth of the time its query API takes to hand out the same samples as a matrix
(docs/benchmarks.md, "How raw samples are read"). VictoriaMetrics drops a NaN when it ingests it,
so a NaN it holds is a staleness marker, which its queries skip: it is left out here too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import orjson

CONTENT_TYPE = "application/stream+json"


class ExportError(ValueError):
    """An answer that is not export's JSON lines."""


def export_series(content: bytes) -> Iterator[tuple[dict[str, str], list[int], list[float]]]:
    """(labels, ms times, values) of each line of an export answer, in time order, NaN
    (staleness markers) left out."""
    for line in content.splitlines():
        if not line.strip():
            continue
        try:
            row, strict = orjson.loads(line), True
        except orjson.JSONDecodeError:
            row, strict = _lenient(line), False
        try:
            labels = {str(k): str(v) for k, v in row["metric"].items()}
            times, values = row["timestamps"], row["values"]
            if len(times) != len(values):
                raise ValueError("unequal lengths")
            if not strict or None in values:
                kept = [(t, v) for t, v in zip(times, values, strict=True) if not _nan(v)]
                times, values = [t for t, _ in kept], [v for _, v in kept]
            times, values = list(map(int, times)), list(map(float, values))
            if times != sorted(times):
                order = sorted(range(len(times)), key=times.__getitem__)
                times, values = [times[i] for i in order], [values[i] for i in order]
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ExportError("a line without metric, values and timestamps") from None
        yield labels, times, values


def _lenient(line: bytes) -> dict:
    """A line whose numbers strict JSON refuses: a staleness marker is written NaN, the
    infinities +Inf and -Inf (in the numbers after the labels, never in them)."""
    at = line.rfind(b'"values":[')
    numbers = line[at:].replace(b"+Inf", b"Infinity").replace(b"-Inf", b"-Infinity")
    try:
        row = json.loads(line[:max(at, 0)] + numbers)
    except ValueError:
        raise ExportError("a line that is not JSON") from None
    if not isinstance(row, dict):
        raise ExportError("a line that is not a series")
    return row


def _nan(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
