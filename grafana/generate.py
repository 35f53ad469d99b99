#!/usr/bin/env python3
"""Write the dask-metrics Grafana dashboards (the JSON files are generated: edit this file).

    python grafana/generate.py           # write grafana/dashboards/*.json and the chart's copy
    python grafana/generate.py --check   # exit 1 when a JSON file differs from this source

The dashboards are written twice, byte for byte the same: ``grafana/dashboards/`` (Grafana
provisioning, the compose stack, importing by hand) and ``deploy/helm/dask-metrics/dashboards/``
(the Helm chart can only read files inside its own directory). tests/test_grafana.py checks
that both copies match this source.

Conventions, checked by tests/test_grafana.py for every panel and target:
- a ``datasource`` variable (type datasource, Prometheus) and no ``${DS_...}`` inputs, so a
  dashboard imports anywhere as is; every panel and target uses ``${datasource}``;
- stable ``uid``s and ``id: null``;
- a unit on every panel; ``$__rate_interval`` in every rate()/increase();
- template variables from ``label_values(...)``, refreshed on time range change (refresh 2);
- ``worker=~"$worker"`` (a regex match), so multi-value and "All" selections work;
- a ``dask_cluster`` variable (one cluster at a time: one Prometheus holds many) and
  ``dask_cluster="$dask_cluster"`` in every selector of every query, added by ``scoped``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUTPUTS = (ROOT / "grafana" / "dashboards",
           ROOT / "deploy" / "helm" / "dask-metrics" / "dashboards")
TAG = "dask-metrics"
DS = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39

W = 'worker=~"$worker"'
CLUSTER = 'dask_cluster="$dask_cluster"'
# The series that name the clusters: GPU exporters' and schedulers' (a cluster without GPUs).
CLUSTER_VALUES = 'label_values({__name__=~"dask_gpu_info|dask_job_current_job"}, dask_cluster)'
GW = 'worker=~"$worker", gpu=~"$gpu"'
RATE = "$__rate_interval"


# ---- building blocks -------------------------------------------------------------------------

# A dask-metrics series: exported (dask_gpu_*, dask_job_*) or recorded by the rules file's
# dashboards group (level:metric:operations, every level starting with dask_cluster).
SERIES = r"(?<![\w:])(dask_(?:gpu|job)_[a-z0-9_]+|dask_cluster\w*:\w+:\w+)(?![\w(:])"
_SELECTOR = re.compile(SERIES + r"(?:\{([^{}]*)\})?")
_RECORDED = re.compile(r"(?<![\w:])dask_cluster\w*:\w+:\w+")
# What a panel reading recorded series shows without data: without the rules file loaded,
# it would stay empty for ever, with no hint why.
NO_RECORDS = "No data: nothing ran in the range, or the dask-metrics recording rules are not loaded"


def scoped(expr: str) -> str:
    """``expr`` with every dask_* selector limited to the dashboard's ``$dask_cluster``."""
    def add(m: re.Match[str]) -> str:
        inner = m.group(2)
        return f"{m.group(1)}{{{CLUSTER}{', ' + inner if inner and inner.strip() else ''}}}"

    return _SELECTOR.sub(add, expr)



def target(expr: str, legend: str, *, instant: bool = False, table: bool = False) -> dict[str, Any]:
    return {
        "datasource": DS,
        "editorMode": "code",
        "expr": scoped(expr),
        "format": "table" if table else "time_series",
        "instant": instant,
        "legendFormat": legend,
        "range": not instant,
        "refId": "",  # filled in by Panel
    }


