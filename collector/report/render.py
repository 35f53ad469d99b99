"""The report's page and its terminal text (pure): ``sections`` lays report.json's numbers out
once, as headings, figures, notes, tables and lists with units; ``render_html`` and
``render_text`` only draw that layout, so the page and the terminal show the same sections
and numbers, in the order people read them: the first screen answers (the session in a line,
the headline figures, one line per job, the top recommendations), the detail follows.

The page is one self-contained file: styles inline, charts as inline SVG, and a Content
Security Policy that forbids the browser any request at all (``default-src 'none'``). Words
are never broken: a cell wraps at its spaces only, a token with hyphens or slashes (a time, a
GPU's UUID) is kept whole unless it is wider than the page, and wide tables scroll in their
own box.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dask_metrics.collector.report.compare import FIGURES
from dask_metrics.collector.report.headline import job_name

GIB = 2**30
NONE = "-"  # no value
CSP = "default-src 'none'; style-src 'unsafe-inline'"
MAX_ROWS = 60  # rows of a "where the time went" table; the rest are in report.json
SHOWN_ROWS = 10  # rows of a long table shown before the rest, which is one click away
FIRST_JOBS = 8  # job lines on the first screen
FIRST_ADVICE = 3  # recommendations on the first screen
STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:1280px;padding:8px 24px 16px;color:#1b1f24;background:#fff;line-height:1.35;
overflow-wrap:break-word}
h1{font-size:1.45em;margin:.2em 0 .1em}h2{font-size:1.2em;border-bottom:2px solid #d0d7de;
padding-bottom:.15em;margin:1.1em 0 .4em}h3{font-size:1em;margin:1em 0 .3em}
.sub{margin:.1em 0 .4em;color:#57606a}
.figs{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:8px;
margin:.5em 0}.fig{border:1px solid #d0d7de;border-radius:6px;padding:5px 9px}
.fig>b{display:block;font-size:1.3em;font-variant-numeric:tabular-nums}
.fig>small,.fig>span{color:#57606a;font-size:.85em}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.3em 0 .6em;font-size:.9em}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f7}td.n,th.n{text-align:right}td.n{font-variant-numeric:tabular-nums;
white-space:nowrap}
.w{display:inline-block;max-width:100%;overflow-wrap:anywhere}td .w,th .w{display:inline;
white-space:nowrap}
.up{color:#a40e26}.down{color:#116329}
.banner{background:#fff4d6;border:2px solid #d4a72c;padding:6px 12px;font-weight:600;
margin:.4em 0}.note{color:#57606a;margin:.3em 0}.warn{color:#7d4e00}
ol,ul{margin:.3em 0;padding-left:1.4em}li{margin:.2em 0}
details{margin:.3em 0}summary{cursor:pointer;color:#0550ae}
figure svg{max-width:100%;height:auto;border:1px solid #d0d7de}figure{margin:.8em 0}
"""


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    numeric: set[int] = field(default_factory=set)  # right-aligned columns
    shown: int | None = None  # rows shown before the rest is folded away


@dataclass
class Section:
    title: str
    level: int = 2
    anchor: str = ""
    banner: str | None = None
    figures: list[tuple[str, str, str]] = field(default_factory=list)  # (label, value, detail)
    notes: list[str] = field(default_factory=list)
    table: Table | None = None
    items: list[str] = field(default_factory=list)
    more_items: list[str] = field(default_factory=list)  # folded away
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


def gpu_hours(value: float | None, minutes: bool = False) -> str:
    """GPU time, in GPU-hours (``minutes``: in GPU-minutes, for sessions under an hour)."""
    if value is None:
        return NONE
    return f"{value * 60:,.1f} GPU-min" if minutes else f"{value:,.2f} GPU-h"



# ---- the first screen --------------------------------------------------------------------------


def _session_line(report: Mapping[str, Any]) -> str:
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


def _signed(figure: str, c: Mapping[str, Any]) -> str:
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
        if entry["job_label"] == _ref(job):
            return [_signed(key, entry[key]) for key, _ in FIGURES]
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


# ---- the detail --------------------------------------------------------------------------------


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
    notes += [f"Energy of job {_ref(j)}: {j['energy_note']}" for j in jobs
              if j.get("energy_note")]
    notes += [f"RMM of job {_ref(j)}: {j['rmm_note']}" for j in jobs if j.get("rmm_note")]
    notes += [f"Memory job {_ref(j)} held: {gib(j['peak_held_bytes'])} (its RMM peak in use "
              "and the memory outside its pool; the peak memory column is NVML's, which "
              "counts the whole pool)" for j in jobs if j.get("peak_held_bytes") is not None]
    out = [Section("Jobs in detail", notes=notes, table=_use_table(
        ["job", "name"], [([_ref(j), _name(j)], j) for j in jobs]))]
    out.append(Section("Per DAG", level=3, table=_use_table(
        ["job", "name", "DAG"], [([_ref(j), _name(j), d["dag"]], d)
                                 for j in jobs for d in j["dags"]])))
    out.append(Section("Peak memory per GPU and job", level=3, table=Table(
        ["job", "name", "worker", "GPU", "peak", "of capacity", "capacity", "when"],
        [[_ref(j), _name(j), p["worker"], p["gpu"], gib(p["peak_bytes"]),
          percent(p["peak_percent"]), gib(p["capacity_bytes"]), p["time"]]
         for j in jobs for p in j["peaks"]], {4, 5, 6}, shown=SHOWN_ROWS)))
    return out


