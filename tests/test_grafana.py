"""The Grafana dashboards (grafana/) and their provisioning.

Structure: the rules of grafana/generate.py hold for every dashboard, panel, target and
variable. Live: every panel's queries, evaluated by a real Prometheus that scraped real GPU
exporters (sidecars) and a real scheduler with the scheduler preload while real Dask workers
ran a workload, return data with the labels their legends use: no dead panel.
"""

from __future__ import annotations

import importlib.util
import json
import operator
import os
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from dask_metrics.demo.localstack import LocalStack, StackOptions, WorkerSpec
from dask_metrics.exporter.simulated import simulated_uuid
from tests.fake_nvml import FakeNVML, GiB
from tests.helpers import clean_env, wait_for
from tests.prometheus_helpers import RULES_FILE, every_second_rules, requires_prometheus

ROOT = Path(__file__).resolve().parent.parent
GRAFANA = ROOT / "grafana"
DASHBOARD_DIR = GRAFANA / "dashboards"
CHART_DASHBOARD_DIR = ROOT / "deploy" / "helm" / "dask-metrics" / "dashboards"
STANDIN_RMM = ROOT / "tests" / "standin_rmm"
UIDS = {"dask-metrics-cluster.json": "dask-metrics-cluster",
        "dask-metrics-worker.json": "dask-metrics-worker",
        "dask-metrics-jobs.json": "dask-metrics-jobs"}
DS = {"type": "prometheus", "uid": "${datasource}"}
GRAFANA_VARS = re.compile(r"\$\{(\w+)(?::[\w-]+)?\}|\$(\w+)|\[\[(\w+)\]\]")
LEGEND_LABELS = re.compile(r"\{\{\s*(\w+)\s*\}\}")
RANGE_FUNCS = re.compile(r"\b(rate|irate|increase|delta|idelta|deriv)\(")
# Exported series, and the series the rules file records for the dashboards.
SERIES = r"(?<![\w:])(dask_(?:gpu|job)_[a-z0-9_]+|dask_cluster\w*:\w+:\w+)(?![\w(:])"
SELECTORS = re.compile(SERIES + r"(?:\{([^{}]*)\})?")
CLUSTER_MATCH = 'dask_cluster="$dask_cluster"'
# w1's first simulated GPU, given to w2's fake GPU 0 too: a shared GPU to find
SIMULATED_UUID0 = simulated_uuid(0, host=socket.gethostname(), worker="w1")


