"""Every ``dask_gpu_*``/``dask_job_*`` series, every label a dashboard or an alert filters on
and every scheduler handler that any file of the project names is declared in
``dask_metrics.contract``: a name retyped wrong anywhere fails here, not on a user's
dashboard. And the code reads its names from the contract instead of retyping them."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

from dask_metrics import contract
from dask_metrics.collector.model import columns
from dask_metrics.collector.output import csv_lines as layouts
from dask_metrics.exporter.job_tracker import JobTracker

ROOT = Path(__file__).resolve().parent.parent

METRIC = re.compile(r"\bdask_(?:gpu|job)_[a-z0-9_]*")
HANDLER = re.compile(r"\bdask_metrics_[a-z0-9_]+")
# Python names that look like series but are not: benchmark helpers, Dask's own modules.
NOT_SERIES = {"dask_job_series"}
# Labels that Prometheus (job, instance), the Prometheus Operator's relabelling (namespace,
# pod, container, service, endpoint) and PromQL itself (__name__, le) put on series.
SCRAPE_LABELS = {"job", "instance", "namespace", "pod", "container", "service", "endpoint",
                 "__name__", "le"}


def project_files() -> list[Path]:
    """Text files that can name series: code, docs, dashboards, chart, images."""
    globs = ["*.md", "docs/*.md", "dask_metrics/**/*.py", "exporter/**/*.py",
             "exporter/*.yaml", "collector/**/*.py", "grafana/**/*.py", "grafana/**/*.json",
             "grafana/**/*.yaml", "deploy/**/*.yaml", "deploy/**/*.json", "deploy/**/*.tpl",
             "deploy/**/*.txt", "deploy/**/*.md", "docker/**/*", "benchmarks/*.py"]
    found = {p for g in globs for p in ROOT.glob(g) if p.is_file() and "__pycache__" not in p.parts}
    return sorted(found)


SPEC_NAMES = {spec.name for spec in contract.SPECS}
# A counter's family name (what prometheus_client's API takes) is its name without _total.
FAMILY_NAMES = SPEC_NAMES | {s.name.removesuffix("_total") for s in contract.SPECS
                             if s.type == "counter"}
HANDLERS = {v for k, v in vars(contract.Handler).items() if k.isupper()}
DYNAMIC = ((contract.ACTIVITY_FAMILY, contract.activity_spec),
           (contract.CLUSTER_ACTIVITY_FAMILY, contract.cluster_activity_spec))


def dynamic_family(token: str) -> bool:
    """A family that contract.activity_spec/cluster_activity_spec builds for some Dask unit
    (custom units get one of their own): its name, or that name without _total."""
    for family, make in DYNAMIC:
        if token.startswith(family):
            unit = token.removeprefix(family)
            if not token.endswith("_total"):
                unit += "_total"
            unit = unit.removesuffix("_total")
            if unit and unit == contract.safe_unit(unit) and make(unit).name in (
                    token, f"{token}_total"):
                return True
    return False


def test_specs_are_unique_and_follow_prometheus_naming():
    names = [spec.name for spec in contract.SPECS]
    assert len(names) == len(set(names))
    for spec in contract.SPECS:
        assert re.fullmatch(r"dask_(gpu|job)_[a-z0-9_]+", spec.name), spec.name
        assert spec.name.endswith("_total") == (spec.type == "counter"), spec.name
        if spec.unit:
            assert spec.unit in spec.name.removesuffix("_total"), spec.name
        for label in spec.labels:
            assert label not in ("job", "instance"), f"{spec.name}: {label} is Prometheus'"


UNITS = ["seconds", "bytes", "widget count", "S3 £", "", "Count", "seconds_total", "total",
         "Bytes Total", "subtotal"]


@pytest.mark.parametrize("unit", UNITS)
def test_activity_families_of_any_unit_follow_prometheus_naming(unit: str):
    for family, make in DYNAMIC:
        spec = make(unit)
        assert re.fullmatch(family + r"[a-z0-9]+(_[a-z0-9]+)*_total", spec.name), spec.name
        assert not spec.name.endswith("_total_total"), spec.name  # a counter's family name
        assert spec.type == "counter" and spec.unit in spec.name
        assert dynamic_family(spec.name) and dynamic_family(spec.name.removesuffix("_total"))


def test_units_of_distinct_meaning_get_distinct_families():
    """prometheus_client strips one _total from a counter's name: a unit ending in "total"
    must not land in another unit's family (seconds_total in seconds)."""
    families = {contract.activity_spec(u).name.removesuffix("_total") for u in UNITS}
    assert len(families) == len(UNITS)
    assert contract.safe_unit("seconds_total") == "seconds_total_unit"
    assert contract.safe_unit("Subtotal") == "subtotal"


