"""The session report as data (pure): every number on the page, in report.json's shape.

``build`` turns what ``gatherer.Gatherer`` folded of the workers (a ``tally.Tally``), the
export's jobs.csv rows and the optional "where the time went" rows into the report's dict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from dask_metrics.collector.attribution.usage import (
    IDLE_PERCENT,
)
from dask_metrics.collector.model.lifetimes import clock, job_order, life, plain, qualify
from dask_metrics.collector.model.series import WorkerInfo, id_key
from dask_metrics.collector.model.timespec import format_rfc3339
from dask_metrics.collector.report.advice import GpuModel, recommendations
from dask_metrics.collector.report.figures import (
    PEAK_KEYS,
    UseSum,
    device_key,
    num,
)
from dask_metrics.collector.report.headline import headline, title_words
from dask_metrics.collector.report.tally import Tally, WorkerFacts, listed

REPORT_VERSION = 4  # 3: a title in words, the headline figures, a baseline; 4: GPUs listed


def _status(statuses: Iterable[str]) -> str:
    """A job's outcome from its DAGs': erred if one erred, finished if all did."""
    found = [s for s in statuses if s] or ["unknown"]
    if "erred" in found:
        return "erred"
    if all(s == "finished" for s in found):
        return "finished"
    return next(s for s in found if s != "finished")


def _seconds_of(text: str | None) -> float | None:
    """Unix seconds of an RFC 3339 time (jobs.csv's ``*_time`` columns), None if not one."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _wall(rows: Sequence[Mapping[str, str]], use: Mapping[str, Any]) -> dict[str, Any]:
    """Wall time: from jobs.csv's first and last seen where the export has them (the
    scheduler's view), else the first and last GPU interval attributed to it."""
    firsts = [s for r in rows if (s := _seconds_of(r.get("first_seen_time"))) is not None]
    lasts = [s for r in rows if (s := _seconds_of(r.get("last_seen_time"))) is not None]
    if firsts and lasts:
        begin, end, source = min(firsts), max(lasts), "jobs.csv (scheduler)"
    elif use["seen_first"] and use["seen_last"]:
        begin, end = _seconds_of(use["seen_first"]), _seconds_of(use["seen_last"])
        source = "GPU samples of the workers that ran it"
    else:
        return {"wall_seconds": None, "start": None, "end": None, "wall_source": None}
    assert begin is not None and end is not None
    return {"wall_seconds": num(end - begin), "start": format_rfc3339(round(begin * 1000)),
            "end": format_rfc3339(round(end * 1000)), "wall_source": source}


# ---- the report ------------------------------------------------------------------------------


def _gpus(info: WorkerInfo, capacity: Mapping[tuple[str, str], float | None],
          labels: Mapping[tuple[str, str, str], Mapping[str, str]]) -> list[dict[str, Any]]:
    out = []
    for gpu, uuid in info.gpus:
        found = labels.get((info.name, gpu, uuid), {})
        out.append({"gpu": gpu, "uuid": uuid, "model": found.get("name") or None,
                    "capacity_bytes": num(capacity.get((gpu, uuid))),
                    "simulated": found.get("simulated") == "true"})
    return out


def build(session: Mapping[str, Any], facts: Tally | Sequence[WorkerFacts],
          gpu_labels: Mapping[tuple[str, str, str], Mapping[str, str]],
          jobs_rows: Sequence[Mapping[str, str]] | None, models: Sequence[GpuModel],
          headroom: float, where: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """report.json's dict. ``session``: cluster, range and provenance; ``facts``: every
    worker's, folded (a Tally) or not; ``gpu_labels``: dask_gpu_info's labels by (worker,
    gpu, uuid); ``jobs_rows``: jobs.csv's rows, None where the export has none;
    ``where``: the export's activities.csv and gpu_by_prefix.csv rows (each None where it
    wrote none; ``build._where``), with ``rows_in_export``: how many each file has."""
    tally = facts if isinstance(facts, Tally) else Tally.of(facts)
    workers = [{"worker": info.name, "hosts": info.hosts, "addresses": info.addresses,
                "gpus": _gpus(info, capacity, gpu_labels)} for info, capacity in tally.workers]
    seen_by: dict[str, list[str]] = {}
    devices: dict[str, dict[str, Any]] = {}  # one GPU is one GPU, however many workers see it
    for w in workers:
        for g in w["gpus"]:
            key = device_key(w["worker"], g["gpu"], g["uuid"])
            devices.setdefault(key, g)
            seen_by.setdefault(key, []).append(w["worker"])
    gpus = list(devices.values())
    simulated = sum(g["simulated"] for g in gpus)
    highest = tally.gpus.highest
    body: dict[str, Any] = {
        "report_version": REPORT_VERSION,
        "session": {**session, "workers": workers, "worker_count": len(workers),
                    "gpu_count": len(gpus),
                    "shared_gpus": [{"uuid": d, "workers": ws} for d, ws in seen_by.items()
                                    if len(ws) > 1] or None,
                    "simulated": "all" if gpus and simulated == len(gpus)
                    else "some" if simulated else "none",
                    "jobs_source": "jobs.csv" if jobs_rows is not None else None,
                    "rmm": {"workers_with_pool": sorted(tally.pooled),
                            "workers_tracked": sorted(tally.tracked)} if tally.pooled else None,
                    "usage": tally.use.entry(),
                    "peak": None if highest is None else {k: highest[k] for k in PEAK_KEYS}},
        "rules": {"headroom": headroom, "idle_below_percent": IDLE_PERCENT,
                  "gpus_listed": tally.most,
                  "attribution": "a GPU's interval between two samples belongs to what its "
                  "worker ran at the later sample; intervals longer than max_age are gaps; "
                  "the intervals across the range's start and end count with the share of "
                  "their time inside it"},
        "jobs": _jobs(tally, jobs_rows),
        "where_the_time_went": dict(where or {"activities": None, "gpu_by_prefix": None,
                                              "rows_in_export": {}}),
        "plots": [],
    }
    body["recommendations"] = recommendations(body, tally.gpus, models, headroom)
    body["session"]["title"] = title_words(body)
    body["headline"] = headline(body)
    body["baseline"] = None
    return body


def _label(key: str, keys: Sequence[str]) -> str:
    """How the report calls a job's id: ``3``, or ``3 (scheduler of 07:12:03)`` where a
    restarted scheduler numbered another job of ``keys`` 3 too."""
    ident = plain(key)
    if not any(k != key and plain(k) == ident for k in keys):
        return ident
    return f"{ident} (scheduler of {clock(life(key))})"


def _jobs(tally: Tally, rows: Sequence[Mapping[str, str]] | None) -> list[dict[str, Any]]:
    """Per job by id (each DAG within it): its use, its listed GPUs and peaks, its outcome
    and wall time from jobs.csv's ``rows``."""
    by_dag_rows = {(qualify(r.get("job", ""), r.get("scheduler_start", "")), r.get("dag", "")): r
                   for r in rows or ()}
    dags: dict[str, list[str]] = {}
    for job, dag in sorted({*tally.dags, *by_dag_rows},
                           key=lambda d: (job_order(d[0]), id_key(d[1]))):
        dags.setdefault(job, []).append(dag)
    keys = list(dags)
    empty = UseSum().entry()
    out = []
    for job, mine in dags.items():
        job_rows = [by_dag_rows[(job, d)] for d in mine if (job, d) in by_dag_rows]
        found = tally.jobs.get(job)
        if found is not None:
            found.settle()
        use = found.use.entry() if found is not None else empty
        peaks, peak = listed(found.peaks) if found is not None else ([], None)
        listed_gpus = list(found.per_gpu) if found is not None else []
        entry = {"job": plain(job), "scheduler_start": life(job) or None,
                 "job_label": _label(job, keys),
                 "job_name": next((r.get("job_name") for r in job_rows
                                   if r.get("job_name")), None),
                 "status": _status(r.get("status", "") for r in job_rows) if job_rows
                 else "unknown", **_wall(job_rows, use), **use,
                 "peaks": peaks, "peaks_omitted": found.peaks.omitted if found else 0,
                 "per_gpu": listed_gpus,
                 "per_gpu_omitted": found.per_gpu.omitted if found else 0,
                 "idle_gpus": found.idle_gpus if found else 0,
                 "peak": peak,
                 "peak_held_bytes": num(found.held) if found and found.held_known else None,
                 "dags": []}
        for d in mine:
            row = by_dag_rows.get((job, d))
            dag = tally.dags.get((job, d))
            dag_use = dag.use.entry() if dag is not None else empty
            peaks, peak = listed(dag.peaks) if dag is not None else ([], None)
            entry["dags"].append({
                "dag": d, "status": (row or {}).get("status") or "unknown",
                **_wall([row] if row else [], dag_use), **dag_use, "peaks": peaks,
                "peaks_omitted": dag.peaks.omitted if dag is not None else 0, "peak": peak})
        out.append(entry)
    return out
