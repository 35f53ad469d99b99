"""The report's page and its terminal text (pure): ``sections`` lays report.json's numbers out
once, as headings, notes and tables with units; ``render_html`` and ``render_text`` only
draw that layout, so the page and the terminal show the same sections and numbers.

The page is one self-contained file: styles inline, charts as inline SVG, and a Content
Security Policy that forbids the browser any request at all (``default-src 'none'``).
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GIB = 2**30
NONE = "-"  # no value
CSP = "default-src 'none'; style-src 'unsafe-inline'"
MAX_ROWS = 60  # rows of a "where the time went" table; the rest are in report.json
STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:1280px;padding:16px 24px;color:#1b1f24;background:#fff;line-height:1.4}
h1{font-size:1.6em;margin:.2em 0}h2{border-bottom:2px solid #d0d7de;padding-bottom:.2em;
margin-top:1.6em}h3{margin:1.2em 0 .3em}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.9em}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top;
overflow-wrap:anywhere}
th{background:#f3f5f7}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.banner{background:#fff4d6;border:2px solid #d4a72c;padding:8px 12px;font-weight:600;
margin:.6em 0}.note{color:#57606a}figure svg{max-width:100%;height:auto;
border:1px solid #d0d7de}
figure{margin:1em 0}li{margin:.3em 0}
"""


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    numeric: set[int] = field(default_factory=set)  # right-aligned columns


@dataclass
class Section:
    title: str
    level: int = 2
    banner: str | None = None
    notes: list[str] = field(default_factory=list)
    table: Table | None = None
    items: list[str] = field(default_factory=list)
    images: list[tuple[str, str]] = field(default_factory=list)  # (chart, caption)


# ---- numbers with units ------------------------------------------------------------------------


def gib(value: float | None) -> str:
    return NONE if value is None else f"{value / GIB:.2f} GiB"


def seconds(value: float | None) -> str:
    if value is None:
        return NONE
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value:.0f} s ({value / 60:.1f} min)"
    return f"{value:.0f} s ({value / 3600:.2f} h)"


def percent(value: float | None) -> str:
    return NONE if value is None else f"{value:.1f} %"


def energy(use: Mapping[str, Any]) -> str:
    if use.get("energy_joules") is None:
        return "not reported"
    return f"{use['energy_joules']:,.0f} J ({use['energy_kwh']:.4f} kWh)"


def peak_text(peak: Mapping[str, Any] | None) -> str:
    if not peak:
        return NONE
    return (f"{gib(peak['peak_bytes'])} ({percent(peak['peak_percent'])} of "
            f"{gib(peak['capacity_bytes'])}) on {peak['worker']} GPU {peak['gpu']} at "
            f"{peak['time']}")


def _name(job: Mapping[str, Any]) -> str:
    return job.get("job_name") or NONE


def _ref(job: Mapping[str, Any]) -> str:
    """The job's id, with its scheduler's start where a restart reused the id."""
    return str(job.get("job_label") or job["job"])


# ---- the layout --------------------------------------------------------------------------------


def _session(report: Mapping[str, Any]) -> Section:
    s = report["session"]
    banner = None
    if s["simulated"] == "all":
        banner = ("SIMULATED GPUs: every GPU of this session is synthetic (no real device); "
                  "utilisation, memory and energy mirror the worker processes, not a GPU.")
    elif s["simulated"] == "some":
        banner = "SOME GPUs ARE SIMULATED: their rows say simulated = yes."
    cluster = repr(s["cluster"]) if s.get("cluster") else "the one unlabelled cluster"
    notes = [f"Cluster {cluster}, {s['since']} to {s['until']} ({seconds(s['duration_seconds'])}); "
             f"{s['worker_count']} worker(s), {s['gpu_count']} GPU(s); "
             f"data from {s['prometheus']}."]
    notes += [f"GPU {g['uuid']} is seen by {len(g['workers'])} workers "
              f"({', '.join(g['workers'])}): counted once in every figure, each the largest "
              "of their views." for g in s.get("shared_gpus") or ()]
    notes += [f"Warning: {w}" for w in s.get("warnings") or ()]
    rows = [[w["worker"], " ".join(w["hosts"]) or NONE, g["gpu"], g["model"] or NONE,
             gib(g["capacity_bytes"]), "yes" if g["simulated"] else "no"]
            for w in s["workers"] for g in w["gpus"]]
    return Section("The session", banner=banner, notes=notes, table=Table(
        ["worker", "host", "GPU", "model", "capacity", "simulated"], rows, {4}))


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
    numeric = {first + 2, first + 3, first + 4, *range(first + 8, first + 8 + len(optional))}
    return Table([*keys, *USE_HEADERS, *(header for header, _, _ in optional)],
                 [[*cells, *_use_row(entry, optional)] for cells, entry in rows], numeric)


