"""The Helm chart (deploy/helm/dask-metrics), its alerts and the deployment examples.

Rendered and linted with Helm's own engine (helm-python-sdk: Helm's Go SDK through a C ABI, no
helm binary); alerts checked and unit-tested with promtool; DaskCluster resources validated
against the CRD schema that the dask-kubernetes package ships.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dask_metrics import contract

helm = pytest.importorskip("helm_python", reason="pip install helm-python-sdk (test extra)")

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "dask-metrics"
EXAMPLES = ROOT / "deploy" / "examples"
RULE_TESTS = sorted((ROOT / "deploy" / "helm" / "tests").glob("*.test.yaml"))
RULES_FILE = CHART / "files" / "prometheus-rules.yaml"
PROMTOOL = shutil.which("promtool")
requires_promtool = pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (Debian package "
                                       "'prometheus'; scripts/setup.sh)")
MONITORING = "monitoring.coreos.com/v1"
RELEASE, NAMESPACE = "gpu", "dask"
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
EVERYTHING_OFF = {"scheduler": {"serviceMonitor": {"enabled": False}},
                  "workers": {"podMonitor": {"enabled": False}},
                  "dashboards": {"enabled": False}, "rules": {"enabled": False},
                  "daskCluster": {"enabled": False}}


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / name).read_text())


@pytest.fixture(scope="module")
def chart() -> Iterator[Any]:
    with helm.Chart.load(str(CHART)) as c:
        yield c


def rendered(chart: Any, values: dict[str, Any] | None, api_versions: list[str]
             ) -> dict[str, str]:
    """{template path: text} as `helm template --api-versions ...` renders them.

    Chart.render() has no api_versions option (the chart renders its Prometheus Operator
    objects only where the cluster serves that API), but the library's helm_render takes
    the same options JSON as `helm template` (name, namespace, kube_version, api_versions):
    the one call of the library's native layer, here."""
    from helm_python import _native

    options = {"name": RELEASE, "namespace": NAMESPACE, "kube_version": "v1.30.0",
               "api_versions": api_versions}
    return json.loads(_native.call_string("helm_render", chart._raw(), json.dumps(values or {}),
                                          json.dumps(options)))


