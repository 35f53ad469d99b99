"""The ``dask_cluster`` label: every series of every part carries it, with one
value per cluster: the user's (option, environment, Dask config; the same name in every
part), else the scheduler's default, which workers and sidecars learn without any setting."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dask
import pytest
from distributed import Client, LocalCluster
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from dask_metrics.contract import CLUSTER_CONFIG, CLUSTER_ENV, CLUSTER_OPTION, DASK_CLUSTER
from dask_metrics.demo.localstack import LocalStack, StackOptions
from dask_metrics.exporter import cluster
from dask_metrics.exporter.config import resolve
from dask_metrics.exporter.gpu_collector import GpuCollector
from dask_metrics.exporter.sampler import Snapshot
from dask_metrics.exporter.scheduler.plugin import PLUGIN_NAME
from dask_metrics.exporter.scheduler.settings import Settings
from dask_metrics.exporter.target import TargetSource
from tests.helpers import Scrape, free_port, processes, scrape, sidecar, wait_for

DASK = [sys.executable, "-m", "dask"]
K8S = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}

# -- the default, as pure functions --------------------------------------------------------


@pytest.mark.parametrize(("hostname", "name"), [
    # dask-kubernetes DaskCluster "analysis": Deployment "analysis-scheduler", its pods
    # "<deployment>-<pod-template-hash>-<suffix>"
    ("analysis-scheduler-7d9c8b6f5d-x2k4q", "analysis"),
    # dask-kubernetes before 2023: a bare pod "<cluster>-scheduler"
    ("analysis-scheduler", "analysis"),
    # a name that itself holds "-scheduler": the last one is the pod's
    ("my-scheduler-test-scheduler-6b5f9c7d8-abcde", "my-scheduler-test"),
    # Dask Helm chart: "{{ dask.fullname }}-scheduler", the release name when it contains
    # "dask" ...
    ("my-dask-scheduler-5f7b9c6d4-q8w2z", "my-dask"),
    # ... else "<release>-dask"
    ("etl-dask-scheduler-5f7b9c6d4-q8w2z", "etl-dask"),
    # not a scheduler pod: no Kubernetes default
    ("worker-node-17", None),
    ("scheduler", None),
    ("analysis-worker-abc12", None),
])
def test_kubernetes_name_from_the_scheduler_pods_host_name(hostname, name):
    assert cluster.kubernetes_name(hostname) == name


def test_scheduler_default_per_deployment():
    pod = "analysis-scheduler-7d9c8b6f5d-x2k4q"
    assert cluster.scheduler_default("tcp://10.0.0.5:8786", pod, K8S) == "analysis"
    # on Kubernetes but not in a scheduler pod named so: host and port, as elsewhere
    assert cluster.scheduler_default("tcp://10.0.0.5:8786", "box", K8S) == "box-8786"
    # outside Kubernetes a host name like a pod's proves nothing
    assert cluster.scheduler_default("tcp://10.0.0.5:8786", pod, {}) == f"{pod}-8786"
    assert cluster.scheduler_default("tcp://[::1]:40123", "gpu01", {}) == "gpu01-40123"
    assert cluster.scheduler_default("inproc://10.0.0.5/4242/1", "gpu01", {}) == \
        "gpu01-4242-1"


def test_worker_fallback_and_sidecar_start_agree_with_the_scheduler_on_kubernetes():
    # dask-kubernetes sets DASK_SCHEDULER_ADDRESS in every container of a worker pod
    address = "tcp://analysis-scheduler.team-a.svc.cluster.local:8786"
    assert cluster.worker_fallback(address) == "analysis"
    assert cluster.worker_fallback("tcp://my-dask-scheduler:8786") == "my-dask"
    assert cluster.worker_fallback("tcp://10.0.0.5:8786") == "10.0.0.5-8786"
    env = {"DASK_SCHEDULER_ADDRESS": address}
    # the scheduler's address (or a worker-info file): learned from the scheduler (or the
    # worker), nothing until then
    assert cluster.sidecar_start(None, None, None, env) is None
    assert cluster.sidecar_start(None, None, address, {}) is None
    assert cluster.sidecar_start(None, "/shared/worker.json", None, env) is None
    assert cluster.sidecar_start("mine", "/shared/worker.json", None, env) == "mine"
    assert cluster.sidecar_start(None, None, None, {}) == socket.gethostname()


def test_the_users_value_option_then_environment_then_dask_config(monkeypatch):
    monkeypatch.delenv(CLUSTER_ENV, raising=False)
    with dask.config.set({CLUSTER_CONFIG: "from-config"}):
        assert cluster.configured(None, {}) == "from-config"
        assert cluster.configured(None, {CLUSTER_ENV: "from-env"}) == "from-env"
        assert cluster.configured("from-option", {CLUSTER_ENV: "from-env"}) == "from-option"
        assert cluster.configured("  ", {CLUSTER_ENV: ""}) == "from-config"  # blank: unset
    assert cluster.configured(None, {}) is None
    # the scheduler preload's and the exporter's options read the same names
    monkeypatch.setenv(CLUSTER_ENV, "from-env")
    assert Settings.from_config().cluster == "from-env"
    assert Settings.from_config(cluster="from-option").cluster == "from-option"
    assert resolve({}, {CLUSTER_ENV: "from-env"}).dask_cluster == "from-env"
    assert resolve({"dask_cluster": "x"}, {CLUSTER_ENV: "from-env"}).dask_cluster == "x"


def test_no_gpu_series_until_the_cluster_is_known():
    snap = Snapshot("w0", "host", "550.00", True, True, samples_total=3, timestamp=1.0)
    registry = CollectorRegistry()
    snapshots = [snap]
    registry.register(GpuCollector(lambda: snapshots))
    assert not Scrape(generate_latest(registry).decode()).clusters()
    snapshots[:] = [Snapshot("w0", "host", "550.00", True, True, samples_total=3,
                             timestamp=1.0, cluster="c1")]
    assert Scrape(generate_latest(registry).decode()).clusters() == {"c1"}


def test_a_target_learns_the_cluster_from_the_worker_info_file_or_is_told(tmp_path):
    from dask_metrics.exporter.identity import WorkerIdentity, write_info_file

    path = tmp_path / "worker.json"
    target = TargetSource(info_file=str(path), environ={})
    assert target().cluster is None
    write_info_file(path, WorkerIdentity("w", "tcp://h:1", 1, "h"))
    assert target().cluster is None  # the worker does not know it yet either
    write_info_file(path, WorkerIdentity("w", "tcp://h:1", 1, "h", cluster="c-from-file!"))
    assert target().cluster == "c-from-file!"
    told = TargetSource(worker="w", environ={})
    told.set_cluster("c2")
    assert told().cluster == "c2"


# -- in-process clusters: the user's value through each way of setting it ---------------------


@contextmanager
def in_process(argv: tuple[str, ...] = ()) -> Iterator[LocalCluster]:
    with dask.config.set({"distributed.worker.preload": ["dask_metrics.worker"],
                          "dask-metrics.exporter.simulate": 1,
                          "dask-metrics.exporter.interval": 0.1}), LocalCluster(
        n_workers=2, processes=False, threads_per_worker=1, dashboard_address="127.0.0.1:0",
        worker_dashboard_address=":0",
        scheduler_kwargs={"preload": ["dask_metrics.scheduler"], "preload_argv": list(argv)},
    ) as lc:
        yield lc


def registry_clusters(lc: LocalCluster) -> Scrape:
    """The process's registry: the scheduler's dask_job_* and both workers' dask_gpu_*."""
    def complete(s: Scrape) -> bool:
        return len(s["dask_gpu_up"]) == 2 and bool(s["dask_job_current_job"])

    return wait_for(lambda: scrape(lc.scheduler.http_server.port), complete,
                    what="both workers' GPU series and the scheduler's")


