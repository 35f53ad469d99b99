"""The session report as data (pure): every number on the page, in report.json's shape.

``Gatherer`` is the export's ``visit``: it keeps, per worker, the GPU use per job and DAG
(``usage.gpu_usage``) and the peaks of ``peaks.gpu_peaks`` (the function ``collector peaks``
uses) on the same fetched series. ``build`` turns that, the export's jobs.csv rows and the
optional "where the time went" rows into the report's dict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from dask_metrics.collector.columns import select
from dask_metrics.collector.lifetimes import clock, job_order, life, plain, qualify
from dask_metrics.collector.peak import Peak
from dask_metrics.collector.peaks import peaks_over, window_keywords
from dask_metrics.collector.report.advice import GpuModel, recommendations
from dask_metrics.collector.report.edges import EDGE_COUNTERS, edge_usage
from dask_metrics.collector.report.figures import (
    PEAK_KEYS,
    device_key,
    held_bytes,
    num,
    peak_entry,
    use_entry,
)
from dask_metrics.collector.report.headline import headline, title_words
from dask_metrics.collector.report.usage import (
    ENERGY,
    IDLE_PERCENT,
    Usage,
    UsageKey,
    attribute,
    gpu_usage,
    total,
)
from dask_metrics.collector.series import NOTHING_RAN, Series, Timeline, WorkerInfo, id_key
from dask_metrics.collector.tables import WorkerTable, gpu_series
from dask_metrics.collector.timespec import format_rfc3339

REPORT_VERSION = 3  # 3: a title in words, the headline figures, a baseline
DAG_SEPARATOR = "/"  # job "3", DAG "1" -> "3/1": gpu_peaks grouped by DAG


@dataclass
class WorkerFacts:
    """What the report keeps of one worker: a few numbers per GPU and job, not samples."""

    info: WorkerInfo
    usage: dict[UsageKey, Usage]
    job_peaks: list[Peak]
    dag_peaks: list[Peak]
    gpu_peaks: list[Peak]
    metered: frozenset[tuple[str, str]] = frozenset()  # (gpu, uuid) with an energy counter


def dag_timeline(activity: Timeline) -> Timeline:
    """The worker's timeline with each state's job made "job/dag", so that ``gpu_peaks``'
    per-job grouping groups by DAG."""
    return Timeline(activity.times, [NOTHING_RAN if not job else (f"{job}{DAG_SEPARATOR}{dag}",
                                                                   dag)
                                     for job, dag in activity.states],
                    activity.exact, activity.memo)  # the same times: the same lookups


def job_peaks(dag_peaks: Iterable[Peak]) -> list[Peak]:
    """Per GPU and job, the largest of its DAGs' peaks (the first on a tie): what
    ``gpu_peaks(by_job=True)`` finds, without going over the samples again."""
    best: dict[tuple[str, str, str], Peak] = {}
    for p in dag_peaks:
        key = (p.gpu, p.uuid, p.job.split(DAG_SEPARATOR)[0])
        if key not in best or (p.peak_bytes, -p.time) > (best[key].peak_bytes, -best[key].time):
            best[key] = p
    return [replace(p, job=job) for (_, _, job), p in best.items()]


@dataclass
class Gatherer:
    """The export's ``visit``: reduces each worker to its WorkerFacts as it goes by."""

    columns: Sequence[str]
    max_age: int  # ms
    since: int  # ms: the peaks' range (see peaks.gpu_peaks)
    until: int  # ms
    peak_window: int  # ms: of exporters that do not say theirs
    windows: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # fetch.peak_windows'
    workers: list[WorkerFacts] = field(default_factory=list)

    def __call__(self, info: WorkerInfo, series: Mapping[str, list[Series]],
                 activity: Timeline, table: WorkerTable) -> None:
        by_dag, whole = peaks_over(
            info.name, series, [(dag_timeline(activity), True), (activity, False)],
            self.max_age, since=self.since, until=self.until,
            **window_keywords(self.windows.get(info.name, (self.peak_window, 0))))
        energy = list(self.columns).index(ENERGY) if ENERGY in self.columns else None
        metered = frozenset((g.gpu, g.uuid) for g in table.gpus if energy is not None and any(
            v is not None and v == v for v in g.columns[energy]))
        usage = gpu_usage(table, self.columns, self.max_age, activity)
        self._add_edges(usage, series, activity)
        self.workers.append(WorkerFacts(info, usage,
                                        job_peaks(by_dag), by_dag, whole, metered))


    def _add_edges(self, usage: dict[UsageKey, Usage], series: Mapping[str, list[Series]],
                   activity: Timeline) -> None:
        """The parts of the scrape intervals across the range's edges (edges.edge_usage),
        to what the worker ran then."""
        metrics = {c.metric: c.name for c in select([n for n in EDGE_COUNTERS
                                                     if n in self.columns])}
        for (gpu, uuid), samples in gpu_series({m: series.get(m, []) for m in metrics}).items():
            counters = {metrics[m]: found for m, found in samples.items()}
            for t, whole in edge_usage(counters, self.since, self.until, self.max_age):
                for (job, dag), part in attribute(whole, t, activity, self.max_age):
                    if not job:
                        part.idle = 0.0
                    usage.setdefault((job, dag, gpu, uuid), Usage()).add(part)