def _baseline(report: Mapping[str, Any]) -> list[Section]:
    base = report.get("baseline")
    if not base:
        return []
    rows = [[e["job_name"] or NONE, e["job_label"], e["baseline_job_label"], words,
             _value(key, e[key]["before"]), _value(key, e[key]["now"]), _signed(key, e[key])]
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
                      for r in sorted(rows, key=rank)[:MAX_ROWS]], numeric, shown=SHOWN_ROWS)))
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


def first_screen(report: Mapping[str, Any]) -> list[Section]:
    """What answers before any scrolling: the figures, the jobs, the top advice."""
    return [Section("At a glance", anchor="glance", banner=_banner(report),
                    figures=_figures(report), notes=_warnings_line(report)),
            _job_lines(report), _advice(report)]


def sections(report: Mapping[str, Any]) -> list[Section]:
    """The page's sections in their order: the first screen, then the baseline, the jobs in
    detail, the charts, where the time went, the workers, the warnings, the rules."""
    return [*first_screen(report), *_baseline(report), *_jobs(report), _plots(report),
            *_where(report), _workers(report), *_warnings(report), _rules(report)]


def title(report: Mapping[str, Any]) -> str:
    return str(report["session"]["title"])


# ---- HTML --------------------------------------------------------------------------------------

_BREAKABLE = re.compile(r"\S*[\w:][-/]\S*")  # a token a browser may break at a hyphen or slash


def _words(text: str) -> str:
    """Escaped text whose hyphenated tokens stay whole (broken only when wider than the
    page)."""
    out, last = [], 0
    for m in _BREAKABLE.finditer(text):
        out += [html.escape(text[last:m.start()]),
                f"<span class=w>{html.escape(m.group())}</span>"]
        last = m.end()
    return "".join(out) + html.escape(text[last:])


def _change_class(cell: str) -> str:
    return " up" if cell.startswith("+") else " down" if cell.startswith("-") and \
        cell[1:2].isdigit() else ""


def _rows_html(table: Table, rows: Sequence[list[str]]) -> str:
    return "".join("<tr>" + "".join(
        f'<td class="{"n" if i in table.numeric else ""}{_change_class(c)}">{_words(c)}</td>'
        for i, c in enumerate(row)) + "</tr>" for row in rows)


def _html_table(table: Table) -> str:
    head = "".join(f'<th{" class=n" if i in table.numeric else ""}>{_words(h)}</th>'
                   for i, h in enumerate(table.headers))
    shown = len(table.rows) if table.shown is None else table.shown
    first = (f"<div class=scroll><table><thead><tr>{head}</tr></thead><tbody>"
             f"{_rows_html(table, table.rows[:shown])}</tbody></table></div>")
    rest = table.rows[shown:]
    if not rest:
        return first
    return (f"{first}<details><summary>{len(rest)} more row(s)</summary><div class=scroll>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{_rows_html(table, rest)}"
            "</tbody></table></div></details>")


def _section_html(s: Section, charts: Mapping[str, str]) -> list[str]:
    parts = [f"<section id={s.anchor}>" if s.anchor else "",
             f"<h{s.level}>{_words(s.title)}</h{s.level}>"]
    if s.banner:
        parts.append(f"<div class=banner role=alert>{_words(s.banner)}</div>")
    if s.figures:
        parts.append("<div class=figs>" + "".join(
            f"<div class=fig><small>{_words(label)}</small><b>{_words(value)}</b>"
            f"<span>{_words(detail)}</span></div>" for label, value, detail in s.figures)
            + "</div>")
    parts += [f'<p class="note{" warn" if "warning" in n else ""}">{_words(n)}</p>'
              for n in s.notes]
    if s.table is not None and s.table.rows:
        parts.append(_html_table(s.table))
    if s.items:
        parts.append("<ol>" + "".join(f"<li>{_words(i)}</li>" for i in s.items) + "</ol>")
    if s.more_items:
        parts.append(f"<details><summary>{len(s.more_items)} more</summary>"
                     f"<ol start={len(s.items) + 1}>"
                     + "".join(f"<li>{_words(i)}</li>" for i in s.more_items)
                     + "</ol></details>")
    for name, caption in s.images:
        if name in charts:
            parts.append(f"<figure>{charts[name]}<figcaption>{_words(caption)}"
                         "</figcaption></figure>")
    if s.anchor:
        parts.append("</section>")
    return parts


def render_html(report: Mapping[str, Any], charts: Mapping[str, str]) -> str:
    """The page; ``charts``: {name: SVG element} of the plots."""
    e = html.escape
    parts = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
             f'<meta name=viewport content="width=device-width,initial-scale=1">'
             f"<title>{e(title(report))}</title><style>{STYLE}</style></head><body>"
             f"<h1>{_words(title(report))}</h1><p class=sub>{_words(_session_line(report))}"
             "</p>"]
    for s in sections(report):
        parts += _section_html(s, charts)
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
    """The same sections for a terminal (charts are on the page only; nothing folded)."""
    out = [title(report), "=" * len(title(report)), _session_line(report)]
    for s in sections(report):
        out += ["", s.title, ("-" if s.level == 2 else "~") * len(s.title)]
        if s.banner:
            out.append(f"!!! {s.banner}")
        width = max((len(label) for label, _, _ in s.figures), default=0)
        out += [f"{label.ljust(width)}  {value}" + (f"  ({detail})" if detail else "")
                for label, value, detail in s.figures]
        out += s.notes
        if s.table is not None and s.table.rows:
            out += _text_table(s.table)
        out += [f"{n}. {i}" for n, i in enumerate([*s.items, *s.more_items], 1)]
        out += [f"[chart: {caption}]" for _, caption in s.images]
    return "\n".join(out) + "\n"