def _jobs(report: Mapping[str, Any]) -> list[Section]:
    jobs = report["jobs"]
    rules = report["rules"]
    if not jobs:
        return [Section("Jobs and DAGs", notes=["No job ran in this session: the GPUs' use "
                                                 "is in the plots below."])]
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
    notes += [f"Energy of job {_ref(j)}: {j['energy_note']}" for j in jobs
              if j.get("energy_note")]
    notes += [f"RMM of job {_ref(j)}: {j['rmm_note']}" for j in jobs if j.get("rmm_note")]
    notes += [f"Memory job {_ref(j)} held: {gib(j['peak_held_bytes'])} (its RMM peak in use "
              "and the memory outside its pool; the peak memory column is NVML's, which "
              "counts the whole pool)" for j in jobs if j.get("peak_held_bytes") is not None]
    out = [Section("Jobs and DAGs", notes=notes, table=_use_table(
        ["job", "name"], [([_ref(j), _name(j)], j) for j in jobs]))]
    out.append(Section("Per DAG", level=3, table=_use_table(
        ["job", "name", "DAG"], [([_ref(j), _name(j), d["dag"]], d)
                                 for j in jobs for d in j["dags"]])))
    out.append(Section("Peak memory per GPU and job", level=3, table=Table(
        ["job", "name", "worker", "GPU", "peak", "of capacity", "capacity", "when"],
        [[_ref(j), _name(j), p["worker"], p["gpu"], gib(p["peak_bytes"]),
          percent(p["peak_percent"]), gib(p["capacity_bytes"]), p["time"]]
         for j in jobs for p in j["peaks"]], {4, 5, 6})))
    return out


def _where(report: Mapping[str, Any]) -> list[Section]:
    """The export's activities.csv and gpu_by_prefix.csv rows, largest first (activities in
    seconds before those in other units, which do not compare with them)."""
    where = report["where_the_time_went"]
    out = []
    for key, title, columns, numeric, rank in (
            ("activities", "Where the time went: activities per job and task prefix",
             ["job", "job_name", "dag", "prefix", "activity", "unit", "value"], {6},
             lambda r: (r.get("unit") != "seconds", -_float(r.get("value")))),
            ("gpu_by_prefix", "GPU time per task prefix",
             ["job", "job_name", "dag", "prefix", "gpu_seconds", "peak_mem", "energy"],
             {4, 5, 6}, lambda r: (-_float(r.get("gpu_seconds")),))):
        rows = where.get(key)
        if rows is None:
            out.append(Section(title, notes=["Not available: this export has no "
                                             f"{key}.csv (it needs the scheduler preload's "
                                             "fine performance metrics)."]))
            continue
        notes = [] if len(rows) <= MAX_ROWS else [
            f"The {MAX_ROWS} largest of {len(rows)} rows; all are in report.json."]
        if not rows:
            notes.append(_no_rows(key, bool(where.get("activities"))))
        headers = [c.replace("_", " ") for c in columns]
        out.append(Section(title, notes=notes, table=Table(
            headers, [[_cell(c, r) for c in columns]
                      for r in sorted(rows, key=rank)[:MAX_ROWS]], numeric)))
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
    section = Section("Plots per worker", notes=[
        "GPU utilisation (%) and memory (GiB) over time; shaded: the job/DAG running on the "
        "worker."])
    for plot in report["plots"]:
        if plot["file"]:
            section.images.append((plot["file"], f"{plot['what']}: {plot['file']}"))
        else:
            section.notes.append(plot["what"])
    if not report["plots"]:
        section.notes.append("Plots are on the HTML page (collector report --format html).")
    return section