def load(name: str) -> dict[str, Any]:
    return json.loads((DASHBOARD_DIR / name).read_text(encoding="utf-8"))


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that shows data (rows' children included, rows themselves not)."""
    for p in dashboard["panels"]:
        if p["type"] == "row":
            yield from p.get("panels", [])
        else:
            yield p


def variables(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return dashboard["templating"]["list"]


def variable_query(var: dict[str, Any]) -> str:
    q = var["query"]
    return q["query"] if isinstance(q, dict) else q


def all_targets() -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    return [(name, p["title"], p, t) for name in UIDS for p in panels(load(name))
            for t in p["targets"]]


# ---- structure -------------------------------------------------------------------------------


def test_generated_files_match_their_source_and_the_charts_copy():
    spec = importlib.util.spec_from_file_location("grafana_generate", GRAFANA / "generate.py")
    assert spec and spec.loader
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    rendered = generate.render()
    assert sorted(rendered) == sorted(UIDS)
    assert sorted(p.name for p in DASHBOARD_DIR.glob("*.json")) == sorted(UIDS)
    assert sorted(p.name for p in CHART_DASHBOARD_DIR.glob("*.json")) == sorted(UIDS)
    for name, text in rendered.items():
        assert (DASHBOARD_DIR / name).read_text(encoding="utf-8") == text, (
            f"grafana/dashboards/{name} is stale: run python grafana/generate.py")
        # One source of truth: the chart ships byte-identical copies.
        assert (CHART_DASHBOARD_DIR / name).read_bytes() == (DASHBOARD_DIR / name).read_bytes()


@pytest.mark.parametrize("name", sorted(UIDS))
def test_dashboard_is_portable_and_stable(name):
    text = (DASHBOARD_DIR / name).read_text(encoding="utf-8")
    d = json.loads(text)
    assert d["id"] is None
    assert d["uid"] == UIDS[name] and len(d["uid"]) <= 40
    assert "__inputs" not in d and "__requires" not in d
    assert "${DS_" not in text and "DS_PROMETHEUS" not in text
    assert "dask-metrics" in d["tags"]
    ds = [v for v in variables(d) if v["name"] == "datasource"]
    assert len(ds) == 1 and ds[0]["type"] == "datasource" and ds[0]["query"] == "prometheus"
    ids = [p["id"] for p in d["panels"]] + [c["id"] for p in d["panels"]
                                            for c in p.get("panels", [])]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)


@pytest.mark.parametrize("name", sorted(UIDS))
def test_variables_come_from_label_values_and_refresh_on_time_change(name):
    d = load(name)
    names = {v["name"] for v in variables(d)}
    used = set()
    for p in panels(d):
        for t in p["targets"]:
            used |= {next(g for g in m.groups() if g) for m in GRAFANA_VARS.finditer(t["expr"])}
    assert {n for n in used if not n.startswith("__")} <= names, "a query uses an unknown var"
    for var in variables(d):
        if var["type"] != "query":
            continue
        assert var["datasource"] == DS
        assert re.fullmatch(r"label_values\([^()]*(\{[^}]*\})?\s*,\s*\w+\)", variable_query(var))
        assert var["refresh"] == 2, f"{var['name']}: refresh on time range change"
        if var.get("includeAll"):
            assert var["allValue"] == ".*"


@pytest.mark.parametrize("name", sorted(UIDS))
def test_every_panel_and_target_follows_the_rules(name):
    d = load(name)
    for p in panels(d):
        where = f"{name}: {p['title']!r}"
        assert p["datasource"] == DS, where
        assert p["fieldConfig"]["defaults"].get("unit"), f"{where} has no unit"
        assert p.get("description"), f"{where} has no description"
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24 and g["h"] > 0, where
        assert p["targets"], where
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), where
        for t in p["targets"]:
            expr = t["expr"]
            assert t["datasource"] == DS, where
            assert expr.strip() and t["legendFormat"], where
            assert t["instant"] != t["range"], where
            assert re.search(r"\bdask_(gpu|job)_\w+", expr), f"{where}: not a dask-metrics series"
            # One Prometheus, many Dask clusters: every selector is limited to the one shown.
            for m in SELECTORS.finditer(expr):
                assert m.group(2) and CLUSTER_MATCH in m.group(2), (
                    f"{where}: {m.group(1)} not limited to $dask_cluster in {expr}")
            # Rates over Grafana's interval, never a hard-coded window: [$__rate_interval]
            # adapts to the scrape interval; [$__range] is for totals over the time range.
            for m in RANGE_FUNCS.finditer(expr):
                window = re.match(r"[^\[]*\[([^\]]+)\]", expr[m.end():])
                assert window and window.group(1) in ("$__rate_interval", "$__range"), (
                    f"{where}: {m.group(1)}() window must be $__rate_interval: {expr}")
            assert not re.search(r"\[\d+[smhd]", expr), f"{where}: fixed range in {expr}"
            # A job is (scheduler_start, job_id): a restarted scheduler numbers its jobs from
            # 0 again, and two lives' job 0 in one time range must not add up.
            for by in re.finditer(r"\bby \(([^)]*)\)", expr):
                keys = {k.strip() for k in by.group(1).split(",")}
                assert "job_id" not in keys or "scheduler_start" in keys, (
                    f"{where}: groups jobs without their scheduler's life: {expr}")
            if p["type"] in ("stat", "table"):
                assert t["instant"], f"{where}: {p['type']} panels query one instant"
            else:
                assert t["range"], f"{where}: {p['type']} panels need a range query"