def thresholds(*steps: tuple[float | None, str]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


def value_map(mapping: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    return [{
        "type": "value",
        "options": {k: {"text": text, "color": color, "index": i}
                    for i, (k, (text, color)) in enumerate(mapping.items())},
    }]


DAG_STATUS = value_map({"0": ("waiting", "blue"), "1": ("running", "yellow"),
                        "2": ("finished", "green"), "3": ("erred", "red")})
GPU_UP = value_map({"1": ("up", "green"), "0": ("not answering", "red")})
NVML_UP = value_map({"1": ("NVML OK", "green"), "0": ("NVML unavailable", "red")})
IDLE = value_map({"-1": ("idle", "text")})

WORKER_LINK = {
    "title": "GPUs of worker ${__field.labels.worker}",
    "url": "/d/dask-metrics-worker/dask-gpu-worker?var-worker=${__field.labels.worker}"
           "&${datasource:queryparam}&${__url_time_range}",
}


class Panel:
    """One Grafana panel: kind, title, description, unit and targets, placed by Dashboard."""

    def __init__(self, kind: str, title: str, description: str, unit: str,
                 targets: Iterable[dict[str, Any]], *, w: int, h: int = 8,
                 min_: float | None = None, max_: float | None = None,
                 mappings: list[dict[str, Any]] | None = None,
                 steps: dict[str, Any] | None = None, color: dict[str, Any] | None = None,
                 options: dict[str, Any] | None = None, custom: dict[str, Any] | None = None,
                 overrides: list[dict[str, Any]] | None = None,
                 transformations: list[dict[str, Any]] | None = None,
                 links: list[dict[str, Any]] | None = None) -> None:
        self.kind, self.w, self.h = kind, w, h
        tgts = list(targets)
        for i, t in enumerate(tgts):
            t["refId"] = chr(ord("A") + i)
        defaults: dict[str, Any] = {"unit": unit, "mappings": mappings or [],
                                    "thresholds": steps or thresholds((None, "green"))}
        if min_ is not None:
            defaults["min"] = min_
        if max_ is not None:
            defaults["max"] = max_
        defaults["color"] = color or {"mode": "palette-classic" if kind == "timeseries"
                                      else "thresholds"}
        if custom:
            defaults["custom"] = custom
        if links:
            defaults["links"] = links
        if any(_RECORDED.search(t["expr"]) for t in tgts):
            defaults["noValue"] = NO_RECORDS
        self.body: dict[str, Any] = {
            "type": kind,
            "title": title,
            "description": description,
            "datasource": DS,
            "targets": tgts,
            "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
            "options": options or {},
        }
        if transformations:
            self.body["transformations"] = transformations


def timeseries(title: str, description: str, unit: str, targets: Iterable[dict[str, Any]], *,
               w: int = 12, h: int = 8, stack: bool = False, **kw: Any) -> Panel:
    custom = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 20 if stack else 5,
              "showPoints": "never", "spanNulls": False, "axisSoftMin": 0,
              "stacking": {"mode": "normal" if stack else "none", "group": "A"}}
    options = {"legend": {"displayMode": "table", "placement": "bottom", "showLegend": True,
                          "calcs": ["mean", "max", "lastNotNull"]},
               "tooltip": {"mode": "multi", "sort": "desc"}}
    return Panel("timeseries", title, description, unit, targets, w=w, h=h, custom=custom,
                 options=options, **kw)


def stat(title: str, description: str, unit: str, targets: Iterable[dict[str, Any]], *,
         w: int = 3, h: int = 4, options: dict[str, Any] | None = None, **kw: Any) -> Panel:
    options = options or {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "value", "graphMode": "none", "justifyMode": "auto",
        "orientation": "auto", "textMode": "auto", "wideLayout": True}
    return Panel("stat", title, description, unit, targets, w=w, h=h, options=options, **kw)


def timeline(title: str, description: str, unit: str, targets: Iterable[dict[str, Any]], *,
             w: int = 24, h: int = 9, show_value: str = "never", **kw: Any) -> Panel:
    options = {"mergeValues": True, "showValue": show_value, "alignValue": "left",
               "rowHeight": 0.85, "legend": {"displayMode": "list", "placement": "bottom",
                                             "showLegend": True},
               "tooltip": {"mode": "single", "sort": "none"}}
    custom = {"fillOpacity": 80, "lineWidth": 0}
    return Panel("state-timeline", title, description, unit, targets, w=w, h=h,
                 options=options, custom=custom, **kw)


def table(title: str, description: str, unit: str, targets: Iterable[dict[str, Any]], *,
          w: int = 24, h: int = 8, hide: Iterable[str] = (), rename: dict[str, str] | None = None,
          order: Iterable[str] = (), merge: bool = True, **kw: Any) -> Panel:
    excluded = {name: True for name in ("Time", "__name__", "job", "instance", *hide)}
    organize = {"id": "organize", "options": {
        "excludeByName": excluded,
        "indexByName": {name: i for i, name in enumerate(order)},
        "renameByName": rename or {},
    }}
    transformations = ([{"id": "merge", "options": {}}] if merge else []) + [organize]
    options = {"showHeader": True, "cellHeight": "sm",
               "footer": {"show": False, "reducer": ["sum"], "countRows": False}}
    return Panel("table", title, description, unit, targets, w=w, h=h, options=options,
                 transformations=transformations, **kw)


def unit_override(field: str, unit: str, **props: Any) -> dict[str, Any]:
    properties = [{"id": "unit", "value": unit}]
    properties += [{"id": k, "value": v} for k, v in props.items()]
    return {"matcher": {"id": "byName", "options": field}, "properties": properties}


class Dashboard:
    """Lays panels out left to right in rows of 24 columns; ``row()`` starts a titled row."""

    def __init__(self, uid: str, title: str, description: str) -> None:
        self.uid, self.title, self.description = uid, title, description
        self.variables: list[dict[str, Any]] = [datasource_variable(), cluster_variable()]
        self.panels: list[dict[str, Any]] = []
        self._x = self._y = self._row_h = 0

    def variable(self, var: dict[str, Any]) -> None:
        self.variables.append(var)

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append({"type": "row", "title": title, "collapsed": False, "panels": [],
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self._y}})
        self._y += 1

    def add(self, *panels: Panel) -> None:
        for p in panels:
            if self._x + p.w > 24:
                self._newline()
            self.panels.append({**p.body, "gridPos": {"h": p.h, "w": p.w, "x": self._x,
                                                      "y": self._y}})
            self._x += p.w
            self._row_h = max(self._row_h, p.h)

    def _newline(self) -> None:
        if self._x:
            self._y += self._row_h
        self._x = self._row_h = 0

    def json(self) -> dict[str, Any]:
        panels = [{"id": i + 1, **p} for i, p in enumerate(self.panels)]
        return {
            "id": None,
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": [TAG, "dask", "gpu"],
            "editable": True,
            "graphTooltip": 1,
            "liveNow": False,
            "refresh": "30s",
            "schemaVersion": SCHEMA_VERSION,
            "version": 1,
            "timezone": "browser",
            "time": {"from": "now-1h", "to": "now"},
            "timepicker": {},
            "fiscalYearStartMonth": 0,
            "weekStart": "",
            "annotations": {"list": [{
                "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts", "type": "dashboard",
            }]},
            "links": [{"type": "dashboards", "tags": [TAG], "asDropdown": False,
                       "includeVars": False, "keepTime": True, "targetBlank": False,
                       "title": "dask-metrics", "icon": "external link", "tooltip": "",
                       "url": ""}],
            "templating": {"list": self.variables},
            "panels": panels,
        }


def datasource_variable() -> dict[str, Any]:
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "regex": "", "current": {}, "hide": 0,
            "includeAll": False, "multi": False, "options": [], "refresh": 1,
            "skipUrlSync": False}