# ---- numbers for JSON ------------------------------------------------------------------------


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


def _gpus(facts: WorkerFacts, labels: Mapping[tuple[str, str, str], Mapping[str, str]]
          ) -> list[dict[str, Any]]:
    capacity = {(p.gpu, p.uuid): p.total_bytes for p in facts.gpu_peaks}
    out = []
    for gpu, uuid in facts.info.gpus:
        info = labels.get((facts.info.name, gpu, uuid), {})
        out.append({"gpu": gpu, "uuid": uuid, "model": info.get("name") or None,
                    "capacity_bytes": num(capacity.get((gpu, uuid))),
                    "simulated": info.get("simulated") == "true"})
    return out


def build(session: Mapping[str, Any], facts: Sequence[WorkerFacts],
          gpu_labels: Mapping[tuple[str, str, str], Mapping[str, str]],
          jobs_rows: Sequence[Mapping[str, str]] | None, models: Sequence[GpuModel],
          headroom: float, activities: Sequence[Mapping[str, str]] | None = None,
          gpu_by_prefix: Sequence[Mapping[str, str]] | None = None) -> dict[str, Any]:
    """report.json's dict. ``session``: cluster, range and provenance; ``gpu_labels``:
    dask_gpu_info's labels by (worker, gpu, uuid); ``jobs_rows``: jobs.csv's rows, None where
    the export has none; ``activities``/``gpu_by_prefix``: those files' rows, or None."""
    workers = [{"worker": f.info.name, "hosts": f.info.hosts, "addresses": f.info.addresses,
                "gpus": _gpus(f, gpu_labels)} for f in facts]
    seen_by: dict[str, list[str]] = {}
    devices: dict[str, dict[str, Any]] = {}  # one GPU is one GPU, however many workers see it
    for w in workers:
        for g in w["gpus"]:
            key = device_key(w["worker"], g["gpu"], g["uuid"])
            devices.setdefault(key, g)
            seen_by.setdefault(key, []).append(w["worker"])
    gpus = list(devices.values())
    simulated = sum(g["simulated"] for g in gpus)
    jobs = _jobs(facts, jobs_rows)
    per_gpu = _gpu_session_use(facts)
    body: dict[str, Any] = {
        "report_version": REPORT_VERSION,
        "session": {**session, "workers": workers, "worker_count": len(workers),
                    "gpu_count": len(gpus),
                    "shared_gpus": [{"uuid": d, "workers": ws} for d, ws in seen_by.items()
                                    if len(ws) > 1] or None,
                    "simulated": "all" if gpus and simulated == len(gpus)
                    else "some" if simulated else "none",
                    "jobs_source": "jobs.csv" if jobs_rows is not None else None,
                    "rmm": _rmm_session(facts), "usage": _session_use(facts),
                    "peak": _highest(per_gpu)},
        "rules": {"headroom": headroom, "idle_below_percent": IDLE_PERCENT,
                  "attribution": "a GPU's interval between two samples belongs to what its "
                  "worker ran at the later sample; intervals longer than max_age are gaps; "
                  "the intervals across the range's start and end count with the share of "
                  "their time inside it"},
        "jobs": jobs,
        "where_the_time_went": {"activities": list(activities) if activities is not None
                                else None,
                                "gpu_by_prefix": list(gpu_by_prefix)
                                if gpu_by_prefix is not None else None},
        "plots": [],
    }
    body["recommendations"] = recommendations(body, per_gpu, models, headroom)
    body["session"]["title"] = title_words(body)
    body["headline"] = headline(body)
    body["baseline"] = None
    return body