def render(chart: Any, values: dict[str, Any] | None = None, *, crds: bool = False,
           api_versions: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every manifest the chart renders, parsed. ``crds``: as if the cluster served the
    Prometheus Operator's API (``helm template --api-versions monitoring.coreos.com/v1``)."""
    out = rendered(chart, values, [*api_versions, *([MONITORING] if crds else [])])
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def notes(chart: Any, values: dict[str, Any] | None = None, crds: bool = False) -> str:
    out = rendered(chart, values, [MONITORING] if crds else [])
    return next(v for k, v in out.items() if k.endswith("NOTES.txt"))


def by_kind(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = by_kind(docs)[kind]
    return doc


# ---- lint and render ---------------------------------------------------------------------

VALUE_SETS = {
    "defaults": {},
    "dask-cluster": {"daskCluster": {"enabled": True}},
    "everything-off": EVERYTHING_OFF,
    "example-dask-kubernetes": example("dask-metrics-values-dask-kubernetes.yaml"),
    "example-dask-helm-chart": example("dask-metrics-values-dask-helm-chart.yaml"),
}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint_is_clean(name):
    report = helm.lint(str(CHART), VALUE_SETS[name], strict=True, namespace=NAMESPACE,
                       kube_version="v1.30.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], report


def test_the_packaged_chart_renders_the_same(chart, tmp_path):
    """`helm package` keeps everything the templates read (files/, dashboards/)."""
    archive = Path(helm.package(str(CHART), destination=str(tmp_path)))
    assert archive.name == "dask-metrics-0.1.0.tgz"
    with helm.Chart.load_archive(archive.read_bytes()) as packaged:
        values = {"daskCluster": {"enabled": True}}
        assert render(packaged, values, crds=True) == render(chart, values, crds=True)


def test_defaults_without_the_operator_render_only_dashboards(chart):
    docs = render(chart)
    assert {d["kind"] for d in docs} == {"ConfigMap"}
    assert "does not serve" in notes(chart)


def test_operator_crds_bring_the_monitors_and_rules(chart):
    docs = render(chart, {"monitoringLabels": {"release": "kube-prometheus-stack"}}, crds=True)
    kinds = by_kind(docs)
    assert set(kinds) == {"ConfigMap", *MONITORING_KINDS}
    for kind in MONITORING_KINDS:
        doc = one(docs, kind)
        assert doc["apiVersion"] == MONITORING
        assert doc["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert doc["metadata"]["namespace"] == NAMESPACE
    sm, pm = one(docs, "ServiceMonitor"), one(docs, "PodMonitor")
    for monitor, endpoints, job in ((sm, "endpoints", "dask-scheduler"),
                                    (pm, "podMetricsEndpoints", "dask-gpu")):
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        (endpoint,) = monitor["spec"][endpoints]
        assert endpoint["path"] == "/metrics"
        # The job label the alerts (up{job="dask-gpu"}) and the compose stack use.
        assert {"action": "replace", "targetLabel": "job", "replacement": job} in (
            endpoint["relabelings"])
    assert sm["spec"]["selector"] == {"matchLabels": {"dask.org/component": "scheduler"}}
    assert pm["spec"]["selector"] == {"matchLabels": {"dask.org/component": "worker"}}
    # Offline rendering for GitOps: the same objects without the API versions.
    assumed = render(chart, {"assumeMonitoringCRDs": True})
    assert {d["kind"] for d in assumed} == {"ConfigMap", *MONITORING_KINDS}


def test_everything_off_renders_nothing(chart):
    assert render(chart, EVERYTHING_OFF, crds=True) == []


def test_monitor_options_reach_the_endpoints(chart):
    values = {"workers": {"podMonitor": {
        "port": "dashboard", "interval": "30s", "namespaceSelector": {"any": True},
        "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"],
                               "regex": "dask_worker_.*"}],
        "tlsConfig": {"insecureSkipVerify": False}}}}
    pm = one(render(chart, values, crds=True), "PodMonitor")
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "dashboard" and endpoint["interval"] == "30s"
    assert endpoint["metricRelabelings"][0]["action"] == "drop"
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": False}
    assert pm["spec"]["namespaceSelector"] == {"any": True}


def test_dashboards_are_configmaps_with_the_grafana_label(chart):
    docs = render(chart, {"dashboards": {"namespace": "monitoring", "folder": "GPU"}})
    maps = by_kind(docs)["ConfigMap"]
    files = sorted((ROOT / "grafana" / "dashboards").glob("*.json"))
    assert len(maps) == len(files) == 3
    data = {}
    for cm in maps:
        meta = cm["metadata"]
        assert meta["labels"]["grafana_dashboard"] == "1"
        assert meta["annotations"]["grafana_folder"] == "GPU"
        assert meta["namespace"] == "monitoring"
        assert len(meta["name"]) <= 63
        data.update(cm["data"])
    # The ConfigMaps carry grafana/dashboards byte for byte (the chart's copy is checked
    # against them in tests/test_grafana.py).
    assert data == {f.name: f.read_text(encoding="utf-8") for f in files}


# ---- alerts ------------------------------------------------------------------------------


def _alerts(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PROMTOOL), *args], capture_output=True, text=True, timeout=60,
                          check=False)


