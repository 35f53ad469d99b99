"""Scheduler lives in job keys: a restarted scheduler numbers its jobs, DAGs and sessions
from 0 again under the same cluster name, so a job id alone names two jobs across a restart.

The collector keys a job by its id and its scheduler's life (the ``scheduler_start`` label
of every job/DAG series): ``"3@1764140000.123"``. The key is what every table joins on; what
the outputs show is the id (``plain``) and, in its own column, the life (``life``). Series
of a preload older than the label have plain ids, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dask_metrics.collector.model.timespec import format_rfc3339
from dask_metrics.contract import JOB_ID, SCHEDULER_START

SEP = "@"


def job_key(labels: Mapping[str, str]) -> str:
    """The key of the job a series is about: its job id within its scheduler's life."""
    return qualify(labels.get(JOB_ID, ""), labels.get(SCHEDULER_START, ""))


def qualify(job: str, life: str) -> str:
    """``job`` of the scheduler life ``life`` ("" for idle or an unlabelled series: as is)."""
    return f"{job}{SEP}{life}" if job and life else job


def plain(key: str) -> str:
    """The job id as the scheduler numbered it (what outputs show)."""
    return key.partition(SEP)[0]


def life(key: str) -> str:
    """The scheduler life of a job key ("" without one)."""
    return key.partition(SEP)[2]


def started(life_label: str) -> float | None:
    """A life's start in unix seconds; None for "" or a value that is not a number."""
    try:
        return float(life_label) if life_label else None
    except ValueError:
        return None


def clock(life_label: str) -> str:
    """``07:12:03``: a life's start, UTC, to tell two lives apart in a label."""
    at = started(life_label)
    return life_label if at is None else format_rfc3339(round(at * 1000))[11:19]


def life_at(lives: Iterable[str], t: int) -> str:
    """The scheduler life in effect at ``t`` (ms): the last to start at or before it ("" for
    none). What tells a plain job id of a CSV row which job it is."""
    found = [(at, s) for s in lives if (at := started(s)) is not None and at * 1000 <= t]
    return max(found)[1] if found else ""


def job_order(key: str) -> tuple[str, int, int, str]:
    """Sort key: earlier scheduler lives first, then job ids as numbers ("2" before "10")."""
    ident, _, of = key.partition(SEP)
    return (of, 0, int(ident), "") if ident.isdigit() else (of, 1, 0, ident)


def restarts(keys: Iterable[str]) -> str:
    """A warning when ``keys`` come from more than one life of the scheduler, else ""."""
    lives = sorted(at for at in {started(life(k)) for k in keys} if at is not None)
    if len(lives) < 2:
        return ""
    when = ", ".join(format_rfc3339(round(at * 1000)) for at in lives[1:])
    return (f"the range spans {len(lives)} lives of the scheduler (restarted at {when}): job "
            "and DAG ids count from 0 again in each, and the scheduler_start column tells "
            "them apart")
