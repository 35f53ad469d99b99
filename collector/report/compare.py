"""This run against the last (pure): each job of a report beside the job of the same name in
an earlier report (report.json's dict), with the change of wall time, GPU-hours, peak memory
and energy.

Jobs are matched by name, the k-th job of a name with the earlier k-th of that name (a
pipeline that runs ``etl`` twice compares each run with its counterpart); unnamed jobs are
matched the same way in their order, as ``job`` (their ids are the scheduler's counter and
do not repeat across sessions). A job on one side only is listed as such.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dask_metrics.collector.errors import UsageError

FIGURES = (("wall_seconds", "wall time"), ("gpu_hours", "GPU-hours"),
           ("peak_bytes", "peak memory"), ("energy_joules", "energy"))
"""(report.json key, words): what is compared per job."""
BASELINE_KEYS = ("report_version", "session", "jobs")


class BaselineError(UsageError, ValueError):
    """An earlier report that cannot be compared with (what is wrong, in words): bad input
    to the command line, a ValueError to Python callers."""


def check_baseline(body: Any, source: str) -> Mapping[str, Any]:
    """``body`` if it is a session report's dict, else BaselineError naming ``source``."""
    if not isinstance(body, Mapping) or any(k not in body for k in BASELINE_KEYS) \
            or not isinstance(body["session"], Mapping) or not isinstance(body["jobs"], list) \
            or not all(isinstance(j, Mapping) for j in body["jobs"]):
        raise BaselineError(f"{source} is not a dask-metrics report.json (no "
                            f"{', '.join(BASELINE_KEYS)})")
    return body


def _number(value: Any) -> float | None:
    """A figure of a report, None where it has none (or a hand-edited file has no number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def figures(job: Mapping[str, Any]) -> dict[str, float | None]:
    seconds = _number(job.get("gpu_seconds"))
    peak = job.get("peak")
    return {"wall_seconds": _number(job.get("wall_seconds")),
            "gpu_hours": None if seconds is None else seconds / 3600,
            "peak_bytes": _number(peak.get("peak_bytes")) if isinstance(peak, Mapping) else None,
            "energy_joules": _number(job.get("energy_joules"))}


def _keys(jobs: Sequence[Mapping[str, Any]]) -> list[tuple[str, int]]:
    """(name, k): the k-th job of that name (``job`` for the unnamed)."""
    seen: dict[str, int] = {}
    out = []
    for job in jobs:
        name = str(job.get("job_name") or "job")
        seen[name] = seen.get(name, 0) + 1
        out.append((name, seen[name]))
    return out


def change(now: float | None, before: float | None) -> dict[str, float | None]:
    """Both values, the difference and the relative change (%): None where a side has no
    value, and the relative change None from 0."""
    diff = None if now is None or before is None else now - before
    rel = None if diff is None or not before else round(diff / before * 100, 1)
    return {"now": _rounded(now), "before": _rounded(before),
            "change": _rounded(diff), "change_percent": rel}


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _label(job: Mapping[str, Any]) -> str:
    return str(job.get("job_label") or job.get("job"))


def compare(report: Mapping[str, Any], baseline: Mapping[str, Any], source: str
            ) -> dict[str, Any]:
    """report.json's ``baseline``: where the earlier numbers come from, that session, and
    per job of this report its figures beside the earlier job's."""
    before = dict(zip(_keys(baseline["jobs"]), baseline["jobs"], strict=True))
    now = dict(zip(_keys(report["jobs"]), report["jobs"], strict=True))
    jobs = []
    for key, job in now.items():
        if key not in before:
            continue
        old = before[key]
        mine, theirs = figures(job), figures(old)
        jobs.append({"job_name": job.get("job_name"), "job_label": _label(job),
                     "baseline_job_label": _label(old),
                     "status": job.get("status"), "baseline_status": old.get("status"),
                     **{k: change(mine[k], theirs[k]) for k, _ in FIGURES}})
    s = baseline["session"]
    return {"source": source, "cluster": s.get("cluster"), "since": s.get("since"),
            "until": s.get("until"),
            "jobs": jobs,
            "only_now": [{"job_name": j.get("job_name"), "job_label": _label(j)}
                         for k, j in now.items() if k not in before],
            "only_before": [{"job_name": j.get("job_name"), "job_label": _label(j)}
                            for k, j in before.items() if k not in now]}