def _records(groups: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    return [(g["name"], g.get("interval", ""), r["record"], r["expr"])
            for g in groups for r in g["rules"] if "record" in r]


def test_prometheusrule_is_the_rules_file(chart):
    source = yaml.safe_load(RULES_FILE.read_text())["groups"]
    rule = one(render(chart, crds=True), "PrometheusRule")
    assert [g["name"] for g in rule["spec"]["groups"]] == [g["name"] for g in source]
    assert _alerts(rule["spec"]["groups"]) == _alerts(source)
    # The recording rules, which the dashboards read, come whole and in order, with their
    # group's evaluation interval, whatever alerts are dropped.
    assert _records(source)
    dropped = one(render(chart, {"rules": {"disabled": sorted(_alerts(source))}}, crds=True),
                  "PrometheusRule")
    for rendered in (rule, dropped):
        assert _records(rendered["spec"]["groups"]) == _records(source)
    assert not _alerts(dropped["spec"]["groups"])


@requires_promtool
@pytest.mark.integration
def test_rules_pass_promtool_check_as_rendered(chart, tmp_path):
    values = {"rules": {"disabled": ["DaskGPUSharedByWorkers"],
                        "additionalLabels": {"team": "ml"},
                        "overrides": {"DaskGPUIdleDuringJob": {
                            "for": "30m", "labels": {"severity": "warning"}}}}}
    for name, vals in (("defaults", {}), ("custom", values)):
        spec = one(render(chart, vals, crds=True), "PrometheusRule")["spec"]
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec))
        result = _promtool("check", "rules", str(path))
        assert result.returncode == 0, result.stdout + result.stderr
    alerts = _alerts(spec["groups"])
    assert _records(spec["groups"]) == _records(yaml.safe_load(RULES_FILE.read_text())["groups"])
    assert "DaskGPUSharedByWorkers" not in alerts
    assert alerts["DaskGPUIdleDuringJob"]["for"] == "30m"
    assert alerts["DaskGPUIdleDuringJob"]["labels"] == {"severity": "warning", "team": "ml"}
    assert all(a["labels"]["team"] == "ml" for a in alerts.values())
    assert alerts["DaskGPULost"]["labels"]["severity"] == "critical"


@requires_promtool
@pytest.mark.integration
def test_rule_unit_tests_pass():
    assert RULE_TESTS
    result = _promtool("test", "rules", *map(str, RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    tested = {t["alertname"] for f in RULE_TESTS for case in yaml.safe_load(f.read_text())["tests"]
              for t in case.get("alert_rule_test", []) if t["exp_alerts"]}
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    assert tested == set(_alerts(groups)), "every alert has a unit test where it fires"
    checked = {t["expr"] for f in RULE_TESTS for case in yaml.safe_load(f.read_text())["tests"]
               for t in case.get("promql_expr_test", []) if t["exp_samples"]}
    assert {r for _, _, r, _ in _records(groups)} <= checked, (
        "every recording rule has a unit test of its labels and values")


def test_alerts_cover_the_issue_and_are_documented():
    alerts = _alerts(yaml.safe_load(RULES_FILE.read_text())["groups"])
    for name in ("DaskGPUMemoryNearlyFull", "DaskGPULost", "DaskGPUExporterDown",
                 "DaskGPUNVMLErrors", "DaskGPUIdleDuringJob"):
        assert name in alerts
    docs = (ROOT / "docs" / "deploy.md").read_text()
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert {"summary", "description"} <= set(rule["annotations"])
        assert f"`{name}`" in docs, f"docs/deploy.md does not describe {name}"


# ---- values schema -----------------------------------------------------------------------


def test_values_schema_accepts_the_defaults_and_examples(chart):
    chart.validate_schema({})
    for name in ("dask-metrics-values-dask-kubernetes.yaml",
                 "dask-metrics-values-dask-helm-chart.yaml"):
        chart.validate_schema(example(name))


@pytest.mark.parametrize("bad", [
    {"monitoringLabel": {"release": "x"}},                           # typo of a top-level key
    {"scheduler": {"serviceMonitor": {"interval": "15 s"}}},
    {"workers": {"podMonitor": {"port": "gpu-metrics-of-the-sidecar"}}},  # > 15 characters
    {"workers": {"podMonitor": {"selector": {"matchLabel": {"a": "b"}}}}},
    {"rules": {"disabled": ["DaskGPULots"]}},
    {"rules": {"overrides": {"DaskGPULost": {"for": "soon"}}}},
    {"daskCluster": {"scheduler": {"jobMode": "spans"}}},
    {"daskCluster": {"worker": {"gpus": -1}}},
    {"image": {"pullPolicy": "Sometimes"}},
], ids=lambda v: json.dumps(v)[:60])
def test_values_schema_rejects_mistakes(chart, bad):
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(bad)


def test_values_schema_knows_every_alert():
    schema = json.loads((CHART / "values.schema.json").read_text())
    rules = schema["properties"]["rules"]["properties"]
    alerts = sorted(_alerts(yaml.safe_load(RULES_FILE.read_text())["groups"]))
    assert sorted(rules["disabled"]["items"]["enum"]) == alerts
    assert sorted(rules["overrides"]["propertyNames"]["enum"]) == alerts


# ---- DaskCluster: the chart's and the example -----------------------------------------------


@functools.cache
def _crd_schema() -> dict[str, Any]:
    """openAPIV3Schema of DaskCluster v1 from the installed dask-kubernetes package (found, not
    imported: its operator needs kopf and a cluster), made strict like kubectl's server-side
    field validation: unknown fields are errors, not silently pruned."""
    spec = importlib.util.find_spec("dask_kubernetes")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("pip install dask-kubernetes (test extra): it ships the DaskCluster CRD")
    root = Path(next(iter(spec.submodule_search_locations)))
    candidates = sorted(root.glob("**/crds/daskcluster.yaml"))
    assert candidates, f"no daskcluster.yaml CRD under {root}"
    crd = yaml.safe_load(candidates[0].read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])

    def strict(node: Any) -> None:
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                strict(value)
        elif isinstance(node, list):
            for value in node:
                strict(value)

    strict(schema)
    # apiVersion, kind and metadata are checked by the API server, not the CRD's schema.
    schema["properties"].update({"apiVersion": {"const": "kubernetes.dask.org/v1"},
                                 "kind": {"const": "DaskCluster"}, "metadata": {"type": "object"}})
    return schema


def _validate_crd(doc: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="pip install jsonschema (test extra)")
    validator = jsonschema.Draft7Validator(_crd_schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:10])