def _advice(report: Mapping[str, Any]) -> Section:
    items = [r["text"] for r in report["recommendations"]]
    notes = [f"Headroom: {report['rules']['headroom']:g} x the peak. GPU sizes from the "
             "table shipped with dask-metrics (nominal sizes)."]
    if not items:
        notes.append("Nothing to recommend: no job peaked, and no GPU sat idle or came close "
                     "to its capacity.")
    return Section("Recommendations", notes=notes, items=items)


def sections(report: Mapping[str, Any]) -> list[Section]:
    """The page's sections in their order: session, jobs and DAGs, where the time went,
    plots, recommendations."""
    return [_session(report), *_jobs(report), *_where(report), _plots(report),
            _advice(report)]


def title(report: Mapping[str, Any]) -> str:
    s = report["session"]
    cluster = f" {s['cluster']}" if s.get("cluster") else ""
    return f"dask-metrics session report{cluster}: {s['since']} to {s['until']}"


# ---- HTML --------------------------------------------------------------------------------------


def _html_table(table: Table) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in table.headers)
    body = "".join("<tr>" + "".join(f'<td{" class=n" if i in table.numeric else ""}>{e(c)}</td>'
                                    for i, c in enumerate(row)) + "</tr>" for row in table.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(report: Mapping[str, Any], charts: Mapping[str, str]) -> str:
    """The page; ``charts``: {name: SVG element} of the plots."""
    e = html.escape
    parts = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
             f'<meta name=viewport content="width=device-width,initial-scale=1">'
             f"<title>{e(title(report))}</title><style>{STYLE}</style></head><body>"
             f"<h1>{e(title(report))}</h1>"]
    for s in sections(report):
        parts.append(f"<h{s.level}>{e(s.title)}</h{s.level}>")
        if s.banner:
            parts.append(f'<div class=banner role=alert>{e(s.banner)}</div>')
        parts += [f"<p class=note>{e(n)}</p>" for n in s.notes]
        if s.table is not None and s.table.rows:
            parts.append(_html_table(s.table))
        if s.items:
            parts.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in s.items) + "</ul>")
        for name, caption in s.images:
            if name in charts:
                parts.append(f"<figure>{charts[name]}<figcaption>{e(caption)}</figcaption>"
                             "</figure>")
    s = report["session"]
    parts.append(f"<p class=note>Written by dask-metrics {e(str(s.get('dask_metrics')))}; every "
                 "number on this page is in report.json beside it.</p></body></html>")
    return "".join(parts) + "\n"


# ---- text --------------------------------------------------------------------------------------


def _text_table(table: Table) -> list[str]:
    lines = [table.headers, *table.rows]
    widths = [max(len(row[i]) for row in lines) for i in range(len(table.headers))]
    return ["  ".join(cell.rjust(w) if i in table.numeric else cell.ljust(w)
                      for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
            for row in lines]


def render_text(report: Mapping[str, Any]) -> str:
    """The same sections for a terminal (plots are on the page only)."""
    out = [title(report), "=" * len(title(report))]
    for s in sections(report):
        out += ["", s.title, ("-" if s.level == 2 else "~") * len(s.title)]
        if s.banner:
            out.append(f"!!! {s.banner}")
        out += s.notes
        if s.table is not None and s.table.rows:
            out += _text_table(s.table)
        out += [f"- {i}" for i in s.items]
        out += [f"[plot: {caption}]" for _, caption in s.images]
    return "\n".join(out) + "\n"
