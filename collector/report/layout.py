"""The report's layout (pure): report.json's numbers as the sections people read, in order,
the first screen (``first_screen``) and then the detail; ``render`` draws them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dask_metrics.collector.report import where
from dask_metrics.collector.report.compare import FIGURES
from dask_metrics.collector.report.first_screen import first_screen, signed
from dask_metrics.collector.report.parts import (
    NONE,
    Section,
    Table,
    energy,
    gib,
    gpu_hours,
    name,
    peak_text,
    percent,
    ref,
    seconds,
)

MAX_ROWS = 60  # rows of a "where the time went" table; the rest are in report.json
SHOWN_ROWS = 10  # rows of a long table shown before the rest, which is one click away


USE_HEADERS = ["wall time", "outcome", "GPUs", "GPU busy", "mean utilisation", "peak memory",
               "energy", "idle GPU time with tasks"]
# Columns a table has only where some of its rows have the value: GPM activity (Hopper and
# newer) and RMM (RAPIDS workers); (header, report.json key, format).
OPTIONAL_USE = (("SM active", "mean_sm_active_percent", percent),
                ("tensor active", "mean_tensor_active_percent", percent),
                ("peak RMM in use", "peak_rmm_used_bytes", gib),
                ("RMM pool", "rmm_pool_bytes", gib))


def _optional(entries: list[Mapping[str, Any]]) -> list[tuple[str, str, Any]]:
    return [o for o in OPTIONAL_USE if any(e.get(o[1]) is not None for e in entries)]


def _use_row(entry: Mapping[str, Any], optional: list[tuple[str, str, Any]]) -> list[str]:
    return [seconds(entry["wall_seconds"]), entry["status"], str(entry["gpus_used"]),
            seconds(entry["busy_seconds"]), percent(entry["mean_utilization_percent"]),
            peak_text(entry["peak"]), energy(entry), seconds(entry["idle_gpu_seconds"]),
            *(show(entry.get(key)) for _, key, show in optional)]


def _use_table(keys: list[str], rows: list[tuple[list[str], Mapping[str, Any]]]) -> Table:
    """A job or DAG table: its key columns, then the use columns (numbers right-aligned)."""
    optional = _optional([entry for _, entry in rows])
    first = len(keys)
    numeric = {first, first + 2, first + 3, first + 4, first + 7,
               *range(first + 8, first + 8 + len(optional))}
    return Table([*keys, *USE_HEADERS, *(header for header, _, _ in optional)],
                 [[*cells, *_use_row(entry, optional)] for cells, entry in rows], numeric,
                 shown=SHOWN_ROWS)


def _jobs(report: Mapping[str, Any]) -> list[Section]:
    jobs = report["jobs"]
    rules = report["rules"]
    if not jobs:
        return []
    notes = [f"GPU busy: GPU seconds x utilisation; idle GPU time: GPU seconds below "
             f"{rules['idle_below_percent']:g} % utilisation while the worker held the job's "
             f"tasks (running or waiting). Attribution: {rules['attribution']}."]
    if not report["session"].get("jobs_source"):
        notes.append("Job names and outcomes: not in this export (no jobs.csv); outcomes show "
                     "as unknown and wall times come from the GPU samples.")
    if any(j.get("mean_sm_active_percent") is not None for j in jobs):
        notes.append("SM and tensor active: NVML's GPM counters (Hopper and newer), the mean "
                     "over the time they were measured; utilisation counts a GPU busy "
                     "whenever any kernel runs, however few SMs it uses.")
    notes += [f"Energy of job {ref(j)}: {j['energy_note']}" for j in jobs
              if j.get("energy_note")]
    notes += [f"RMM of job {ref(j)}: {j['rmm_note']}" for j in jobs if j.get("rmm_note")]
    notes += [f"Memory job {ref(j)} held: {gib(j['peak_held_bytes'])} (its RMM peak in use "
              "and the memory outside its pool; the peak memory column is NVML's, which "
              "counts the whole pool)" for j in jobs if j.get("peak_held_bytes") is not None]
    out = [Section("Jobs in detail", notes=notes, table=_use_table(
        ["job", "name"], [([ref(j), name(j)], j) for j in jobs]))]
    out.append(Section("Per DAG", level=3, table=_use_table(
        ["job", "name", "DAG"], [([ref(j), name(j), d["dag"]], d)
                                 for j in jobs for d in j["dags"]])))
    cut = [f"Job {ref(j)}: the {len(j['peaks'])} highest of its "
           f"{len(j['peaks']) + j['peaks_omitted']} GPUs' peaks (its peak is the highest of all)."
           for j in jobs if j.get("peaks_omitted")]
    out.append(Section("Peak memory per GPU and job", level=3, notes=cut, table=Table(
        ["job", "name", "worker", "GPU", "peak", "of capacity", "capacity", "when"],
        [[ref(j), name(j), p["worker"], p["gpu"], gib(p["peak_bytes"]),
          percent(p["peak_percent"]), gib(p["capacity_bytes"]), p["time"]]
         for j in jobs for p in j["peaks"]], {4, 5, 6}, shown=SHOWN_ROWS)))
    return out


def _baseline(report: Mapping[str, Any]) -> list[Section]:
    base = report.get("baseline")
    if not base:
        return []
    rows = [[e["job_name"] or NONE, e["job_label"], e["baseline_job_label"], words,
             _value(key, e[key]["before"]), _value(key, e[key]["now"]), signed(key, e[key])]
            for e in base["jobs"] for key, words in FIGURES]
    return [Section("Against the baseline", notes=[
        f"The baseline: {base['source']}; jobs matched by name, the k-th run of a name with "
        "the baseline's k-th."],
        table=Table(["job", "id", "baseline id", "figure", "baseline", "now", "change"],
                    rows, {4, 5, 6}, shown=SHOWN_ROWS * 2))]


def _value(key: str, value: float | None) -> str:
    if value is None:
        return NONE
    return {"wall_seconds": seconds, "peak_bytes": gib, "gpu_hours": gpu_hours,
            "energy_joules": lambda j: f"{j:,.0f} J"}[key](value)


def _where(report: Mapping[str, Any]) -> list[Section]:
    """The export's activities.csv and gpu_by_prefix.csv rows, largest first (``where.rank``),
    rows of 0 left out (they are in report.json)."""
    found_where = report["where_the_time_went"]
    out = []
    for key, title, columns, numeric in (
            ("activities", "Where the time went: activities per job and task prefix",
             ["job", "job_name", "dag", "prefix", "activity", "unit", "value"], {6}),
            ("gpu_by_prefix", "GPU time per task prefix",
             ["job", "job_name", "dag", "prefix", "gpu_seconds", "peak_mem", "energy"],
             {4, 5, 6})):
        found = found_where.get(key)
        if found is None:
            out.append(Section(title, notes=["Not available: this export has no "
                                             f"{key}.csv (it needs the scheduler preload's "
                                             "fine performance metrics)."]))
            continue
        rows = [r for r in found if where.size(r, key)]
        written = (found_where.get("rows_in_export") or {}).get(key, len(found))
        notes = [] if len(rows) <= MAX_ROWS else [
            f"The {MAX_ROWS} largest of {len(rows)} rows; all are in report.json."
            if written == len(found) else
            f"The {MAX_ROWS} largest of {written:,} rows; report.json keeps the "
            f"{len(found):,} largest ('collector export' writes them all)."]
        if len(rows) < len(found):
            notes.append(f"{len(found) - len(rows)} row(s) of 0 left out (in report.json).")
        if not found:
            notes.append(_no_rows(key, bool(found_where.get("activities"))))
        if key == "gpu_by_prefix" and any(not r.get("prefix") for r in rows):
            notes.append("A row without a prefix: that DAG ran on the worker only between two "
                         "scheduler scrapes, so its GPU time is known but not which of its "
                         "functions used it.")
        headers = [c.replace("_", " ") for c in columns]
        ranked = sorted(rows, key=lambda r, key=key: where.rank(r, key), reverse=True)
        out.append(Section(title, notes=notes, table=Table(
            headers, [[_cell(c, r) for c in columns] for r in ranked[:MAX_ROWS]], numeric,
            shown=SHOWN_ROWS)))
    return out


def _no_rows(key: str, activities: bool) -> str:
    """Why a summary has no rows, without contradicting the other one."""
    if key == "activities":
        return ("No rows: the scheduler preload exported no fine performance metrics for "
                "this range (a preload older than them, or no task ran).")
    if activities:
        return ("No rows: no task prefix ran on a worker with GPU samples in this range "
                "(GPU time is split by dask_job_worker_prefix_tasks, which only workers "
                "that executed tasks have).")
    return ("No rows: no task prefix executed in this range (or the scheduler preload is "
            "older than dask_job_worker_prefix_tasks).")


def _cell(column: str, row: Mapping[str, Any]) -> str:
    """A summary file's value with its unit (report.json keeps the file's own text)."""
    text = str(row.get(column) or "")
    if column not in ("value", "gpu_seconds", "peak_mem", "energy") or not text:
        return text or NONE
    value = _float(text)
    unit = row.get("unit") if column == "value" else None
    if column == "gpu_seconds" or unit == "seconds":
        return f"{value:.3f} s"
    if column == "peak_mem" or unit == "bytes":
        return f"{value / 2**20:,.1f} MiB" if value >= 2**20 else f"{value:,.0f} B"
    if column == "energy":
        return f"{value:,.1f} J"
    return f"{value:g} {unit}"


def _float(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return 0.0


def _plots(report: Mapping[str, Any]) -> Section:
    section = Section("Charts per worker", notes=[
        "GPU utilisation (%) and memory (GiB) over time; shaded: the job/DAG running on the "
        "worker."])
    gpus = {w["worker"]: w["gpus"] for w in report["session"]["workers"]}
    for plot in report["plots"]:
        if plot["file"]:
            worker = plot.get("worker") or plot["file"].rsplit(".", 1)[0]
            shown = ", ".join(f"GPU {g['gpu']} ({g['model'] or 'unknown model'}, "
                              f"{gib(g['capacity_bytes'])})" for g in gpus.get(worker, ()))
            section.images.append((plot["file"], f"{worker}: {shown or 'no GPU'}"))
        else:
            section.notes.append(plot["what"])
    if not report["plots"]:
        section.notes.append("Charts are on the HTML page (collector report --format html).")
    return section


def _workers(report: Mapping[str, Any]) -> Section:
    s = report["session"]
    notes = [f"Data from {s['prometheus']}."]
    notes += [f"GPU {g['uuid']} is seen by {len(g['workers'])} workers "
              f"({', '.join(g['workers'])}): counted once in every figure, each the largest "
              "of their views." for g in s.get("shared_gpus") or ()]
    rows = [[w["worker"], " ".join(w["hosts"]) or NONE, g["gpu"], g["model"] or NONE,
             gib(g["capacity_bytes"]), "yes" if g["simulated"] else "no"]
            for w in s["workers"] for g in w["gpus"]]
    return Section("Workers and GPUs", notes=notes, table=Table(
        ["worker", "host", "GPU", "model", "capacity", "simulated"], rows, {4},
        shown=SHOWN_ROWS))


def _warnings(report: Mapping[str, Any]) -> list[Section]:
    found = report["session"].get("warnings") or []
    return [Section("Warnings", anchor="warnings", items=list(found))] if found else []


def _rules(report: Mapping[str, Any]) -> Section:
    return Section("How the advice is made", level=3, notes=[
        f"Headroom: {report['rules']['headroom']:g} x the peak. GPU sizes from the table "
        "shipped with dask-metrics (nominal sizes)."])


def sections(report: Mapping[str, Any]) -> list[Section]:
    """The page's sections in their order: the first screen, then the baseline, the jobs in
    detail, the charts, where the time went, the workers, the warnings, the rules."""
    return [*first_screen(report), *_baseline(report), *_jobs(report), _plots(report),
            *_where(report), _workers(report), *_warnings(report), _rules(report)]


def title(report: Mapping[str, Any]) -> str:
    return str(report["session"]["title"])