def _operator_pod_labels(cluster: dict[str, Any], component: str) -> dict[str, str]:
    """Labels the dask-kubernetes operator puts on a cluster's pods and scheduler Service
    (dask_kubernetes/operator/controller: build_*_spec): the spec's own labels plus its own."""
    name = cluster["metadata"]["name"]
    labels = dict(cluster["spec"][component].get("metadata", {}).get("labels", {}))
    labels |= {"dask.org/cluster-name": name, "dask.org/component": component}
    if component == "worker":
        labels["dask.org/workergroup-name"] = f"{name}-default"
    return labels


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def _check_security(pod: dict[str, Any], where: str) -> None:
    psc = pod.get("securityContext", {})
    assert psc.get("runAsNonRoot") is True and psc.get("runAsUser", 1) != 0, where
    for c in pod["containers"]:
        sc = c["securityContext"]
        w = f"{where}/{c['name']}"
        assert sc["allowPrivilegeEscalation"] is False, w
        assert sc["readOnlyRootFilesystem"] is True, w
        assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"], w
        assert sc.get("privileged", False) is False, w
        seccomp = sc.get("seccompProfile") or psc.get("seccompProfile")
        assert seccomp == {"type": "RuntimeDefault"}, w
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{w}: {kind}"
        # A read-only root filesystem needs a writable /tmp for Dask and Python.
        if c["name"] != "gpu-exporter":
            assert "/tmp" in {m["mountPath"] for m in c["volumeMounts"]}, w