@pytest.mark.integration
@pytest.mark.parametrize("how", ["option", "environment", "dask config"])
def test_a_user_set_value_labels_every_series(how, monkeypatch):
    argv: tuple[str, ...] = ()
    config = {}
    if how == "option":
        argv = (CLUSTER_OPTION, "set-by-option")
    elif how == "environment":
        monkeypatch.setenv(CLUSTER_ENV, "set-by-environment")
    else:
        monkeypatch.delenv(CLUSTER_ENV, raising=False)
        config = {CLUSTER_CONFIG: "set-by-dask-config"}
    want = {"option": "set-by-option", "environment": "set-by-environment",
            "dask config": "set-by-dask-config"}[how]
    with dask.config.set(config), in_process(argv) as lc, Client(lc) as client:
        assert client.submit(sum, [1, 2]).result() == 3
        s = registry_clusters(lc)
        assert s.clusters() == {want}
        assert lc.scheduler.plugins[PLUGIN_NAME].cluster == want
        status = client.sync(client.scheduler.dask_metrics_monitor_status)
        assert status[DASK_CLUSTER] == want
    assert "dask_gpu_up{" not in generate_latest(REGISTRY).decode()


# -- processes: the scheduler, a worker serving its own series, a sidecar -------------------


@pytest.mark.integration
def test_default_agreed_by_scheduler_worker_and_sidecar_and_a_worker_with_its_own(
        fake_nvml, tmp_path: Path):
    sched_port, dash_port = free_port(), free_port()
    w1_http, w2_http = free_port(), free_port()
    info = tmp_path / "w1.json"
    env = {**fake_nvml.env}
    env.pop(CLUSTER_ENV, None)
    scheduler = [*DASK, "scheduler", "--host", "127.0.0.1", "--port", str(sched_port),
                 "--dashboard-address", f"127.0.0.1:{dash_port}",
                 "--preload", "dask_metrics.scheduler"]

    def worker(name: str, http: int, *args: str) -> list[str]:
        return [*DASK, "worker", f"tcp://127.0.0.1:{sched_port}", "--name", name,
                "--host", "127.0.0.1", "--nthreads", "1", "--no-nanny",
                "--dashboard-address", f"127.0.0.1:{http}", "--preload", "dask_metrics.worker",
                "--interval", "0.1", *args]

    w1 = worker("w1", w1_http, "--worker-info-file", str(info), "--gpus", "0")
    w2 = worker("w2", w2_http, "--gpus", "1", CLUSTER_OPTION, "its-own")
    with processes((scheduler, env), (w1, env), (w2, env)) as procs, \
            sidecar("--worker-info-file", str(info), "--interval", "0.1",
                    env={**env, CLUSTER_ENV: ""}) as side:
        derived = f"{socket.gethostname()}-{sched_port}"

        def gpu_series(url: str) -> Scrape:
            return wait_for(lambda: scrape(url), lambda s: s["dask_gpu_up"],
                            what=f"GPU series at {url}")

        sched = wait_for(lambda: scrape(dash_port), lambda s: len(s["dask_job_worker_gpu_info"])
                         == 2, what="both workers at the scheduler")
        in_worker = gpu_series(f"http://127.0.0.1:{w1_http}/metrics")
        at_sidecar = gpu_series(side + "/metrics")
        own = gpu_series(f"http://127.0.0.1:{w2_http}/metrics")
        for where, s in (("scheduler", sched), ("worker", in_worker), ("sidecar", at_sidecar)):
            assert s.clusters() == {derived}, where
            s.of_cluster(derived)  # every dask_* sample carries it
        assert own.clusters() == {"its-own"}
    scheduler_log, _, own_log = (p.output for p in procs)
    assert "its own setting" in own_log and repr(derived) in own_log  # logged loudly
    assert "labels its series dask_cluster='its-own'" in scheduler_log