def test_panels_cover_what_the_issue_asks_for():
    cluster, worker, jobs = (load(n) for n in UIDS)
    exprs = {n: " ".join(t["expr"] for p in panels(load(n)) for t in p["targets"]) for n in UIDS}
    types = {p["type"] for p in panels(cluster)}
    assert "state-timeline" in types or "heatmap" in types
    for series in ("dask_gpu_memory_used_bytes", "dask_gpu_memory_peak_bytes",
                   "dask_gpu_memory_total_bytes", "dask_gpu_power_watts",
                   "dask_job_worker_gpu_info", "dask_job_worker_tasks"):
        assert series in exprs["dask-metrics-cluster.json"], series
    for series in ("dask_gpu_process_memory_used_bytes", "dask_gpu_exporter_nvml_up",
                   "dask_gpu_exporter_nvml_errors_total", "dask_gpu_exporter_samples_total",
                   "dask_gpu_exporter_last_sample_timestamp_seconds",
                   "dask_gpu_exporter_sample_duration_seconds"):
        assert series in exprs["dask-metrics-worker.json"], series
    job_exprs = exprs["dask-metrics-jobs.json"]
    # GPU time per job: the workers' busy counters split by their tasks' jobs, recorded.
    assert "dask_cluster_worker_job:dask_gpu_busy_seconds:rate2m" in job_exprs
    records = recording_rules()
    assert re.search(r"dask_job_worker_tasks.*on\(dask_cluster, worker\)",
                     records["dask_cluster_worker_job:dask_job_worker_tasks:share"], re.S)
    assert "dask_cluster_worker_gpu:dask_gpu_busy_seconds:rate2m" in records[
        "dask_cluster_worker:dask_gpu_busy_seconds:rate2m"]
    assert "dask_gpu_busy_seconds_total" in records[
        "dask_cluster_worker_gpu:dask_gpu_busy_seconds:rate2m"]
    for series in ("dask_job_dag_status", "dask_job_dag_info", "dask_gpu_memory_peak_bytes"):
        assert series in job_exprs
    assert any(p["type"] == "state-timeline" for p in panels(jobs))
    assert [v["name"] for v in variables(worker)][:3] == ["datasource", "dask_cluster", "worker"]
    for d in (cluster, worker, jobs):
        (var,) = [v for v in variables(d) if v["name"] == "dask_cluster"]
        assert not var["multi"] and not var["includeAll"], "one cluster at a time"
        for other in variables(d):
            if other["type"] == "query" and other is not var:
                assert CLUSTER_MATCH in variable_query(other), other["name"]


def recording_rules() -> dict[str, str]:
    """record -> expr of the rules file."""
    return {r["record"]: r["expr"] for g in yaml.safe_load(RULES_FILE.read_text())["groups"]
            for r in g["rules"] if "record" in r}


def test_recorded_series_the_dashboards_read_are_recorded():
    """A dashboard reading a record nobody writes would show 'no data' for ever. Every
    record keeps dask_cluster apart (one Prometheus, many clusters)."""
    records = recording_rules()
    read = {m.group(1) for n in UIDS for p in panels(load(n)) for t in p["targets"]
            for m in SELECTORS.finditer(t["expr"]) if ":" in m.group(1)}
    assert read and read <= set(records), sorted(read - set(records))
    for n in UIDS:
        for p in panels(load(n)):
            if any(":" in m.group(1) for t in p["targets"] for m in SELECTORS.finditer(t["expr"])):
                assert "recording rules" in p["fieldConfig"]["defaults"].get("noValue", ""), (
                    f"{n}: {p['title']} says nothing of the rules when it has no data")
    # Their labels and values: deploy/helm/tests/prometheus-rules.test.yaml (promtool).
    for name, expr in records.items():
        for m in re.finditer(r"\b(?:by|on) \(([^)]*)\)", expr.replace("on(", "on (")):
            assert "dask_cluster" in m.group(1), f"{name} mixes clusters: {expr}"