def query_variable(name: str, label: str, query: str, *, multi: bool = True,
                   include_all: bool = True) -> dict[str, Any]:
    query = scoped(query)
    return {
        "name": name, "label": label, "type": "query", "datasource": DS,
        "definition": query,
        "query": {"qryType": 1, "query": query,
                  "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,  # on time range change: workers come and go
        "regex": "", "sort": 3,  # natural sort: worker-2 before worker-10
        "multi": multi, "includeAll": include_all,
        "allValue": ".*" if include_all else None,
        "current": {}, "options": [], "hide": 0, "skipUrlSync": False,
    }


def cluster_variable() -> dict[str, Any]:
    """The Dask cluster shown: one at a time, so sums and joins never mix clusters."""
    var = query_variable("dask_cluster", "Dask cluster", "", multi=False, include_all=False)
    var["definition"] = var["query"]["query"] = CLUSTER_VALUES
    var["sort"] = 1  # alphabetical
    return var


def custom_variable(name: str, label: str, values: list[str], default: str) -> dict[str, Any]:
    return {
        "name": name, "label": label, "type": "custom", "query": ",".join(values),
        "current": {"selected": True, "text": default, "value": default},
        "options": [{"selected": v == default, "text": v, "value": v} for v in values],
        "multi": False, "includeAll": False, "hide": 0, "skipUrlSync": False,
    }


# ---- shared expressions ----------------------------------------------------------------------

BUSY = f"rate(dask_gpu_busy_seconds_total{{{W}}}[{RATE}])"
# GPUs ranked by their highest memory use over the range as a share of capacity.
MEMORY_RANK = (f"max_over_time(dask_gpu_memory_used_bytes{{{W}}}[$__range] @ end()) "
               f"/ max_over_time(dask_gpu_memory_total_bytes{{{W}}}[$__range] @ end())")
# The job, prefix and activity panels read what the rules file's dask-metrics.dashboards
# group records (deploy/helm/dask-metrics/files/prometheus-rules.yaml): joined and summed
# there every 15 s, they stay fast over thousands of GPUs.
WJ = f'job_id=~"$job_id", {W}'
JOB_SEL = 'job_id=~"$job_id"'
TASKS = f"dask_job_worker_tasks{{{WJ}}}"


def recorded(level: str, metric: str, operation: str, selector: str) -> str:
    """A series of the dashboards recording group, limited by ``selector``."""
    return f"dask_cluster_{level}:{metric}:{operation}{{{selector}}}"


# Per worker and job: the job's share of the worker's busy / SM- / tensor-active GPUs and of
# its GPUs (held), and the worker's peaks while it runs the job's tasks.
JOB_BUSY = recorded("worker_job", "dask_gpu_busy_seconds", "rate2m", WJ)
JOB_SM = recorded("worker_job", "dask_gpu_sm_active_seconds", "rate2m", WJ)
JOB_TENSOR = recorded("worker_job", "dask_gpu_tensor_active_seconds", "rate2m", WJ)
JOB_HELD = recorded("worker_job", "dask_gpu_info", "count", WJ)
JOB_PEAK = recorded("worker_job", "dask_gpu_memory_peak_bytes", "max", WJ)
JOB_PEAK_RATIO = recorded("worker_job", "dask_gpu_memory_peak_bytes", "max_ratio", WJ)
JOB_RMM_USED = recorded("worker_job", "dask_job_worker_rmm_used_bytes", "max", WJ)
JOB_RMM_POOL = recorded("worker_job", "dask_job_worker_rmm_pool_bytes", "max", WJ)
PREFIX_BUSY = recorded("job_prefix", "dask_gpu_busy_seconds", "rate2m", JOB_SEL)
GPU_BUSY = recorded("worker_gpu", "dask_gpu_busy_seconds", "rate2m", W)
ACTIVITY_TIME = recorded("job_activity", "dask_job_activity_seconds", "rate2m", JOB_SEL)
PREFIX_TIME = recorded("job_prefix", "dask_job_activity_seconds", "rate2m", JOB_SEL)
DAG_NAMED = ("{status} * ignoring(job_name, client) group_left(job_name, client) {info}")
PREFIX_KEYS = "scheduler_start, job_id, prefix"


def top_prefixes(series: str) -> str:
    """``series`` summed per job and prefix, the ``$top`` largest over the time range only:
    a fleet runs thousands of (job, prefix) pairs in a day."""
    per = f"sum by ({PREFIX_KEYS}) ({series})"
    return (f"{per} and on({PREFIX_KEYS}) topk($top, sum by ({PREFIX_KEYS}) "
            f"(sum_over_time({series}[$__range] @ end())))")


def top_gpus(series: str, rank: str, pick: str = "topk") -> str:
    """``series`` of the ``$top`` GPUs ranked by ``rank`` (one value per GPU at the range's
    end): thousands of GPUs are no chart, and matching them step by step is slow."""
    return f"{series} and on(worker, gpu) {pick}($top, {rank})"


def top_workers(series: str, rank: str, pick: str = "topk") -> str:
    """``series`` of the ``$workers_shown`` workers ranked by ``rank`` (one value per worker
    at the range's end), as ``top_gpus``."""
    return f"{series} and on(worker) {pick}($workers_shown, {rank})"


def over_range(fn: str, metric: str) -> str:
    """Each worker's ``fn`` (max_over_time, ...) of ``metric`` over the time range: a
    ``top_workers`` rank."""
    return f"max by (worker) ({fn}({metric}{{{W}}}[$__range] @ end()))"


# ---- the dashboards --------------------------------------------------------------------------


def cluster() -> Dashboard:
    d = Dashboard(
        "dask-metrics-cluster", "Dask GPU / cluster overview",
        "Every GPU of every Dask worker: utilisation, memory against capacity, power, busy and "
        "idle GPUs during jobs, shared GPUs. Series from the dask-metrics GPU exporter "
        "(dask_gpu_*) and the scheduler preload (dask_job_*).")
    d.variable(query_variable("worker", "Worker", "label_values(dask_gpu_info, worker)"))
    d.variable(custom_variable("idle_below", "Idle below", ["0.01", "0.05", "0.1", "0.2"], "0.05"))
    d.variable(custom_variable("top", "GPUs shown", ["16", "64", "256", "1024"], "64"))
    d.row("Now")
    d.add(
        stat("GPUs", "GPUs the exporters report (dask_gpu_info).", "none",
             [target(f"count(dask_gpu_info{{{W}}})", "GPUs", instant=True)]),
        stat("Workers", "Dask workers with GPU series.", "none",
             [target(f"count(count by (worker) (dask_gpu_info{{{W}}}))", "workers",
                     instant=True)]),
        stat("GPUs not answering", "GPUs whose last sample failed (dask_gpu_up 0): lost, "
             "reset, or a driver error.", "none",
             [target(f"count(dask_gpu_up{{{W}}} == 0) or vector(0)", "down", instant=True)],
             steps=thresholds((None, "green"), (1, "red"))),
        stat("Shared GPUs", "GPUs (by UUID) that the worker preload reports for more than one "
             "worker (dask_job_worker_gpu_info): those workers compete for one device.", "none",
             [target("count(count by (uuid) (dask_job_worker_gpu_info) > 1) or vector(0)",
                     "shared", instant=True)],
             steps=thresholds((None, "green"), (1, "orange"))),
        stat("Simulated GPUs", "GPUs served by `--simulate`: synthetic values, not "
             "measurements.", "none",
             [target(f'count(dask_gpu_info{{simulated="true", {W}}}) or vector(0)',
                     "simulated", instant=True)],
             steps=thresholds((None, "green"), (1, "purple"))),
        stat("Mean GPU utilisation", "Mean busy share of the selected GPUs over "
             "$__rate_interval, from dask_gpu_busy_seconds_total (exact whatever the scrape "
             "interval).", "percentunit",
             [target(f"avg({BUSY})", "utilisation", instant=True)], min_=0, max_=1,
             steps=thresholds((None, "blue"), (0.3, "green"))),
        stat("GPU memory in use", "Memory used over memory capacity, all selected GPUs.",
             "percentunit",
             [target(f"sum(dask_gpu_memory_used_bytes{{{W}}}) / "
                     f"sum(dask_gpu_memory_total_bytes{{{W}}})", "memory", instant=True)],
             min_=0, max_=1, steps=thresholds((None, "green"), (0.8, "orange"), (0.95, "red"))),
        stat("Power draw", "Board power of the selected GPUs.", "watt",
             [target(f"sum(dask_gpu_power_watts{{{W}}})", "power", instant=True)]),
    )
    d.row("Utilisation")
    d.add(timeline(
        "GPU utilisation per worker and GPU",
        "Mean utilisation over $__rate_interval, one row per GPU (rate of "
        "dask_gpu_busy_seconds_total), of the `GPUs shown` least used over the time range "
        "(all of them on a smaller cluster). Click a row for that worker's dashboard.",
        "percentunit",
        [target(top_gpus(BUSY, f"rate(dask_gpu_busy_seconds_total{{{W}}}[$__range] @ end())",
                         "bottomk"), "{{worker}} / GPU {{gpu}}")], min_=0, max_=1,
        color={"mode": "continuous-BlYlRd"}, links=[WORKER_LINK],
        h=9))
    d.add(
        timeseries(
            "Busy and idle GPUs",
            "GPUs at or above the `Idle below` utilisation, GPUs below it, and idle GPUs whose "
            "worker is running tasks right now (dask_job_worker_tasks): a job holds them "
            "without using them. Utilisation over 2 minutes, from the recording rules.",
            "none",
            [target(f"count({GPU_BUSY} >= $idle_below) or vector(0)", "busy"),
             target(f"count({GPU_BUSY} < $idle_below) or vector(0)", "idle"),
             target(f"count(({GPU_BUSY} < $idle_below) and on(worker) "
                    "(sum by (worker) (dask_job_worker_tasks) > 0)) or vector(0)",
                    "idle while their worker runs tasks")],
            w=16, min_=0,
            overrides=[{"matcher": {"id": "byName",
                                    "options": "idle while their worker runs tasks"},
                        "properties": [{"id": "color", "value": {"mode": "fixed",
                                                                 "fixedColor": "red"}}]}]),
        stat("Current job and DAG", "The oldest unfinished DAG (dask_job_current_job / "
             "_dag); idle when nothing runs.", "none",
             [target("max(dask_job_current_job)", "job", instant=True),
              target("max(dask_job_current_dag)", "DAG", instant=True)],
             w=8, h=8, mappings=IDLE),
    )
    d.row("Memory")
    d.add(
        timeseries(
            "GPU memory in use", "Memory used over capacity, per GPU, of the `GPUs shown` "
            "fullest over the time range.", "percentunit",
            [target(f"({top_gpus(f'dask_gpu_memory_used_bytes{{{W}}}', MEMORY_RANK)}) "
                    f"/ dask_gpu_memory_total_bytes{{{W}}}",
                    "{{worker}} / GPU {{gpu}}")], min_=0, max_=1, links=[WORKER_LINK]),
        table(
            "Memory per GPU: now, peak, capacity",
            "Used now, the peak over the dashboard's time range (from "
            "dask_gpu_memory_peak_bytes, which keeps spikes between scrapes), capacity, and "
            "the peak as a share of capacity.", "bytes",
            [target(f"dask_gpu_memory_used_bytes{{{W}}}", "used", instant=True, table=True),
             target(f"max_over_time(dask_gpu_memory_peak_bytes{{{W}}}[$__range])", "peak",
                    instant=True, table=True),
             target(f"dask_gpu_memory_total_bytes{{{W}}}", "total", instant=True, table=True),
             target(f"max_over_time(dask_gpu_memory_peak_bytes{{{W}}}[$__range]) / "
                    f"dask_gpu_memory_total_bytes{{{W}}}", "peak share", instant=True,
                    table=True)],
            w=12, order=("worker", "gpu", "uuid"),
            rename={"Value #A": "used", "Value #B": "peak", "Value #C": "capacity",
                    "Value #D": "peak / capacity"},
            overrides=[unit_override("peak / capacity", "percentunit", min=0, max=1)]),
    )
    d.row("Power and temperature")
    d.add(
        timeseries("Power draw", "Board power per GPU, of the `GPUs shown` drawing the most "
                   "over the time range.", "watt",
                   [target(top_gpus(f"dask_gpu_power_watts{{{W}}}",
                                    f"avg_over_time(dask_gpu_power_watts{{{W}}}[$__range] "
                                    "@ end())"), "{{worker}} / GPU {{gpu}}")], w=10),
        timeseries("Temperature", "GPU core temperature, of the `GPUs shown` hottest over the "
                   "time range.", "celsius",
                   [target(top_gpus(f"dask_gpu_temperature_celsius{{{W}}}",
                                    f"max_over_time(dask_gpu_temperature_celsius{{{W}}}"
                                    "[$__range] @ end())"), "{{worker}} / GPU {{gpu}}")],
                   w=10),
        stat("Energy in range", "Energy the selected GPUs used over the dashboard's time "
             "range (dask_gpu_energy_joules_total).", "joule",
             [target(f"sum(increase(dask_gpu_energy_joules_total{{{W}}}[$__range]))",
                     "energy", instant=True)], w=4, h=8),
    )
    d.row("Shared GPUs")
    d.add(table(
        "GPUs shared by several workers",
        "Workers whose preload reports the same GPU UUID (dask_job_worker_gpu_info): they "
        "share one device's memory and compute. Empty when no GPU is shared.", "none",
        [target(f"dask_job_worker_gpu_info{{{W}}} and on(uuid) "
                "(count by (uuid) (dask_job_worker_gpu_info) > 1)", "{{uuid}} {{worker}}",
                instant=True, table=True)],
        h=6, merge=False, hide=("Value",), order=("uuid", "worker", "address", "gpu")))
    return d


def worker() -> Dashboard:
    d = Dashboard(
        "dask-metrics-worker", "Dask GPU / worker",
        "One Dask worker: each of its GPUs, the memory of its processes, what it runs, and "
        "the health of its GPU exporter (dask_gpu_exporter_*).")
    d.variable(query_variable("worker", "Worker", "label_values(dask_gpu_info, worker)",
                              multi=False, include_all=False))
    d.variable(query_variable("gpu", "GPU", 'label_values(dask_gpu_info{worker=~"$worker"}, gpu)'))
    d.row("GPUs")
    d.add(table(
        "GPUs of this worker", "Name, UUID, PCI bus, driver and host of each GPU "
        "(dask_gpu_info). simulated=true: synthetic values from `--simulate`.", "none",
        [target(f"dask_gpu_info{{{GW}}}", "{{gpu}}", instant=True, table=True)],
        h=5, merge=False, hide=("Value",),
        order=("worker", "gpu", "uuid", "name", "pci_bus_id", "driver_version", "hostname",
               "simulated")))
    d.add(
        timeline("GPU answering", "dask_gpu_up: red while a GPU does not answer NVML "
                 "(lost, reset, driver error); its value series are absent meanwhile.", "none",
                 [target(f"dask_gpu_up{{{GW}}}", "GPU {{gpu}}")], w=12, h=6,
                 mappings=GPU_UP, show_value="auto"),
        timeseries("Tasks running on this worker", "Tasks of each job and DAG processing on "
                   "this worker (scheduler preload, dask_job_worker_tasks).", "none",
                   [target("sum by (scheduler_start, job_id, dag_id) "
                           f"(dask_job_worker_tasks{{{W}}})",
                           "job {{job_id}} / DAG {{dag_id}}")], w=12, h=6, stack=True),
    )
    d.add(
        timeseries("Utilisation", "Mean utilisation over $__rate_interval (from "
                   "dask_gpu_busy_seconds_total) and memory bandwidth utilisation (share of "
                   "time memory was read or written; not how full it is).", "percentunit",
                   [target(f"rate(dask_gpu_busy_seconds_total{{{GW}}}[{RATE}])",
                           "GPU {{gpu}} compute"),
                    target(f"dask_gpu_memory_bandwidth_utilization_ratio{{{GW}}}",
                           "GPU {{gpu}} memory bandwidth")], min_=0, max_=1),
        timeseries("Memory", "Used, peak over the exporter's trailing window (spikes between "
                   "scrapes included), reserved by the driver, and capacity.", "bytes",
                   [target(f"dask_gpu_memory_used_bytes{{{GW}}}", "GPU {{gpu}} used"),
                    target(f"dask_gpu_memory_peak_bytes{{{GW}}}", "GPU {{gpu}} peak"),
                    target(f"dask_gpu_memory_reserved_bytes{{{GW}}}", "GPU {{gpu}} reserved"),
                    target(f"dask_gpu_memory_total_bytes{{{GW}}}", "GPU {{gpu}} capacity")],
                   min_=0),
    )
    d.add(
        timeseries("Memory of the worker's processes", "GPU memory of each process of this "
                   "worker (dask_gpu_process_memory_used_bytes; needs the worker's pids, from "
                   "the worker preload, visible to NVML).", "bytes",
                   [target(f"dask_gpu_process_memory_used_bytes{{{GW}}}",
                           "GPU {{gpu}} pid {{pid}}")], w=12, stack=True, min_=0),
        timeseries("Power", "Board power per GPU.", "watt",
                   [target(f"dask_gpu_power_watts{{{GW}}}", "GPU {{gpu}}")], w=6),
        timeseries("Temperature", "GPU core temperature.", "celsius",
                   [target(f"dask_gpu_temperature_celsius{{{GW}}}", "GPU {{gpu}}")], w=6),
    )
    d.add(
        timeseries("SM clock", "Streaming-multiprocessor clock.", "hertz",
                   [target(f"dask_gpu_sm_clock_hertz{{{GW}}}", "GPU {{gpu}}")], w=12, h=6),
        timeseries("Energy", "Energy used per $__rate_interval "
                   "(dask_gpu_energy_joules_total).", "joule",
                   [target(f"increase(dask_gpu_energy_joules_total{{{GW}}}[{RATE}])",
                           "GPU {{gpu}}")], w=12, h=6),
    )
    d.row("What the SMs did (NVML GPM: Hopper and newer GPUs)")
    d.add(
        timeseries("SM and tensor activity against utilisation", "Mean over "
                   "$__rate_interval of the share of SMs active and of tensor-core activity "
                   "(dask_gpu_sm_active_seconds_total, dask_gpu_tensor_active_seconds_total: "
                   "GPM's own counters), beside NVML's utilisation, which counts a GPU busy "
                   "whenever any kernel runs, however few SMs it uses. Empty on GPUs "
                   "without GPM.", "percentunit",
                   [target(f"rate(dask_gpu_sm_active_seconds_total{{{GW}}}[{RATE}])",
                           "GPU {{gpu}} SMs active"),
                    target(f"rate(dask_gpu_tensor_active_seconds_total{{{GW}}}[{RATE}])",
                           "GPU {{gpu}} tensor cores"),
                    target(f"rate(dask_gpu_busy_seconds_total{{{GW}}}[{RATE}])",
                           "GPU {{gpu}} utilisation (NVML)")], min_=0, max_=1),
        timeseries("Occupancy, memory bandwidth and pipes", "GPM means over the exporter's "
                   "last sampling interval: resident warps against the maximum, DRAM "
                   "bandwidth against its peak, and the FP64/FP32/FP16 (non-tensor) pipes.",
                   "percentunit",
                   [target(f"dask_gpu_sm_occupancy_ratio{{{GW}}}", "GPU {{gpu}} occupancy"),
                    target(f"dask_gpu_dram_active_ratio{{{GW}}}", "GPU {{gpu}} DRAM"),
                    target(f"dask_gpu_fp64_active_ratio{{{GW}}}", "GPU {{gpu}} FP64"),
                    target(f"dask_gpu_fp32_active_ratio{{{GW}}}", "GPU {{gpu}} FP32"),
                    target(f"dask_gpu_fp16_active_ratio{{{GW}}}", "GPU {{gpu}} FP16")],
                   min_=0, max_=1),
    )
    d.add(timeseries(
        "RMM pool and use", "The worker's RMM pool and the bytes allocated from it, from its "
        "heartbeats (scheduler preload; needs rmm on the worker, and dask-cuda's "
        "--rmm-track-allocations for the use), beside NVML's used memory, which counts the "
        "whole pool.", "bytes",
        [target(f"dask_job_worker_rmm_pool_bytes{{{W}}}", "{{worker}} RMM pool"),
         target(f"dask_job_worker_rmm_used_bytes{{{W}}}", "{{worker}} RMM in use"),
         target(f"sum by (worker) (dask_gpu_memory_used_bytes{{{GW}}})",
                "{{worker}} used (NVML)")], w=24, h=7, min_=0))
    d.row("Exporter health")
    d.add(
        stat("NVML", "dask_gpu_exporter_nvml_up: the exporter could initialise NVML (or "
             "serves simulated GPUs).", "none",
             [target(f"dask_gpu_exporter_nvml_up{{{W}}}", "{{worker}}", instant=True)],
             w=4, mappings=NVML_UP),
        stat("Last sample", "Seconds since the exporter's last completed sampling round; "
             "/healthz fails when it stalls.", "s",
             [target(f"time() - dask_gpu_exporter_last_sample_timestamp_seconds{{{W}}}",
                     "{{worker}}", instant=True)],
             w=4, steps=thresholds((None, "green"), (10, "orange"), (60, "red"))),
        stat("NVML errors in range", "Failed NVML calls over the dashboard's time range "
             "(unsupported calls are not errors).", "none",
             [target(f"sum(increase(dask_gpu_exporter_nvml_errors_total{{{W}}}[$__range])) "
                     "or vector(0)", "errors", instant=True)],
             w=4, steps=thresholds((None, "green"), (1, "orange"))),
        timeseries("Sampling", "Sampling rounds per second and the duration of the last "
                   "round over all GPUs.", "hertz",
                   [target(f"rate(dask_gpu_exporter_samples_total{{{W}}}[{RATE}])",
                           "{{worker}} rounds per second"),
                    target(f"dask_gpu_exporter_sample_duration_seconds{{{W}}}",
                           "{{worker}} round duration")],
                   w=12, h=8, min_=0,
                   overrides=[{"matcher": {"id": "byRegexp", "options": ".*round duration"},
                               "properties": [{"id": "unit", "value": "s"},
                                              {"id": "custom.axisPlacement",
                                               "value": "right"}]}]),
    )
    d.add(timeseries(
        "NVML errors by call", "Failed NVML calls per second by call and NVML error "
        "(dask_gpu_exporter_nvml_errors_total). A lost GPU fails every sample until it "
        "comes back.", "cps",
        [target(f"sum by (call, error) (rate(dask_gpu_exporter_nvml_errors_total{{{W}}}"
                f"[{RATE}]))", "{{call}}: {{error}}")], w=24, h=7, min_=0))
    return d


def jobs() -> Dashboard:
    d = Dashboard(
        "dask-metrics-jobs", "Dask GPU / jobs and DAGs",
        "Which job and DAG ran on which worker, when, with which outcome, and what each job "
        "cost in GPU time and memory. Job/DAG series from the scheduler preload, joined with "
        "the GPU series on the worker label.")
    d.variable(query_variable("job_id", "Job", "label_values(dask_job_dag_info, job_id)"))
    d.variable(query_variable("worker", "Worker", "label_values(dask_gpu_info, worker)"))
    d.variable(custom_variable("top", "Prefixes shown", ["10", "20", "50", "100", "1000"], "20"))
    d.variable(custom_variable("workers_shown", "Workers shown",
                               ["10", "20", "50", "100", "1000", "10000"], "20"))
    d.variable(custom_variable("rows_shown", "Rows shown",
                               ["100", "500", "1000", "10000", "100000"], "500"))
    d.row("Timeline")
    d.add(timeline(
        "Which job and DAG ran on which worker",
        "One row per worker and DAG, coloured while the worker processed tasks of that DAG "
        "(dask_job_worker_tasks; the value is the number of tasks), of the `Workers shown` "
        "that processed the selected jobs' tasks longest over the time range (a fleet's "
        "thousands of rows are no chart: pick workers, or show more).", "none",
        [target(top_workers(f"max by (worker, scheduler_start, job_id, dag_id) ({TASKS})",
                            f"sum by (worker) (count_over_time({TASKS}[$__range] @ end()))"),
                "{{worker}} / job {{job_id}} / DAG {{dag_id}}")],
        h=10, show_value="auto", color={"mode": "continuous-GrYlRd"}, min_=0))
    d.add(
        timeline("DAG status", "Each DAG from submission to its end: waiting, running, "
                 "finished, erred (dask_job_dag_status, named from dask_job_dag_info).",
                 "none",
                 [target(DAG_NAMED.format(status='dask_job_dag_status{job_id=~"$job_id"}',
                                          info="dask_job_dag_info"),
                         "{{job_name}} / job {{job_id}} / DAG {{dag_id}}")],
                 w=12, h=9, mappings=DAG_STATUS, show_value="auto"),
        timeseries("Tasks running per job", "Tasks processing on the selected workers, by "
                   "job.", "none",
                   [target("sum by (scheduler_start, job_id) "
                           '(dask_job_worker_tasks{job_id=~"$job_id", '
                           + W + "})", "job {{job_id}}")], w=12, h=9, stack=True, min_=0),
    )
    d.row("Cost per job")
    d.add(table(
        "Jobs: GPU time and peak memory",
        "Per job over the dashboard's time range. GPU-hours busy: each worker's GPU busy time "
        "(dask_gpu_busy_seconds_total), shared among the jobs running tasks on it in "
        "proportion to their tasks, summed. GPU-hours held: the same with the worker's GPU "
        "count instead of its busy time. Peak memory: the highest peak "
        "(dask_gpu_memory_peak_bytes) of a GPU of a worker while it ran the job's tasks. "
        "From the dask-metrics recording rules (sampled every 15 s: `collector report` has "
        "the exact numbers).",
        "none",
        [target("max by (scheduler_start, job_id, job_name) (last_over_time(dask_job_dag_info"
                '{job_id=~"$job_id"}[$__range]))', "{{job_name}}", instant=True, table=True),
         target("count by (scheduler_start, job_id) "
                '(last_over_time(dask_job_dag_info{job_id=~"$job_id"}'
                "[$__range]))", "DAGs", instant=True, table=True),
         target("sum by (scheduler_start, job_id) "
                f"(sum_over_time(({JOB_BUSY})[$__range:$__interval])) "
                "* $__interval_ms / 3600000", "busy", instant=True, table=True),
         target("sum by (scheduler_start, job_id) "
                f"(sum_over_time(({JOB_HELD})[$__range:$__interval])) "
                "* $__interval_ms / 3600000", "held", instant=True, table=True),
         target(f"max by (scheduler_start, job_id) (max_over_time({JOB_PEAK}[$__range]))",
                "peak", instant=True, table=True),
         target(f"max by (scheduler_start, job_id) (max_over_time({JOB_PEAK_RATIO}"
                "[$__range]))", "peak share", instant=True, table=True)],
        h=8, hide=("Value #A",), order=("scheduler_start", "job_id", "job_name"),
        rename={"scheduler_start": "scheduler start", "job_id": "job", "job_name": "name",
                "Value #B": "DAGs",
                "Value #C": "GPU-hours busy", "Value #D": "GPU-hours held",
                "Value #E": "peak memory", "Value #F": "peak / capacity"},
        overrides=[unit_override("GPU-hours busy", "suffix: GPU-h", decimals=3),
                   unit_override("GPU-hours held", "suffix: GPU-h", decimals=3),
                   unit_override("peak memory", "bytes"),
                   unit_override("peak / capacity", "percentunit")]))
    d.add(
        timeseries("GPUs busy per job", "Busy GPU-equivalents attributed to each job (the "
                   "integrand of GPU-hours busy): a worker's busy time split among the jobs "
                   "running tasks on it (recording rules).", "none",
                   [target(f"sum by (scheduler_start, job_id) ({JOB_BUSY})", "job {{job_id}}")],
                   w=12, h=8,
                   stack=True, min_=0),
        timeseries("SMs and tensor cores busy per job", "The same split of the GPUs' GPM "
                   "activity (Hopper and newer): SM-active and tensor-active GPU-equivalents "
                   "per job. Far below the busy GPUs beside: the job's kernels leave most "
                   "SMs idle.", "none",
                   [target(f"sum by (scheduler_start, job_id) ({JOB_SM})", "job {{job_id}} SMs"),
                    target(f"sum by (scheduler_start, job_id) ({JOB_TENSOR})",
                           "job {{job_id}} tensor cores")],
                   w=12, h=8, min_=0),
    )
    d.add(table(
        "Jobs: RMM", "Per job over the dashboard's time range: the largest RMM use and pool "
        "of a worker while it ran the job's tasks (worker heartbeats, so the use is sampled: "
        "a lower bound). NVML's peak memory counts a whole pool as used.", "bytes",
        [target(f"max by (scheduler_start, job_id) (max_over_time({JOB_RMM_USED}[$__range]))",
                "RMM in use", instant=True, table=True),
         target(f"max by (scheduler_start, job_id) (max_over_time({JOB_RMM_POOL}[$__range]))",
                "RMM pool", instant=True, table=True)],
        w=24, h=6, order=("scheduler_start", "job_id",),
        rename={"scheduler_start": "scheduler start", "job_id": "job",
                "Value #A": "peak RMM in use", "Value #B": "RMM pool"}))
    d.row("Where the time went")
    d.add(
        timeseries("Time per activity", "Dask's fine performance metrics of the selected "
                   "jobs' tasks (dask_job_activity_seconds_total): seconds per second, i.e. "
                   "threads busy, by activity: thread-cpu, thread-noncpu (I/O, GPU, GIL), "
                   "disk-read/write (spilling), custom context_meter labels...", "short",
                   [target(f"sum by (activity) ({ACTIVITY_TIME})", "{{activity}}")],
                   w=12, h=9, stack=True, min_=0),
        timeseries("Time per task prefix", "The same, by job and task prefix (prefixes "
                   "beyond the scheduler's max-prefixes-per-job are added up as 'other'), "
                   "of the `Prefixes shown` with the most time in the range.",
                   "short",
                   [target(top_prefixes(PREFIX_TIME),
                           "job {{job_id}} / {{prefix}}")],
                   w=12, h=9, stack=True, min_=0),
    )
    d.add(table(
        "Time per job, prefix and activity", "Seconds over the dashboard's time range "
        "(increase of dask_job_activity_seconds_total): the `Rows shown` with the most "
        "seconds (a fleet's day holds hundreds of thousands).", "s",
        [target("topk($rows_shown, sum by (scheduler_start, job_id, prefix, activity) "
                "(increase(dask_job_activity_seconds_total"
                "{" + JOB_SEL + "}[$__range])))", "{{activity}}", instant=True, table=True)],
        w=12, h=9, merge=False, order=("scheduler_start", "job_id", "prefix", "activity"),
        rename={"Value": "seconds", "scheduler_start": "scheduler start", "job_id": "job"}))
    d.add(timeseries(
        "GPUs busy per task prefix", "Busy GPU-equivalents attributed to each job's task "
        "prefixes: a worker's GPU busy time split among the prefixes executing on it "
        "(dask_job_worker_prefix_tasks) in proportion to their tasks, summed over all "
        "workers; the `Prefixes shown` with the most GPU time in the range (recording "
        "rules).", "none",
        [target(top_prefixes(PREFIX_BUSY),
                "job {{job_id}} / {{prefix}}")],
        w=12, h=9, stack=True, min_=0))
    d.row("Workers: memory and CPU beside the GPUs")
    rss = over_range("max_over_time", "dask_job_worker_memory_bytes")
    d.add(
        timeseries("Worker memory", "Process memory of each worker (RSS) and the managed "
                   "part (task results in RAM), from its heartbeats; spilled to disk beside. "
                   "The `Workers shown` with the largest RSS over the time range.", "bytes",
                   [target(top_workers(f"dask_job_worker_memory_bytes{{{W}}}", rss),
                           "{{worker}} process"),
                    target(top_workers(f"dask_job_worker_managed_memory_bytes{{{W}}}", rss),
                           "{{worker}} managed"),
                    target(top_workers(f"dask_job_worker_spilled_bytes{{{W}}}", rss),
                           "{{worker}} spilled")],
                   w=8, h=8, min_=0),
        timeseries("Worker CPU", "CPU of each worker process in cores (1 = one core busy), "
                   "from its heartbeats: the `Workers shown` busiest over the time range.",
                   "short",
                   [target(top_workers(f"dask_job_worker_cpu_ratio{{{W}}}",
                                       over_range("avg_over_time", "dask_job_worker_cpu_ratio")),
                           "{{worker}}")], w=8, h=8, min_=0),
        timeseries("GPU utilisation per worker", "Mean utilisation of each worker's GPUs "
                   "(dask_gpu_busy_seconds_total), beside its CPU and memory: the `Workers "
                   "shown` least used over the time range.", "percentunit",
                   [target(top_workers(f"avg by (worker) ({BUSY})",
                                       "avg by (worker) (rate(dask_gpu_busy_seconds_total"
                                       f"{{{W}}}[$__range] @ end()))", "bottomk"),
                           "{{worker}}")], w=8, h=8, min_=0, max_=1),
    )
    pool = over_range("max_over_time", "dask_job_worker_rmm_pool_bytes")
    d.add(timeseries(
        "RMM per worker", "Each worker's RMM pool and the bytes in use in it (heartbeats; "
        "absent on workers without rmm): the `Workers shown` with the largest pools over "
        "the time range.", "bytes",
        [target(top_workers(f"dask_job_worker_rmm_pool_bytes{{{W}}}", pool), "{{worker}} pool"),
         target(top_workers(f"dask_job_worker_rmm_used_bytes{{{W}}}", pool),
                "{{worker}} in use")],
        w=24, h=7, min_=0))
    d.row("DAGs")
    d.add(
        table("DAGs", "Every DAG seen in the time range with its last status "
              "(finished DAGs are exported for the scheduler's finished-dag-ttl after they "
              "end).", "none",
              [target(DAG_NAMED.format(
                  status='last_over_time(dask_job_dag_status{job_id=~"$job_id"}[$__range])',
                  info='last_over_time(dask_job_dag_info{job_id=~"$job_id"}[$__range])'),
                  "{{job_name}} {{dag_id}}", instant=True, table=True)],
              w=12, h=9, merge=False,
              order=("scheduler_start", "job_id", "dag_id", "job_name", "client"),
              rename={"Value": "status", "scheduler_start": "scheduler start", "job_id": "job",
                      "dag_id": "DAG"},
              mappings=DAG_STATUS),
        timeseries("DAGs ending", "DAGs that finished or erred per $__rate_interval "
                   "(dask_job_dags_completed_total).", "none",
                   [target(f"sum by (status) (increase(dask_job_dags_completed_total[{RATE}]))",
                           "{{status}}")], w=6, h=9, min_=0,
                   overrides=[{"matcher": {"id": "byName", "options": "erred"},
                               "properties": [{"id": "color", "value": {
                                   "mode": "fixed", "fixedColor": "red"}}]}]),
        stat("Last monitor session", "Start and stop of the last Monitor session "
             "(dask_job_monitor_*_timestamp_seconds); running while it has no stop.",
             "dateTimeAsIso",
             [target("max(dask_job_monitor_start_timestamp_seconds) * 1000", "start",
                     instant=True),
              target("max(dask_job_monitor_stop_timestamp_seconds) * 1000", "stop",
                     instant=True)],
             w=6, h=9, mappings=value_map({"0": ("running", "green")}),
             options={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                        "values": False},
                      "colorMode": "none", "graphMode": "none", "justifyMode": "auto",
                      "orientation": "horizontal", "textMode": "value_and_name",
                      "wideLayout": True}),
    )
    return d


DASHBOARDS = {"dask-metrics-cluster.json": cluster, "dask-metrics-worker.json": worker,
              "dask-metrics-jobs.json": jobs}


def render() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {name: json.dumps(build().json(), indent=2, ensure_ascii=False) + "\n"
            for name, build in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="only compare the files with this source; exit 1 on a difference")
    args = parser.parse_args(argv)
    stale = []
    for name, text in render().items():
        for folder in OUTPUTS:
            path = folder / name
            current = path.read_text(encoding="utf-8") if path.exists() else None
            if current == text:
                continue
            if args.check:
                stale.append(str(path.relative_to(ROOT)))
            else:
                folder.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("out of date (run python grafana/generate.py): " + ", ".join(stale),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