def _flag_value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def check_daskcluster(cluster: dict[str, Any], *, sidecar_port: str = "gpu-metrics") -> None:
    """What makes the sidecar pattern work, on a DaskCluster resource."""
    _validate_crd(cluster)
    worker_pod = cluster["spec"]["worker"]["spec"]
    scheduler_pod = cluster["spec"]["scheduler"]["spec"]
    worker, sidecar = worker_pod["containers"]  # the worker container first
    assert worker["name"] == "worker" and sidecar["name"] == "gpu-exporter"
    # Worker: named by the operator's DASK_WORKER_NAME; the preload last, its options after it.
    args = worker["args"]
    assert args[:2] == ["dask", "worker"] and _flag_value(args, "--name") == "$(DASK_WORKER_NAME)"
    assert args[args.index("--preload"):] == [
        "--preload", "dask_metrics.worker", "--worker-info-file",
                                              "/shared/worker.json", "--serve-metrics", "false"]
    assert "nvidia.com/gpu" in worker["resources"]["limits"]
    # Sidecar: every GPU of the node, the worker's picked from the worker-info file; the
    # worker label from DASK_WORKER_NAME, which the operator injects (so never set here).
    env = {e["name"]: e.get("value") for e in sidecar.get("env", [])}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "DASK_WORKER_NAME" not in env and "DASK_WORKER_NAME" not in {
        e["name"] for e in worker.get("env", [])}
    assert _flag_value(sidecar["args"], "--worker-info-file") == "/shared/worker.json"
    assert "nvidia.com/gpu" not in sidecar["resources"].get("limits", {})
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    assert sidecar_port in ports
    assert _flag_value(sidecar["args"], "--listen") == f":{ports[sidecar_port]}"
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": sidecar_port}
    # The shared volume: an emptyDir both mount at /shared, read-only in the sidecar.
    shared = {v["name"] for v in worker_pod["volumes"] if "emptyDir" in v}
    w_mounts = {m["mountPath"]: m for m in worker["volumeMounts"]}
    s_mounts = {m["mountPath"]: m for m in sidecar["volumeMounts"]}
    assert w_mounts["/shared"]["name"] == s_mounts["/shared"]["name"] and (
        w_mounts["/shared"]["name"] in shared)
    assert s_mounts["/shared"].get("readOnly") is True
    # Worker dashboard port: what --dashboard-address says.
    (wport,) = worker["ports"]
    assert _flag_value(args, "--dashboard-address") == f":{wport['containerPort']}"
    # Scheduler: the preload, ports named as its Service's targets, Service selects the pod.
    (scheduler,) = scheduler_pod["containers"]
    sargs = scheduler["args"]
    assert sargs[:2] == ["dask", "scheduler"]
    assert sargs[sargs.index("--preload"):sargs.index("--preload") + 2] == [
        "--preload", "dask_metrics.scheduler"]
    cports = {p["name"]: p["containerPort"] for p in scheduler["ports"]}
    assert cports == {"tcp-comm": 8786, "http-dashboard": 8787}
    assert _flag_value(sargs, "--dashboard-address") == ":8787"
    service = cluster["spec"]["scheduler"]["service"]
    assert {p["targetPort"] for p in service["ports"]} == set(cports)
    assert {p["name"] for p in service["ports"]} == set(cports)
    sched_labels = _operator_pod_labels(cluster, "scheduler")
    assert all(sched_labels.get(k) == v for k, v in service["selector"].items())
    for pod, where in ((worker_pod, "worker"), (scheduler_pod, "scheduler")):
        _check_security(pod, where)
    # One dask_cluster value in every container: the scheduler's, the worker's, the sidecar's.
    assert len(set(cluster_envs(cluster).values())) == 1, cluster_envs(cluster)


CLUSTER_NAME_LABEL = "metadata.labels['dask.org/cluster-name']"  # set by the operator


def cluster_envs(cluster: dict[str, Any]) -> dict[str, str]:
    """Container -> its DASK_METRICS_CLUSTER (a value, or the operator's cluster-name label
    through the downward API: the DaskCluster's name)."""
    found = {}
    for role in ("scheduler", "worker"):
        for c in cluster["spec"][role]["spec"]["containers"]:
            (env,) = [e for e in c.get("env", []) if e["name"] == contract.CLUSTER_ENV]
            ref = env.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            found[f"{role}/{c['name']}"] = env.get("value") or (
                cluster["metadata"]["name"] if ref == CLUSTER_NAME_LABEL else ref)
    return found