@pytest.mark.parametrize("token", [
    "dask_job_activity_", "dask_job_activity__total", "dask_job_activity_Seconds_total",
    "dask_job_activity_a__b_total", "dask_job_cluster_activity_", "dask_job_activities",
])
def test_names_that_no_unit_builds_are_not_activity_families(token: str):
    assert not dynamic_family(token)


@pytest.mark.parametrize("path", project_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_series_and_handler_named_is_declared(path: Path):
    text = path.read_text(errors="replace")
    unknown = set()
    for token in set(METRIC.findall(text)) - NOT_SERIES:
        if token.endswith("_"):  # a prefix, as in `grep dask_gpu_` or dask_job_*
            if not any(name.startswith(token) for name in SPEC_NAMES):
                unknown.add(token + "*")
        elif token not in FAMILY_NAMES and not dynamic_family(token):
            unknown.add(token)
    # handler names; the package's own identifiers (dask_metrics_submission...) are not calls
    for token in set(HANDLER.findall(text)):
        if token.startswith(("dask_metrics_monitor", "dask_metrics_new", "dask_metrics_dags",
                             "dask_metrics_prometheus", "dask_metrics_cluster")) \
                and token not in HANDLERS:
            unknown.add(token)
    assert not unknown, f"{path.relative_to(ROOT)} names what dask_metrics.contract does not " \
                        f"declare: {sorted(unknown)}"


def promql_expressions() -> list[tuple[str, str]]:
    """(where, expr) of every PromQL expression in the dashboards and the alert rules."""
    found = []
    for board in sorted((ROOT / "grafana" / "dashboards").glob("*.json")):
        def walk(node: object, where: str) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    if key in ("expr", "query", "definition") and isinstance(value, str):
                        found.append((where, value))
                    else:
                        walk(value, where)
            elif isinstance(node, list):
                for item in node:
                    walk(item, where)
        walk(json.loads(board.read_text()), board.name)
    rules = yaml.safe_load((ROOT / "deploy/helm/dask-metrics/files/prometheus-rules.yaml")
                           .read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            found.append((f"alert rule {rule.get('alert') or rule.get('record')}", rule["expr"]))
    return found


LABEL_USES = [
    re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)"),
    re.compile(r"label_values\([^,()]*(?:\([^)]*\))?[^,()]*,\s*([a-z_]+)\s*\)"),
]
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")


def test_dashboards_and_alerts_filter_on_declared_labels():
    declared = {label for spec in contract.SPECS for label in spec.labels}
    exprs = promql_expressions()
    assert len(exprs) > 20  # the dashboards and rules were found
    unknown = set()
    for where, expr in exprs:
        names: set[str] = set()
        for pattern in LABEL_USES:
            for group in pattern.findall(expr):
                names |= {n.strip() for n in group.split(",") if n.strip()}
        for selector in re.findall(r"\{([^{}]*)\}", expr):
            names |= set(MATCHER.findall(selector))
        names = {n for n in names if not n.startswith("$")}  # Grafana variables
        unknown |= {(where, n) for n in names - declared - SCRAPE_LABELS}
    assert not unknown, f"labels not declared in dask_metrics.contract: {sorted(unknown)}"


def test_the_code_reads_its_names_from_the_contract():
    assert {c.metric for c in columns.COLUMNS} <= SPEC_NAMES
    assert [c.name for c in columns.COLUMNS] == [*contract.CSV_METRICS,
                                                 *contract.ACTIVITY_CSV_METRICS,
                                                 *contract.COUNTER_CSV_METRICS,
                                                 *contract.WORKER_CSV_METRICS]
    assert layouts.TIDY_KEYS is contract.TIDY_KEYS
    assert JobTracker is not None and contract.IDLE == -1
    # No module outside the contract spells a series name as a string literal.
    offenders = []
    for folder in ("exporter", "collector", "dask_metrics"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name in ("contract.py",) or "__pycache__" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and re.fullmatch(r"dask_(gpu|job)_[a-z0-9_]+", node.value) \
                        and node.value in SPEC_NAMES:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value}")
    assert not offenders, "use dask_metrics.contract instead of retyping: " + ", ".join(offenders)
