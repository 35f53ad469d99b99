"""The report's first screen (pure): what answers before any scrolling, the session in a
line, the headline figures, one line per job (with its changes against a baseline) and the
top recommendations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dask_metrics.collector.report.compare import FIGURES
from dask_metrics.collector.report.headline import job_name
from dask_metrics.collector.report.parts import (
    GIB,
    NONE,
    Section,
    Table,
    gib,
    gpu_hours,
    percent,
    ref,
    seconds,
)

FIRST_JOBS = 8  # job lines on the first screen
FIRST_ADVICE = 3  # recommendations on the first screen


def session_line(report: Mapping[str, Any]) -> str:
    s = report["session"]
    models: dict[str, int] = {}
    for w in s["workers"]:
        for g in w["gpus"]:
            models[g["model"] or "unknown model"] = models.get(g["model"] or "unknown model",
                                                               0) + 1
    kinds = ", ".join(f"{n} x {m}" for m, n in models.items())
    real = {"all": "simulated GPUs", "some": "some GPUs simulated"}.get(s["simulated"],
                                                                       "real GPUs")
    cluster = f"Cluster {s['cluster']}" if s.get("cluster") else "The unlabelled cluster"
    interrupted = " (interrupted: its scheduler restarted)" if s["asked"].get(
        "interrupted") else ""
    return (f"{cluster}: {s['worker_count']} worker(s), {s['gpu_count']} GPU(s)"
            f"{f' ({kinds})' if kinds else ''}, {real}; {_clock(s['since'])} to "
            f"{_clock(s['until'])} UTC, {seconds(s['duration_seconds'])}{interrupted}.")


def _clock(rfc3339: str) -> str:
    """``2026-11-26 05:00:00`` of ``2026-11-26T05:00:00.000Z`` (whole seconds: a reader's
    clock; report.json keeps the milliseconds)."""
    return rfc3339[:19].replace("T", " ")


def _banner(report: Mapping[str, Any]) -> str | None:
    simulated = report["session"]["simulated"]
    if simulated == "all":
        return ("SIMULATED GPUs: every GPU of this session is synthetic (no real device); "
                "utilisation, memory and energy mirror the worker processes, not a GPU.")
    if simulated == "some":
        return "SOME GPUs ARE SIMULATED: their rows in Workers and GPUs say simulated = yes."
    return None


def _figures(report: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    h = report["headline"]
    short = (h["gpu_hours_held"] or 0) < 1  # GPU time in one unit, minutes under an hour

    def time(key: str) -> str:
        return gpu_hours(h[key], short)

    peak = h.get("peak")
    if peak and peak.get("peak_bytes") is not None:
        bound = "" if peak.get("exact") is not False else "at most "
        memory = (f"{bound}{gib(peak['peak_bytes'])}",
                  f"{percent(peak['peak_percent'])} of {gib(peak['capacity_bytes'])} on "
                  f"{peak['worker']} GPU {peak['gpu']}")
    else:
        memory = (NONE, "no memory sample in the range")
    energy_value = (NONE if h.get("energy_joules") is None
                    else f"{h['energy_joules'] / 1000:,.1f} kJ")
    energy_detail = (f"{h['energy_kwh']:.4f} kWh" if h.get("energy_kwh") is not None else "")
    if h.get("energy_note"):
        energy_detail = "; ".join(filter(None, (energy_detail, h["energy_note"])))
    return [("GPU time held", time("gpu_hours_held"),
             f"{report['session']['gpu_count']} GPU(s) over the range"),
            ("GPU time busy", time("gpu_hours_busy"), "held x utilisation"),
            ("Mean utilisation", percent(h["mean_utilization_percent"]), "of the time held"),
            ("Peak memory", *memory),
            ("Energy", energy_value, energy_detail),
            ("Idle GPU time", time("idle_gpu_hours"),
             f"{time('idle_in_jobs_gpu_hours')} under "
             f"{report['rules']['idle_below_percent']:g} % in jobs, "
             f"{time('without_job_gpu_hours')} with no job")]


def signed(figure: str, c: Mapping[str, Any]) -> str:
    """A change in words: ``+20.0 %`` (or the difference where there is no percentage)."""
    if c["change_percent"] is not None:
        return f"{c['change_percent']:+.1f} %"
    if c["change"] is None:
        return "n/a"
    diff = c["change"]
    return {"wall_seconds": f"{diff:+.1f} s", "peak_bytes": f"{diff / GIB:+.2f} GiB",
            "gpu_hours": f"{diff:+.4f} GPU-h", "energy_joules": f"{diff:+,.0f} J"}[figure]


def _versus(job: Mapping[str, Any], report: Mapping[str, Any]) -> list[str]:
    """This job's changes against its baseline counterpart, a cell per figure."""
    for entry in report["baseline"]["jobs"]:
        if entry["job_label"] == ref(job):
            return [signed(key, entry[key]) for key, _ in FIGURES]
    return ["new", *[NONE] * (len(FIGURES) - 1)]


def _job_lines(report: Mapping[str, Any]) -> Section:
    jobs = report["jobs"]
    if not jobs:
        return Section("Jobs", anchor="jobs", notes=[
            "No job ran in this session: the GPUs' use is in the figures above and the "
            "charts below."])
    headers = ["job", "outcome", "wall time", "peak memory", "of capacity",
               "mean utilisation"]
    compared = bool(report.get("baseline"))
    rows = [[job_name(j), j["status"], seconds(j["wall_seconds"]),
             gib((j["peak"] or {}).get("peak_bytes")),
             percent((j["peak"] or {}).get("peak_percent")),
             percent(j["mean_utilization_percent"]),
             *(_versus(j, report) if compared else [])] for j in jobs]
    notes = []
    if compared:
        headers += [f"{words} change" for _, words in FIGURES]
        base = report["baseline"]
        notes.append(f"Baseline: {base['source']}" + "".join(
            f"; only in {side}: {', '.join(map(job_name, base[key]))}"
            for key, side in (("only_now", "this run"), ("only_before", "the baseline"))
            if base[key]) + ".")
    return Section("Jobs", anchor="jobs", notes=notes,
                   table=Table(headers, rows, set(range(2, len(headers))), shown=FIRST_JOBS))


def _advice(report: Mapping[str, Any]) -> Section:
    items = [r["text"] for r in report["recommendations"]]
    section = Section("What to ask for next time", anchor="advice", items=items[:FIRST_ADVICE],
                      more_items=items[FIRST_ADVICE:])
    if not items:
        section.notes.append("Nothing to recommend: no job peaked, and no GPU sat idle or "
                             "came close to its capacity.")
    return section


def _warnings_line(report: Mapping[str, Any]) -> list[str]:
    n = len(report["session"].get("warnings") or ())
    return [f"{n} warning(s) about these numbers: see Warnings below."] if n else []


def first_screen(report: Mapping[str, Any]) -> list[Section]:
    """The figures, the jobs, the top advice."""
    return [Section("At a glance", anchor="glance", banner=_banner(report),
                    figures=_figures(report), notes=_warnings_line(report)),
            _job_lines(report), _advice(report)]