def test_daskcluster_example_is_valid_and_wired():
    check_daskcluster(example("daskcluster.yaml"))


def test_chart_daskcluster_is_valid_and_scraped_by_the_monitors(chart):
    docs = render(chart, {"daskCluster": {"enabled": True}}, crds=True,
                  api_versions=("kubernetes.dask.org/v1",))
    cluster = one(docs, "DaskCluster")
    check_daskcluster(cluster)
    assert cluster["metadata"]["name"] == f"{RELEASE}-dask-metrics"
    assert set(cluster_envs(cluster).values()) == {cluster["metadata"]["name"]}
    # The PodMonitor selects the worker pods the operator makes, on the sidecar's port.
    pm = one(docs, "PodMonitor")
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert _matches(pm["spec"]["selector"], _operator_pod_labels(cluster, "worker"))
    worker_pod = cluster["spec"]["worker"]["spec"]
    assert endpoint["port"] in {p["name"] for c in worker_pod["containers"] for p in c["ports"]}
    assert not _matches(pm["spec"]["selector"], _operator_pod_labels(cluster, "scheduler"))
    # The ServiceMonitor selects the scheduler Service (labelled like the scheduler pod by
    # the operator) on its dashboard port.
    sm = one(docs, "ServiceMonitor")
    (endpoint,) = sm["spec"]["endpoints"]
    assert _matches(sm["spec"]["selector"], _operator_pod_labels(cluster, "scheduler"))
    assert endpoint["port"] in {p["name"] for p in cluster["spec"]["scheduler"]["service"]["ports"]}