def test_provisioning_points_at_the_dashboards():
    prov = GRAFANA / "provisioning"
    (ds_file,) = (prov / "datasources").glob("*.yaml")
    datasources = yaml.safe_load(ds_file.read_text())["datasources"]
    assert [d["type"] for d in datasources] == ["prometheus"]
    assert datasources[0]["uid"] and datasources[0]["isDefault"]
    assert datasources[0]["jsonData"]["timeInterval"], "$__rate_interval needs the scrape interval"
    (dash_file,) = (prov / "dashboards").glob("*.yaml")
    (provider,) = yaml.safe_load(dash_file.read_text())["providers"]
    assert provider["type"] == "file" and provider["allowUiUpdates"] is False
    # The compose stack mounts grafana/dashboards at the provider's path.
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"../grafana/dashboards:{provider['options']['path']}:ro" in mounts
    assert "../grafana/provisioning:/etc/grafana/provisioning:ro" in mounts
    scrape = yaml.safe_load((ROOT / "docker" / "prometheus" / "prometheus.yml").read_text())
    assert datasources[0]["jsonData"]["timeInterval"] == scrape["global"]["scrape_interval"]


# ---- live: real exporters, real scheduler preload, real Prometheus -----------------------


@dataclass
class Live:
    stack: LocalStack
    start: float
    end: float = 0.0

    def api(self, path: str, **params: Any) -> Any:
        resp = requests.get(self.stack.prometheus_url + path, params=params, timeout=30)
        reply = resp.json()
        assert resp.status_code == 200 and reply["status"] == "success", (
            f"{path} {params}: {resp.text[:500]}")
        return reply["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        return self.api("/api/v1/query", query=expr, time=at or time.time())["result"]

    def query_range(self, expr: str) -> list[dict[str, Any]]:
        return self.api("/api/v1/query_range", query=expr, start=self.start, end=self.end,
                        step=1)["result"]

    def grafana_vars(self, **values: str) -> dict[str, str]:
        seconds = max(1, int(self.end - self.start) + 1)
        return {"__rate_interval": "4s", "__interval": "1s", "__interval_ms": "1000",
                "__range": f"{seconds}s", "__range_s": str(seconds),
                "__range_ms": str(seconds * 1000), "dask_cluster": self.stack.cluster,
                **values}


def substitute(expr: str, values: dict[str, str]) -> str:
    def repl(m: re.Match[str]) -> str:
        name = next(g for g in m.groups() if g)
        assert name in values, f"no value for ${name} in {expr}"
        return values[name]

    out = GRAFANA_VARS.sub(repl, expr)
    assert "$" not in out, out
    return out


def _has(live: Live, expr: str) -> bool:
    return bool(live.query(expr))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, fake_nvml_lib: Path) -> Iterator[Live]:
    """The local stack (what the demo runs): scheduler (preload) + workers w1, w2 (worker
    preload publishing identity only) + one GPU sidecar per worker + Prometheus scraping every
    second, after a workload of three DAGs in two jobs (one DAG errs) and a monitor session.

    w1's GPUs are simulated; w2 runs the real pynvml over the fake libnvidia-ml with GPU 0
    carrying the same UUID as w1's GPU 0 (a shared GPU) and GPU 1 lost mid-run (dask_gpu_up 0,
    NVML errors), so the health and sharing panels have something to show too.
    """
    from distributed import Client

    work = tmp_path_factory.mktemp("grafana_live")
    fake = FakeNVML(work / "nvml_state", fake_nvml_lib, gpus=2)
    fake.gpus[0].uuid = SIMULATED_UUID0
    fake.gpus[0].gpu_util, fake.gpus[0].memory_util = 70, 30
    fake.gpus[0].memory_used = 20 * GiB
    fake.gpus[0].gpm, fake.gpus[0].sm_active, fake.gpus[0].tensor_active = True, 20.0, 5.0
    fake.write()
    fake_env = {k: v for k, v in fake.env.items() if k in ("LD_LIBRARY_PATH", "FAKE_NVML_STATE")}
    rmm_state = work / "rmm.json"  # the workers run RMM pools (the stand-in rmm module)
    rmm_state.write_text(json.dumps({"pool": 2 * GiB, "used": GiB // 2}))
    base = clean_env()
    rmm_env = {"STANDIN_RMM_STATE": str(rmm_state), "PYTHONPATH": os.pathsep.join(
        filter(None, [str(STANDIN_RMM), base.get("PYTHONPATH")]))}
    options = StackOptions(work / "stack", env=base, rule_files=[every_second_rules(work)],
                           worker_specs=[WorkerSpec("w1", simulate=2, env=rmm_env),
                                         WorkerSpec("w2", env={**fake_env, **rmm_env})])
    with LocalStack(options) as stack:
        live = Live(stack, start=stack.started)
        # The worker's processes on w2's healthy GPU, as NVML would list them.
        fake.gpus[0].processes = [(stack.pid("w2"), 3 * GiB)]
        fake.write()
        address = stack.scheduler_address
        with Client(address, name="etl", timeout=60) as etl, \
                Client(address, name="train", timeout=60) as train:
            wait_for(lambda: _has(live, 'dask_gpu_up{worker="w2", gpu="1"} == 1'), timeout=60,
                     interval=0.5, what="w2's GPU 1 scraped up")
            fake.gpus[1].lost = True  # w2's GPU 1 falls off the bus from now on
            fake.write()
            reply = etl.sync(etl.scheduler.dask_metrics_monitor_start, metrics=["mem-util"])
            assert reply["ok"], reply
            first = etl.map(time.sleep, [1.5] * 4, pure=False)            # job 0, DAG 0
            # Two clients' graphs reach the scheduler in either order: let etl's arrive
            # first, so that etl is job 0 and train job 1.
            wait_for(lambda: etl.sync(etl.scheduler.dask_metrics_dags), timeout=30,
                     interval=0.05, what="etl's graph at the scheduler")
            second = train.map(time.sleep, [1.5] * 2, pure=False)         # job 1, DAG 0
            wait_for(lambda: {r["metric"]["worker"] for r in live.query(
                "dask_job_worker_tasks")} == {"w1", "w2"}, timeout=30, interval=0.2,
                what="Prometheus sees both workers busy")
            etl.gather(first), train.gather(second)
            erred = etl.submit(operator.truediv, 1, 0, pure=False)       # job 0, DAG 1
            with pytest.raises(ZeroDivisionError):
                erred.result()
            third = etl.map(time.sleep, [1.0] * 2, pure=False)           # job 0, DAG 2
            etl.gather(third)
            reply = etl.sync(etl.scheduler.dask_metrics_monitor_stop, timeout=30)
            assert reply["ok"], reply
            ready = [
                'dask_job_dag_status{job_id="0", dag_id="1"} == 3',
                'dask_job_dag_status{job_id="0", dag_id="2"} == 2',
                "dask_job_monitor_stop_timestamp_seconds > 0",
                'dask_gpu_up{worker="w2", gpu="1"} == 0',
                "dask_gpu_exporter_nvml_errors_total > 0",
                'dask_gpu_process_memory_used_bytes{worker="w2"}',
                'count(count by (worker) (dask_job_worker_gpu_info)) == 2',
                'count(dask_job_worker_rmm_used_bytes) == 2',
                'dask_gpu_tensor_active_seconds_total{worker="w2"} > 0',
                # The recording rules have evaluated past the last job's tasks.
                'count(count by (job_id) (max_over_time('
                'dask_cluster_worker_job:dask_gpu_busy_seconds:rate2m[5m]))) == 2',
                'count(count by (job_id) (max_over_time('
                'dask_cluster_job_activity:dask_job_activity_seconds:rate2m[5m]))) == 2',
            ]
            wait_for(lambda: [e for e in ready if not _has(live, e)], lambda x: not x,
                     timeout=60, interval=0.5, what="every series in Prometheus")
            live.end = time.time()
            yield live


def _check_result(where: str, expr: str, legend: str, result: list[dict[str, Any]]) -> None:
    assert result, f"{where}: no data for {expr}"
    labels = set(LEGEND_LABELS.findall(legend))
    for series in result:
        missing = labels - set(series["metric"])
        assert not missing, f"{where}: legend {legend!r} uses {missing}, absent in {series}"
        if "values" in series:
            assert series["values"], f"{where}: empty series {series['metric']}"


LIVE_CASES = [("dask-metrics-cluster.json", {"worker": ".*", "idle_below": "0.05", "top": "64"}),
              ("dask-metrics-worker.json", {"worker": ".*", "gpu": ".*"}),
              ("dask-metrics-worker.json", {"worker": "w2", "gpu": ".*"}),
              ("dask-metrics-jobs.json", {"worker": ".*", "job_id": ".*", "top": "20",
                                          "workers_shown": "20", "rows_shown": "500"})]


@requires_prometheus
@pytest.mark.integration
@pytest.mark.parametrize(("name", "values"), LIVE_CASES,
                         ids=[f"{n.removesuffix('.json')}-{v['worker']}" for n, v in LIVE_CASES])
def test_every_panel_returns_data_with_its_legend_labels(live, name, values):
    d = load(name)
    grafana_vars = live.grafana_vars(**values)
    for p in panels(d):
        for t in p["targets"]:
            where = f"{name} / {p['title']} / {t['refId']}"
            expr = substitute(t["expr"], grafana_vars)
            result = live.query(expr, at=live.end) if t["instant"] else live.query_range(expr)
            _check_result(where, expr, t["legendFormat"], result)


@requires_prometheus
@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(UIDS))
def test_every_variable_has_values(live, name):
    for var in variables(load(name)):
        if var["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable_query(var))
        assert m
        selector = substitute(m.group(1), {"worker": ".*", "dask_cluster": live.stack.cluster})
        found = live.api(f"/api/v1/label/{m.group(2)}/values", **{"match[]": selector},
                         start=live.start, end=live.end)
        assert found, f"{name}: variable {var['name']} has no values"
        if var["name"] == "worker":
            assert set(found) == {"w1", "w2"}
        if var["name"] == "dask_cluster":
            assert live.stack.cluster in found


@requires_prometheus
@pytest.mark.integration
def test_live_values_make_sense(live):
    """Spot checks of what the panels show, beyond 'not empty'."""
    at = live.end
    shared = live.query("dask_job_worker_gpu_info and on(uuid) "
                        "(count by (uuid) (dask_job_worker_gpu_info) > 1)", at)
    assert {(r["metric"]["worker"], r["metric"]["uuid"]) for r in shared} == {
        ("w1", SIMULATED_UUID0), ("w2", SIMULATED_UUID0)}
    statuses = {(r["metric"]["job_id"], r["metric"]["dag_id"]): r["value"][1] for r in
                live.query(f"last_over_time(dask_job_dag_status[{int(at - live.start) + 1}s])",
                           at)}
    assert statuses == {("0", "0"): "2", ("1", "0"): "2", ("0", "1"): "3", ("0", "2"): "2"}
    jobs = d_load_jobs_table(live)
    assert set(jobs) == {"0", "1"}
    assert all(v > 0 for v in jobs.values()), jobs
    # `GPUs shown` keeps the GPUs least used over the range: the idlest, then all four.
    (panel,) = [p for p in panels(load("dask-metrics-cluster.json"))
                if p["title"] == "GPU utilisation per worker and GPU"]
    mean = {(r["metric"]["worker"], r["metric"]["gpu"]): float(r["value"][1])
            for r in live.query(f'rate(dask_gpu_busy_seconds_total{{dask_cluster='
                                f'"{live.stack.cluster}"}}[{int(at - live.start) + 1}s])', at)}
    assert len(mean) == 4, mean
    for top in ("1", "64"):
        expr = substitute(panel["targets"][0]["expr"],
                          live.grafana_vars(worker=".*", top=top))
        shown = {(r["metric"]["worker"], r["metric"]["gpu"]) for r in live.query_range(expr)}
        if top == "1":
            assert len(shown) == 1 and mean[shown.pop()] == min(mean.values()), (shown, mean)
        else:
            assert shown == set(mean), (shown, mean)
    _check_workers_shown(live)
    _check_rows_shown(live)
    by_worker: dict[str, list[float]] = {}
    for (worker, _), value in mean.items():
        by_worker.setdefault(worker, []).append(value)
    _check_worker_panels(live, {w: sum(v) / len(v) for w, v in by_worker.items()})


def _jobs_panel(title: str) -> dict[str, Any]:
    (panel,) = [p for p in panels(load("dask-metrics-jobs.json")) if p["title"] == title]
    return panel


def _check_workers_shown(live: Live) -> None:
    """The timeline keeps the `Workers shown` that processed tasks longest: the one with
    the most task samples alone, then both, each with every DAG it ran."""
    seconds = int(live.end - live.start) + 1
    samples = {r["metric"]["worker"]: float(r["value"][1]) for r in live.query(
        f"sum by (worker) (count_over_time(dask_job_worker_tasks{{dask_cluster="
        f'"{live.stack.cluster}"}}[{seconds}s]))', live.end)}
    assert set(samples) == {"w1", "w2"}, samples
    panel = _jobs_panel("Which job and DAG ran on which worker")
    rows = {}
    for shown in ("1", "20"):
        expr = substitute(panel["targets"][0]["expr"], live.grafana_vars(
            worker=".*", job_id=".*", workers_shown=shown))
        rows[shown] = {(r["metric"]["worker"], r["metric"]["job_id"], r["metric"]["dag_id"])
                       for r in live.query_range(expr)}
    longest = {w for w, n in samples.items() if n == max(samples.values())}  # a tie: either
    assert len({w for w, _, _ in rows["1"]}) == 1, rows
    assert {w for w, _, _ in rows["1"]} <= longest, (rows, samples)
    assert {w for w, _, _ in rows["20"]} == {"w1", "w2"}, rows
    assert rows["1"] == {r for r in rows["20"] if r[0] in {w for w, _, _ in rows["1"]}}


def _check_worker_panels(live: Live, gpu_use: dict[str, float]) -> None:
    """Each worker panel keeps its `Workers shown`: one worker with 1, both with 20, and
    "GPU utilisation per worker" the worker whose GPUs were used least."""
    for title in ("Worker memory", "Worker CPU", "GPU utilisation per worker"):
        panel = _jobs_panel(title)
        for t in panel["targets"]:
            shown = {}
            for n in ("1", "20"):
                expr = substitute(t["expr"], live.grafana_vars(worker=".*", workers_shown=n))
                shown[n] = {r["metric"]["worker"] for r in live.query_range(expr)}
            assert len(shown["1"]) == 1 and shown["20"] == {"w1", "w2"}, (title, shown)
            if title == "GPU utilisation per worker":
                assert gpu_use[shown["1"].pop()] == min(gpu_use.values()), gpu_use


def _check_rows_shown(live: Live) -> None:
    """The activity table keeps the `Rows shown` with the most seconds."""
    expr = _jobs_panel("Time per job, prefix and activity")["targets"][0]["expr"]
    tables = {n: {tuple(r["metric"].get(k) for k in ("job_id", "prefix", "activity")):
                  float(r["value"][1]) for r in live.query(substitute(
                      expr, live.grafana_vars(job_id=".*", rows_shown=n)), live.end)}
              for n in ("1", "100000")}
    assert len(tables["100000"]) > 1 and len(tables["1"]) == 1, tables
    assert list(tables["1"].values()) == [max(tables["100000"].values())], tables


def d_load_jobs_table(live: Live) -> dict[str, float]:
    """job_id -> GPU-hours held, from the jobs dashboard's own query."""
    (table,) = [p for p in panels(load("dask-metrics-jobs.json"))
                if p["title"] == "Jobs: GPU time and peak memory"]
    held = next(t for t in table["targets"] if t["legendFormat"] == "held")
    expr = substitute(held["expr"], live.grafana_vars(worker=".*", job_id=".*"))
    return {r["metric"]["job_id"]: float(r["value"][1]) for r in live.query(expr, live.end)}


@requires_prometheus
@pytest.mark.integration
def test_alert_expressions_run_on_live_data(live):
    """Every alert of the chart's rules evaluates on real series; the faults staged in the
    workload (a lost GPU, NVML errors, a shared GPU) show up in their expressions."""
    rules = [r for g in yaml.safe_load(RULES_FILE.read_text())["groups"] for r in g["rules"]
             if "alert" in r]
    firing = {}
    for rule in rules:
        firing[rule["alert"]] = live.query(rule["expr"], live.end)
    assert {r["metric"]["gpu"] for r in firing["DaskGPULost"]} == {"1"}
    assert firing["DaskGPUNVMLErrors"]
    assert firing["DaskGPUSharedByWorkers"]
    assert not firing["DaskGPUExporterDown"] and not firing["DaskGPUNVMLUnavailable"]
