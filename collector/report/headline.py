"""The report's first screen in numbers (pure): the session's headline figures and its
title in words, derived from report.json's own session and job numbers, so that the first
screen and the tables below it can never disagree."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

TITLE_JOBS = 3  # job names in a title; more are counted


def _hours(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 3600, 4)


def headline(report: Mapping[str, Any]) -> dict[str, Any]:
    """GPU-hours held and busy, mean utilisation, the highest peak memory against its GPU's
    capacity, energy, and the GPU-hours idle: below the idle threshold while a job held the
    GPU, plus held while no job ran (the jobs' GPU seconds count each device once, as the
    session's do)."""
    use = report["session"]["usage"]
    in_jobs = sum(j.get("gpu_seconds") or 0 for j in report["jobs"])
    idle = use.get("idle_gpu_seconds") or 0
    without = max(0.0, (use.get("gpu_seconds") or 0) - in_jobs)
    return {"gpu_hours_held": _hours(use.get("gpu_seconds")),
            "gpu_hours_busy": _hours(use.get("busy_seconds")),
            "mean_utilization_percent": use.get("mean_utilization_percent"),
            "peak": report["session"].get("peak"),
            "energy_joules": use.get("energy_joules"), "energy_kwh": use.get("energy_kwh"),
            "energy_note": use.get("energy_note"),
            "idle_gpu_hours": _hours(idle + without),
            "idle_in_jobs_gpu_hours": _hours(idle), "without_job_gpu_hours": _hours(without)}


def job_name(job: Mapping[str, Any]) -> str:
    """A job as people call it: its name, else ``job 3``."""
    return job.get("job_name") or f"job {job.get('job_label') or job['job']}"


def duration_words(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def _when(since: float, until: float) -> str:
    """``26 Nov 2026 05:00-05:10 UTC``; both dates where the range crosses midnight."""
    a = datetime.fromtimestamp(since, timezone.utc)
    b = datetime.fromtimestamp(until, timezone.utc)
    day = f"{a.day} {a:%b %Y}"
    if a.date() == b.date():
        return f"{day} {a:%H:%M}-{b:%H:%M} UTC"
    return f"{day} {a:%H:%M} UTC to {b.day} {b:%b %Y} {b:%H:%M} UTC"


def title_words(report: Mapping[str, Any]) -> str:
    """``etl and train on rep, 26 Nov 2026 05:00-05:10 UTC, 10 min``."""
    s = report["session"]
    names = list(dict.fromkeys(job_name(j) for j in report["jobs"]))
    if not names:
        what = "No jobs"
    elif len(names) <= TITLE_JOBS:
        what = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    else:
        what = f"{', '.join(names[:TITLE_JOBS])} and {len(names) - TITLE_JOBS} more jobs"
    where = f" on {s['cluster']}" if s.get("cluster") else ""
    return (f"{what}{where}, {_when(s['since_unix'], s['until_unix'])}, "
            f"{duration_words(s['duration_seconds'])}")