def test_chart_daskcluster_options(chart):
    values = {"daskCluster": {"enabled": True, "name": "ml", "metricsLabel": "ml-prod",
                              "worker": {
        "gpus": 2, "replicas": 4, "runtimeClassName": "nvidia",
        "extraArgs": ["--resources", "GPU=2"],
        "resources": {"requests": {"cpu": 2}, "limits": {"cpu": 4}}},
        "scheduler": {"jobMode": "span"}, "image": {"repository": "registry.example.com/rapids",
                                                    "tag": "25.08"}},
              "image": {"digest": "sha256:" + "a" * 64}}
    cluster = one(render(chart, values), "DaskCluster")
    check_daskcluster(cluster)
    worker_pod = cluster["spec"]["worker"]["spec"]
    worker, sidecar = worker_pod["containers"]
    assert cluster["metadata"]["name"] == "ml" and cluster["spec"]["worker"]["replicas"] == 4
    # Quantities are strings, numbers in values included: the CRD refuses numbers.
    assert worker["resources"]["limits"] == {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"}
    assert worker["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert worker_pod["runtimeClassName"] == "nvidia"
    assert worker["image"] == "registry.example.com/rapids:25.08"
    assert sidecar["image"] == "dask-metrics@sha256:" + "a" * 64
    assert "GPU=2" in worker["args"] and worker["args"][-6] == "--preload"
    sargs = cluster["spec"]["scheduler"]["spec"]["containers"][0]["args"]
    assert _flag_value(sargs, "--job-mode") == "span"
    assert cluster["spec"]["scheduler"]["service"]["selector"]["dask.org/cluster-name"] == "ml"
    assert set(cluster_envs(cluster).values()) == {"ml-prod"}


# ---- the Dask Helm chart example ------------------------------------------------------------

# What the Dask Helm chart (dask/dask) renders, from its templates: pod and Service labels,
# port names, and the values keys these examples use. (No network here to fetch the chart.)
DASK_CHART_RELEASE = "dask"
DASK_CHART_LABELS = {"scheduler": {"app": "dask", "release": "dask", "component": "scheduler"},
                     "worker": {"app": "dask", "release": "dask", "component": "worker"}}
DASK_CHART_SCHEDULER_SERVICE_PORTS = {"dask-scheduler", "dask-webui"}   # <fullname>-...
DASK_CHART_WORKER_PORT = "dashboard"
DASK_CHART_KEYS = {
    "scheduler": {"name", "enabled", "image", "replicas", "serviceType", "loadBalancerIP",
                  "servicePort", "serviceAnnotations", "extraArgs", "resources", "tolerations",
                  "affinity", "nodeSelector", "securityContext", "metrics", "livenessProbe",
                  "readinessProbe", "env"},
    "worker": {"name", "image", "replicas", "strategy", "custom_scheduler_url",
               "default_resources", "env", "extraArgs", "resources", "mounts", "annotations",
               "tolerations", "affinity", "nodeSelector", "securityContext", "port",
               "portDashboard", "threads_per_worker", "metrics", "livenessProbe",
               "readinessProbe"},
    "jupyter": None, "webUI": None, "additional_worker_groups": None,
}


def test_dask_helm_chart_values_load_the_preloads():
    values = example("dask-helm-chart-values.yaml")
    for section, keys in values.items():
        assert section in DASK_CHART_KEYS, section
        if DASK_CHART_KEYS[section] is not None:
            assert set(keys) <= DASK_CHART_KEYS[section], set(keys) - DASK_CHART_KEYS[section]
    scheduler_args = values["scheduler"]["extraArgs"]
    assert scheduler_args[:2] == ["--preload", "dask_metrics.scheduler"]
    worker = values["worker"]
    args = worker["extraArgs"]
    assert args[-2:] == ["--preload", "dask_metrics.worker"], "the preload takes what follows it"
    assert _flag_value(args, "--name") == "$(DASK_WORKER_NAME)"
    assert {"name": "DASK_WORKER_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in worker["env"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert worker["metrics"]["enabled"] is False  # scraped once, by the dask-metrics chart
    assert values["scheduler"]["image"] == {k: worker["image"][k] for k in ("repository", "tag")}


def test_dask_metrics_values_for_the_dask_helm_chart_select_its_pods(chart):
    docs = render(chart, example("dask-metrics-values-dask-helm-chart.yaml"), crds=True)
    sm, pm = one(docs, "ServiceMonitor"), one(docs, "PodMonitor")
    assert _matches(sm["spec"]["selector"], DASK_CHART_LABELS["scheduler"])
    assert not _matches(sm["spec"]["selector"], DASK_CHART_LABELS["worker"])
    assert sm["spec"]["endpoints"][0]["port"] in DASK_CHART_SCHEDULER_SERVICE_PORTS
    assert _matches(pm["spec"]["selector"], DASK_CHART_LABELS["worker"])
    assert not _matches(pm["spec"]["selector"], DASK_CHART_LABELS["scheduler"])
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == DASK_CHART_WORKER_PORT
    for doc in (sm, pm, one(docs, "PrometheusRule")):
        assert doc["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_dask_metrics_values_for_dask_kubernetes_select_the_example_cluster(chart):
    cluster = example("daskcluster.yaml")
    docs = render(chart, example("dask-metrics-values-dask-kubernetes.yaml"), crds=True)
    sm, pm = one(docs, "ServiceMonitor"), one(docs, "PodMonitor")
    assert _matches(pm["spec"]["selector"], _operator_pod_labels(cluster, "worker"))
    assert _matches(sm["spec"]["selector"], _operator_pod_labels(cluster, "scheduler"))
    sidecar = cluster["spec"]["worker"]["spec"]["containers"][1]
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] in {p["name"] for p in sidecar["ports"]}
    rule = one(docs, "PrometheusRule")
    assert _alerts(rule["spec"]["groups"])["DaskGPUIdleDuringJob"]["for"] == "30m"
    assert {cm["metadata"]["namespace"] for cm in by_kind(docs)["ConfigMap"]} == {"monitoring"}


def test_every_example_is_tested():
    tested = {"daskcluster.yaml", "dask-helm-chart-values.yaml",
              "dask-metrics-values-dask-helm-chart.yaml",
              "dask-metrics-values-dask-kubernetes.yaml"}
    assert {p.name for p in EXAMPLES.iterdir()} == tested