@pytest.mark.integration
@pytest.mark.parametrize("how", ["environment", "option"])
def test_a_sidecar_without_a_worker_file_asks_the_scheduler_for_the_name(fake_nvml, how):
    """A dask-jobqueue job script: a worker without the worker preload and a sidecar that
    knows only the scheduler's address (DASK_SCHEDULER_ADDRESS, or --scheduler). The sidecar
    asks the scheduler, so both label with the scheduler's name, not "127.0.0.1-PORT"."""
    sched_port, dash_port = free_port(), free_port()
    env = {k: v for k, v in fake_nvml.env.items() if k != CLUSTER_ENV}
    address = f"tcp://127.0.0.1:{sched_port}"
    scheduler = [*DASK, "scheduler", "--host", "127.0.0.1", "--port", str(sched_port),
                 "--dashboard-address", f"127.0.0.1:{dash_port}",
                 "--preload", "dask_metrics.scheduler"]
    side_env = {**env, "DASK_SCHEDULER_ADDRESS": address} if how == "environment" else env
    side_args = ["--scheduler", address] if how == "option" else []
    with processes((scheduler, env)):
        wait_for(lambda: scrape(dash_port), lambda s: s["dask_job_current_job"],
                 what="the scheduler's series")
        with sidecar("--worker", "w", "--interval", "0.1", *side_args, env=side_env) as side:
            at_sidecar = wait_for(lambda: scrape(side + "/metrics"),
                                  lambda s: s["dask_gpu_up"], what="GPU series at the sidecar")
    assert at_sidecar.clusters() == {f"{socket.gethostname()}-{sched_port}"}


@pytest.mark.integration
def test_a_sidecar_whose_scheduler_has_no_preload_says_which_name_it_took(fake_nvml):
    sched_port = free_port()
    env = {k: v for k, v in fake_nvml.env.items() if k != CLUSTER_ENV}
    scheduler = [*DASK, "scheduler", "--host", "127.0.0.1", "--port", str(sched_port),
                 "--dashboard-address", f"127.0.0.1:{free_port()}"]
    port = free_port()
    side = [sys.executable, "-m", "dask_metrics.exporter", "--listen", f"127.0.0.1:{port}",
            "--worker", "w", "--interval", "0.1", "--scheduler", f"tcp://127.0.0.1:{sched_port}"]
    with processes((scheduler, env), (side, env)) as (_, proc):
        found = wait_for(lambda: scrape(port), lambda s: s["dask_gpu_up"],
                         what="GPU series at the sidecar")
    assert found.clusters() == {f"127.0.0.1-{sched_port}"}
    assert "does not name its cluster" in proc.output and "--dask-cluster" in proc.output


# -- the local stack: one value on every series Prometheus holds ------------------------------


@pytest.mark.integration
def test_local_stack_series_all_carry_the_stacks_cluster(tmp_path):
    with LocalStack(StackOptions(folder=tmp_path / "stack", workers=2)) as stack:
        assert stack.cluster == f"{socket.gethostname()}-{stack.scheduler_address.split(':')[-1]}"
        query = f'count by ({DASK_CLUSTER}) ({{__name__=~"dask_(gpu|job)_.+"}})'
        found = wait_for(lambda: stack.query(query), what="dask series in Prometheus")
        assert {r["metric"].get(DASK_CLUSTER) for r in found} == {stack.cluster}
        gpus = stack.query(f'dask_gpu_up{{{DASK_CLUSTER}="{stack.cluster}"}}')
        assert {r["metric"]["worker"] for r in gpus} == set(stack.worker_names)