def _highest(per_gpu: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The session's highest peak against its GPU's capacity (its bytes on a tie, or where
    no capacity is known)."""
    best = max(per_gpu, key=lambda g: (g["peak_percent"] or 0, g["peak_bytes"] or 0),
               default=None)
    return None if best is None else {k: best[k] for k in PEAK_KEYS}


def _session_use(facts: Sequence[WorkerFacts]) -> dict[str, Any]:
    """The whole range's GPU use (jobs and the time between them), each device once."""
    merged: dict[tuple[str, str, str], Usage] = {}
    for f in facts:
        for (_, _, gpu, uuid), u in f.usage.items():
            merged.setdefault((f.info.name, gpu, uuid), Usage()).add(u)
    metered = frozenset((f.info.name, *g) for f in facts for g in f.metered)
    return use_entry(merged, metered, rmm_tracked(facts))


def _gpu_session_use(facts: Sequence[WorkerFacts]) -> list[dict[str, Any]]:
    """Per GPU over the whole session: its peak and how busy it was (for the advice); a
    device that several workers see once, as the first of them in worker order sees it."""
    out = []
    seen: set[str] = set()
    for f in facts:
        for p in f.gpu_peaks:
            key = device_key(f.info.name, p.gpu, p.uuid)
            if key in seen:
                continue
            seen.add(key)
            mine = {k: u for k, u in f.usage.items() if (k[2], k[3]) == (p.gpu, p.uuid)}
            whole = total(mine)
            out.append({**peak_entry(p), "gpu_seconds": num(whole.seconds),
                        "mean_utilization_percent":
                        num(whole.busy / whole.seconds * 100, 2) if whole.seconds else None,
                        "job": plain(p.job) or None, "job_label": _label(p.job, ())})
    return out


def _label(key: str, keys: Sequence[str]) -> str:
    """How the report calls a job's id: ``3``, or ``3 (scheduler of 07:12:03)`` where a
    restarted scheduler numbered another job of ``keys`` 3 too."""
    ident = plain(key)
    if not any(k != key and plain(k) == ident for k in keys):
        return ident
    return f"{ident} (scheduler of {clock(life(key))})"


def rmm_tracked(facts: Sequence[WorkerFacts]) -> frozenset[str]:
    """The workers whose RMM use Dask saw above 0 at some point of the session: their pools
    track allocations, so a 0 there is a 0 (an untracked pool always reads 0)."""
    return frozenset(f.info.name for f in facts if any(u.rmm_used for u in f.usage.values()))


def _rmm_session(facts: Sequence[WorkerFacts]) -> dict[str, Any] | None:
    pooled = sorted({f.info.name for f in facts if any(u.rmm_pool for u in f.usage.values())})
    if not pooled:
        return None
    return {"workers_with_pool": pooled, "workers_tracked": sorted(rmm_tracked(facts))}


def _jobs(facts: Sequence[WorkerFacts], rows: Sequence[Mapping[str, str]] | None
          ) -> list[dict[str, Any]]:
    metered = frozenset((f.info.name, *g) for f in facts for g in f.metered)
    tracked = rmm_tracked(facts)
    usage: dict[tuple[str, str], dict[tuple[str, str, str], Usage]] = {}
    for f in facts:
        for (job, dag, gpu, uuid), u in f.usage.items():
            if job:
                usage.setdefault((job, dag), {})[(f.info.name, gpu, uuid)] = u
    job_peaks = [p for f in facts for p in f.job_peaks]
    dag_peaks = [p for f in facts for p in f.dag_peaks]
    by_dag_rows = {(qualify(r.get("job", ""), r.get("scheduler_start", "")), r.get("dag", "")): r
                   for r in rows or ()}
    dags = sorted({*usage, *by_dag_rows, *((p.job.split(DAG_SEPARATOR)[0], p.dag)
                                           for p in dag_peaks)},
                  key=lambda d: (job_order(d[0]), id_key(d[1])))
    keys = list(dict.fromkeys(j for j, _ in dags))
    out = []
    for job in dict.fromkeys(j for j, _ in dags):
        mine = [d for j, d in dags if j == job]
        job_rows = [by_dag_rows[(job, d)] for d in mine if (job, d) in by_dag_rows]
        merged: dict[tuple[str, str, str], Usage] = {}
        for d in mine:
            for key, u in usage.get((job, d), {}).items():
                merged.setdefault(key, Usage()).add(u)
        use = use_entry(merged, metered, tracked)
        entry = {"job": plain(job), "scheduler_start": life(job) or None,
                 "job_label": _label(job, keys),
                 "job_name": next((r.get("job_name") for r in job_rows
                                   if r.get("job_name")), None),
                 "status": _status(r.get("status", "") for r in job_rows) if job_rows
                 else "unknown", **_wall(job_rows, use), **use,
                 "peaks": [peak_entry(p) for p in job_peaks if p.job == job],
                 "per_gpu": [{"worker": w, "gpu": g, "uuid": u,
                              **use_entry({(w, g, u): one}, metered, tracked)}
                             for (w, g, u), one in merged.items()]}
        entry["peak"] = max(entry["peaks"], key=lambda p: p["peak_bytes"] or 0, default=None)
        entry["peak_held_bytes"] = held_bytes(entry, tracked)
        entry["dags"] = []
        for d in mine:
            row = by_dag_rows.get((job, d))
            dag_use = use_entry(usage.get((job, d), {}), metered, tracked)
            peaks = [peak_entry(p) for p in dag_peaks if p.job == f"{job}{DAG_SEPARATOR}{d}"]
            entry["dags"].append({
                "dag": d, "status": (row or {}).get("status") or "unknown",
                **_wall([row] if row else [], dag_use), **dag_use, "peaks": peaks,
                "peak": max(peaks, key=lambda p: p["peak_bytes"] or 0, default=None)})
        out.append(entry)
    return out
