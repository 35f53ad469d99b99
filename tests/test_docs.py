"""Every command in README.md and docs/*.md is accounted for: run here, mapped to the test
that exercises it, or listed as not runnable on this machine with the reason.

A command is a line of a ```bash / ```sh / ```console block (tests/doc_commands.py says
exactly how they are read). ACCOUNTS below holds one entry per distinct command: a doc that
gains a command without an entry fails test_every_command_is_accounted_for, and an entry
whose command left the docs fails too. Commands accounted as RUN are run by the test named
in the entry, through ``documented(...)``, which fails when the text is not in the docs; host
names, ports and paths are swapped for local ones with ``localise(...)``, which fails when a
placeholder it replaces is not in the command. ```python blocks are compiled, and each is
named in PYTHON_EXAMPLES with the test that runs it or why it is only compiled.
"""

from __future__ import annotations

import ast
import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

from dask_metrics.collector.cli.main import main as collector_main
from dask_metrics.collector.output.export import SUMMARIES
from tests.doc_commands import (
    ROOT,
    doc_files,
    fenced_blocks,
    python_blocks,
    python_key,
    shell_commands,
)
from tests.fake_nvml import FakeNVML
from tests.helpers import free_port, http_get, processes, scrape, values, wait_for
from tests.prometheus_helpers import OpenMetrics, create_blocks, requires_prometheus, run_prometheus

GiB = 2**30


@dataclass(frozen=True)
class Run:
    """Run for real by ``test`` in this file."""

    test: str


@dataclass(frozen=True)
class Parsed:
    """A benchmark's command line (each runs for minutes): test_benchmark_command_lines_parse
    gives it to the benchmark's own argument parser, which stops it before it runs."""


@dataclass(frozen=True)
class Mapped:
    """Exercised by an existing test (a pytest node id)."""

    node: str
    why: str = ""


@dataclass(frozen=True)
class NotHere:
    """Not runnable on this machine; only for what needs Docker, Kubernetes or a GPU."""

    reason: str


@dataclass(frozen=True)
class CompileOnly:
    """A ```python fragment that is compiled, and why that is all."""

    reason: str


Account = Run | Parsed | Mapped | NotHere

DEMO = "tests/test_demo.py::test_demo_end_to_end"
HELM = "tests/test_helm.py::"
CONTAINERS = "tests/test_containers.py::"

ACCOUNTS: dict[str, Account] = {
    # ---- README.md: the two commands ----
    "bash scripts/demo.sh": Mapped(DEMO),
    "bash scripts/test.sh": Run("test_the_test_command_is_what_ci_runs"),
    # ---- CONTRIBUTING.md ----
    "bash scripts/test.sh tests/test_peak_window.py -q": Run("test_one_test_file_runs_as_ci_would"),
    "bash scripts/test.sh -m integration tests/test_store_limits.py -k monitor_session -q":
        Mapped("tests/test_store_limits.py::"
               "test_a_monitor_session_between_two_scrapes_ends_alike_under_a_limit_below_the_gpus",
               "the test the command selects"),
    # ---- install ----
    "bash scripts/setup.sh": Run("test_setup_runs_again_quietly_and_puts_the_commands_in_venv"),
    "source .venv/bin/activate": Run("test_setup_runs_again_quietly_and_puts_the_commands_in_venv"),
    "python -m pip wheel --no-deps -w dist .":
        Mapped("tests/test_packaging.py::test_the_wheel_installs_one_top_level_package"),
    "python -m pip install 'dist/dask_metrics-0.1.0-py3-none-any.whl[plot]'":
        Run("test_the_documented_wheel_is_this_version_with_the_plot_extra"),
    # ---- the GPU exporter ----
    "dask-metrics-exporter --listen :9446 --worker-info-file /shared/worker.json":
        Run("test_sidecar_follows_a_worker_info_file"),
    "curl -s localhost:9446/metrics | grep dask_gpu_memory_used_bytes":
        Run("test_sidecar_follows_a_worker_info_file"),
    "curl -s localhost:9446/healthz": Run("test_sidecar_follows_a_worker_info_file"),
    "dask-metrics-exporter --simulate 2 --simulate-memory 4GiB --listen 127.0.0.1:9446":
        Run("test_simulated_sidecar"),
    "curl -s 127.0.0.1:9446/metrics | grep dask_gpu_info": Run("test_simulated_sidecar"),
    # ---- one machine / HPC: schedulers, workers, sidecars ----
    "dask worker tcp://scheduler:8786 --dashboard-address :8788 --preload dask_metrics.worker":
        Run("test_local_deployment"),
    "curl -s http://worker-host:8788/metrics | grep dask_gpu_": Run("test_local_deployment"),
    "dask scheduler --preload dask_metrics.scheduler &": Run("test_local_deployment"),
    "CUDA_VISIBLE_DEVICES=0 dask worker tcp://127.0.0.1:8786 --name gpu0 --preload "
    "dask_metrics.worker --worker-info-file /tmp/gpu0.json --serve-metrics false "
    "--metrics-url 127.0.0.1:9446 &":
        Run("test_local_deployment"),
    "dask-metrics-exporter --worker-info-file /tmp/gpu0.json --listen 127.0.0.1:9446 &":
        Run("test_local_deployment"),
    "dask scheduler --preload dask_metrics.scheduler --prometheus-url http://prometheus:9090":
        Run("test_local_deployment"),
    "dask scheduler --preload dask_metrics.scheduler --job-mode span --prometheus-url "
    "http://prometheus:9090": Run("test_local_deployment"),
    "DASK_DISTRIBUTED__SCHEDULER__PRELOAD='[\"dask_metrics.scheduler\"]'":
        Run("test_local_deployment"),
    "DASK_DASK_METRICS__SCHEDULER__JOB_MODE=span": Run("test_local_deployment"),
    "DASK_DASK_METRICS__SCHEDULER__PROMETHEUS_URL=http://prometheus:9090":
        Run("test_local_deployment"),
    # ---- the collector, against a real Prometheus ----
    "export DASK_METRICS_PROMETHEUS_URL=http://prometheus:9090": Run("test_collector_commands"),
    "collector report --since monitor --out report": Mapped(
        "tests/test_report.py::test_a_session_without_jobs",
        "the same command with --cluster and --prometheus, on a scripted session"),
    "collector report --since monitor --format text": Mapped(
        "tests/test_report.py::test_text_format_prints_the_same_sections"),
    "collector report --since monitor --out report --baseline previous": Mapped(
        "tests/test_report.py::test_this_run_against_the_previous_session",
        "with --cluster and --prometheus, on a scripted pipeline run twice"),
    "collector report --since monitor --out report --baseline runs/monday": Mapped(
        "tests/test_report.py::test_a_baseline_folder_file_or_time_compares_the_same"),
    "collector report --since monitor --out report --baseline previous --format text": Mapped(
        "tests/test_report.py::test_a_baseline_folder_file_or_time_compares_the_same"),
    "jq -e '[.baseline.jobs[] | select(.peak_bytes.change_percent > 20)] | length == 0' "
    "report/report.json": Mapped(
        "tests/test_report.py::test_this_run_against_the_previous_session",
        "the same selection in Python on report.json (jq is not a dependency)"),
    "collector export --since 2h --out run-42": Run("test_collector_commands"),
    "collector export --since monitor --layout seed": Run("test_collector_commands"),
    "collector peaks --since 2024-05-01T12:00:00Z --until 2024-05-01T14:00:00Z":
        Run("test_collector_commands"),
    "collector peaks --since monitor --by job --json": Run("test_collector_commands"),
    "collector export --since monitor --out results": Run("test_collector_commands"),
    "collector peaks --since 2h --by job": Run("test_collector_commands"),
    "collector plot --since monitor --out plots": Run("test_collector_commands"),
    "collector plot --csv run-42 --out run-42-plots --format png svg":
        Run("test_collector_commands"),
    "collector peaks --since 15m --by job --prometheus http://127.0.0.1:9090":
        Run("test_collector_commands"),
    "collector plot --csv dask-metrics-demo/results --out my-plots --format svg":
        Run("test_collector_commands"),
    # ---- monitor sessions on a live scheduler ----
    "collector monitor start --scheduler tcp://scheduler:8786 --metrics mem-util compute-util":
        Mapped("tests/test_monitor_e2e.py::test_monitor_command_line"),
    "collector monitor status --scheduler tcp://scheduler:8786":
        Mapped("tests/test_monitor_e2e.py::test_monitor_command_line"),
    "collector monitor new-job --name epoch-2 --scheduler tcp://scheduler:8786":
        Mapped("tests/test_scheduler_plugin.py::"
               "test_manual_mode_starts_a_job_when_a_monitor_asks",
               "the new-job handler the command calls; the command line itself shares "
               "test_monitor_command_line's code path"),
    "collector monitor stop --scheduler tcp://scheduler:8786":
        Mapped("tests/test_monitor_e2e.py::test_monitor_command_line"),
    # ---- the demo ----
    "bash scripts/demo.sh --workers 2 --out /tmp/gpu-demo --keep-running": Mapped(DEMO),
    # ---- Docker: run with podman by the containers tier (tests/test_containers.py) ----
    "docker compose -f docker/compose.yaml up --build":
        Mapped(CONTAINERS + "test_prometheus_scrapes_every_target_of_the_stack"),
    "COMPOSE_PROFILES=gpu docker compose -f docker/compose.yaml up --build":
        NotHere("needs an NVIDIA GPU in a Docker engine; the gpu profile is checked as a "
                "complete stack by tests/test_docker.py::test_each_profile_is_a_complete_stack"),
    "docker build -f docker/Dockerfile -t dask-metrics:0.1.0 .":
        Mapped(CONTAINERS + "test_the_image_has_no_compiler_no_pip_and_a_documented_size"),
    "docker run --rm -p 9446:9446 dask-metrics:0.1.0 --simulate 2":
        Mapped(CONTAINERS
               + "test_sidecar_serves_read_only_as_uid_10001_and_its_healthcheck_passes"),
    "docker run --rm --gpus all -p 9446:9446 dask-metrics:0.1.0":
        NotHere("needs a Docker engine and an NVIDIA GPU; the entry point's dispatch is "
                "tests/test_docker.py::"
                "test_entrypoint_runs_the_exporter_for_options_and_commands_as_given"),
    "docker run --rm dask-metrics:0.1.0 dask scheduler --preload dask_metrics.scheduler":
        Mapped(CONTAINERS + "test_scheduler_and_worker_roles_start_from_the_same_image"),
    "docker run --rm dask-metrics:0.1.0 dask worker tcp://scheduler:8786 --preload "
    "dask_metrics.worker":
        Mapped(CONTAINERS + "test_scheduler_and_worker_roles_start_from_the_same_image"),
    # ---- Kubernetes: no cluster here; the charts are rendered with Helm's engine ----
    "helm repo add dask https://helm.dask.org":
        NotHere("needs the helm binary and helm.dask.org (the Dask chart's keys and labels "
                "the examples rely on are pinned in tests/test_helm.py)"),
    "helm install dask dask/dask -n dask -f deploy/examples/dask-helm-chart-values.yaml":
        Mapped(HELM + "test_dask_helm_chart_values_load_the_preloads"),
    "helm install dask-metrics deploy/helm/dask-metrics -n dask -f "
    "deploy/examples/dask-metrics-values-dask-helm-chart.yaml":
        Mapped(HELM + "test_dask_metrics_values_for_the_dask_helm_chart_select_its_pods"),
    "kubectl apply -n dask -f deploy/examples/daskcluster.yaml":
        Mapped(HELM + "test_daskcluster_example_is_valid_and_wired"),
    "helm install dask-metrics deploy/helm/dask-metrics -n dask -f "
    "deploy/examples/dask-metrics-values-dask-kubernetes.yaml":
        Mapped(HELM + "test_dask_metrics_values_for_dask_kubernetes_select_the_example_cluster"),
    # ---- docs/benchmarks.md: minutes each; their arguments are parsed by their own parser ----
    "python benchmarks/bench_scheduler.py overhead --tasks 20000 --pairs 1": Parsed(),
    "DASK_DASK_METRICS__SCHEDULER__MAX_JOBS=200 python benchmarks/bench_scheduler.py memory "
    "--dags 100000 --every 10000 --tracemalloc": Parsed(),
    "python benchmarks/bench_scheduler.py fleet --workers 1000 --finished 10 --renders 3": Parsed(),
    "python benchmarks/bench_exporter.py --gpus 1,8,64 --scrapes 200 --rounds 3 --accept "
    "prometheus": Parsed(),
    "python benchmarks/bench_exporter.py --driver real --rounds 3": Parsed(),
    "python benchmarks/bench_load.py --duration 5 --concurrency 1,10,50 --gpus 8 --workers "
    "3 --dags 30": Parsed(),
    "python benchmarks/bench_export_ratio.py --rounds 5 --pythonpath /tmp/before/pkg": Parsed(),
    "python benchmarks/bench_collector.py --workers 32 --gpus 4 --hours 1 --rounds 3": Parsed(),
    "python benchmarks/bench_fleet.py --workers 100 300 --rounds 2 --at ed2fb0b --before "
    "1740a1f": Parsed(),
    "python benchmarks/bench_fleet.py --workers 300 --rounds 3 --at ca68e71 --before "
    "1740a1f": Parsed(),
    "python benchmarks/bench_fleet.py --workers 1000 --rounds 2 --at f1adde9 --before "
    "1740a1f": Parsed(),
    "python benchmarks/bench_fleet.py --workers 1000 --rounds 3 --commands export --at "
    "f1adde9 --before 1740a1f": Parsed(),
    "python benchmarks/bench_fleet.py --workers 20 --hours 1 --rounds 3 --at 70a2e3a": Parsed(),
    "python benchmarks/bench_fleet.py --workers 20 --hours 24 --rounds 1 --commands report "
    "--at d3e27d4 --before 02f7ad4": Parsed(),
    "python benchmarks/bench_stores.py --workers 1000 --gpus 8 --hours 1 --interval 15": Parsed(),
    "python benchmarks/bench_stores.py --workers 1000 --commands export peaks report "
    "--vm-limit 5000": Parsed(),
    "python benchmarks/bench_stores.py --workers 300 --commands export peaks report "
    "--vm-limit 1000 --before a61f589": Parsed(),
    "python benchmarks/bench_store_limits.py --before ed2fb0b": Parsed(),
    "python benchmarks/bench_fleet.py --workers 1000 --commands export --rounds 1": Parsed(),
    "python benchmarks/bench_floors.py --workers 1000 --rounds 1": Parsed(),
    "python benchmarks/bench_jobs.py --dags 100 1000 --rounds 5": Parsed(),
    "python benchmarks/bench_plot.py --workers 32 --gpus 4 --hours 1 --rounds 5 --before "
    "83a2cb5": Parsed(),
    "python benchmarks/bench_plot_fleet.py --workers 10 --hours 24 168 --before f143e99": Parsed(),
    "python benchmarks/bench_plot_fleet.py --workers 100 300 1000 --hours 1 --before "
    "18809e4": Parsed(),
    "python benchmarks/bench_report.py --workers 32 --gpus 4 --hours 1 --rounds 3": Parsed(),
    "python benchmarks/bench_dashboards.py --workers 1000 --gpus 8 --hours 1 --interval 15 "
    "--rounds 3 --rules deploy/helm/dask-metrics/files/prometheus-rules.yaml": Parsed(),
}

E2E = "tests/test_monitor_e2e.py::test_monitor_outlives_its_client_and_exports_per_worker_csv"
PLUGIN = "tests/test_scheduler_plugin.py::"

# ```python examples, by python_key (file: first line of code): all are compiled; each
# names the test that runs the same code, or why compiling is all that can be done here.
PYTHON_EXAMPLES: dict[str, Mapped | CompileOnly] = {
    "README.md: from distributed import Client": Mapped(E2E),
    "docs/collector.md: from distributed import Client": Mapped(E2E),
    "docs/collector.md: "
    "from dask_metrics.collector import ConnectionSettings, PrometheusClient, export":
        Mapped("tests/test_collector_prometheus.py::"
               "test_tidy_export_matches_the_dataset_value_by_value",
               "export() and peaks() as the example calls them (since/until are inputs)"),
    "docs/collector.md: import pandas as pd, dask.dataframe as dd, duckdb":
        Mapped("tests/test_collector_prometheus.py::"
               "test_parquet_export_is_the_tidy_rows_as_one_dataset_by_worker",
               "the same three readers over a Parquet export (its folder an input)"),
    "docs/deploy.md: from dask_cuda import LocalCUDACluster":
        Mapped("tests/test_dask_cuda.py::"
               "test_the_documented_recipe_gives_each_worker_its_own_gpu"),
    "docs/deploy.md: from dask_jobqueue import SLURMCluster":
        Mapped("tests/test_jobqueue.py::test_the_hpc_recipe_runs_as_written",
               "over a stand-in sbatch/scancel that runs each job on this machine"),
    "docs/scheduler.md: from distributed import LocalCluster":
        Mapped(PLUGIN + "test_settings_come_from_dask_config_and_the_command_line"),
    'docs/scheduler.md: alice = Client(addr, name="alice")':
        Mapped(PLUGIN + "test_several_clients_at_once_get_jobs_in_order_of_first_submission"),
    "docs/scheduler.md: from distributed import span":
        Mapped(PLUGIN + "test_span_mode_takes_the_job_from_the_top_level_span"),
    "docs/scheduler.md: client.compute(a)":
        Mapped(PLUGIN + "test_manual_mode_starts_a_job_when_a_monitor_asks"),
    "docs/scheduler.md: reply = client.sync(client.scheduler.dask_metrics_monitor_start, "
    'metrics=["mem-util"])': Mapped(PLUGIN + "test_monitor_sessions_live_on_the_scheduler_"
                                     "across_clients"),
    "docs/demo.md: from dask_metrics import Monitor": Mapped(DEMO),
    "docs/demo.md: import pandas as pd":
        CompileOnly("reads the demo's output with pandas, which is not a dependency; the file "
                "it reads is checked by " + DEMO),
}


# ---- the accounting itself ------------------------------------------------------------------


def documented_commands() -> dict[str, list[str]]:
    """{command: [where it is written, ...]} over README.md and docs/*.md."""
    found: dict[str, list[str]] = {}
    for command in shell_commands():
        found.setdefault(command.text, []).append(command.where)
    return found


def test_the_docs_have_commands_to_check():
    files = {Path(w.split(":")[0]).name for ws in documented_commands().values() for w in ws}
    assert {"README.md", "exporter.md", "collector.md", "deploy.md", "demo.md"} <= files


def test_every_command_is_accounted_for():
    docs = documented_commands()
    missing = {c: w for c, w in docs.items() if c not in ACCOUNTS}
    assert not missing, (
        "commands in the docs that tests/test_docs.py does not account for (run them in a "
        "test here, or map them to the test that exercises them, in ACCOUNTS):\n"
        + "\n".join(f"  {w[0]}: {c}" for c, w in missing.items()))
    stale = sorted(set(ACCOUNTS) - set(docs))
    assert not stale, f"ACCOUNTS lists commands no doc has any more: {stale}"


def test_the_extraction_catches_every_kind_of_command(tmp_path):
    """The reader sees what a new doc could add: continuations, comments, console prompts."""
    doc = tmp_path / "new.md"
    doc.write_text("text\n\n```bash\ncollector export --since 1h \\\n  --out x   # note\n"
                   "# only a comment\n```\n\n```console\n$ dask-metrics-exporter --simulate 1\n"
                   "output line\n$ echo 'a # b'\n```\n\n```yaml\nnot: a command\n```\n")
    found = [c.text for c in shell_commands([doc])]
    assert found == ["collector export --since 1h --out x",
                     "dask-metrics-exporter --simulate 1", "echo 'a # b'"]
    assert not [c for c in found if c in ACCOUNTS]  # a new command is not accounted for


def _test_nodes(path: Path) -> set[str]:
    """``test_x`` and ``Class::test_x`` names defined in a test file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {f"{node.name}::{f.name}" for f in node.body
                      if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
    return names


MAPPED_NODES = sorted({a.node for a in [*ACCOUNTS.values(), *PYTHON_EXAMPLES.values()]
                       if isinstance(a, Mapped)})


@pytest.mark.parametrize("node", MAPPED_NODES)
def test_mapped_test_exists(node):
    file, _, name = node.partition("::")
    path = ROOT / file
    assert path.is_file(), f"{node}: no file {file}"
    assert name in _test_nodes(path), f"{node}: {file} has no test {name}"


def test_every_run_account_names_a_test_here_that_runs_it():
    """Each RUN command is passed to documented(...) by the test its entry names."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    tests = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    runs = {c: a.test for c, a in ACCOUNTS.items() if isinstance(a, Run)}
    for command, test in runs.items():
        assert test in tests, f"{command!r}: no test {test} in test_docs.py"
        nodes = list(ast.walk(tests[test]))
        assert any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "documented"
                   for n in nodes), f"{test} calls documented() nowhere"
        texts = {n.value for n in nodes if isinstance(n, ast.Constant)}
        assert command in texts, f"{test} does not name {command!r}"


def test_not_runnable_here_is_short_and_explained():
    not_here = {c: a for c, a in ACCOUNTS.items() if isinstance(a, NotHere)}
    assert len(not_here) <= 3, sorted(not_here)
    for command, account in not_here.items():
        assert re.search(r"Docker|GPU|Kubernetes|helm", account.reason), command
    for key, account in PYTHON_EXAMPLES.items():
        assert isinstance(account, Mapped | CompileOnly) and (
            isinstance(account, Mapped) or len(account.reason) > 20), key


def documented(command: str) -> str:
    """``command`` after checking that the docs hold it and that it is accounted as run
    here (Run, Parsed)."""
    assert command in documented_commands(), f"not in the docs any more: {command!r}"
    assert isinstance(ACCOUNTS.get(command), Run | Parsed), command
    return command


def localise(command: str, replacements: dict[str, str]) -> str:
    """Swap placeholders (hosts, ports, paths) for local ones; each must be in ``command``."""
    for old, new in replacements.items():
        assert old in command, f"{old!r} is no longer in {command!r}"
        command = command.replace(old, new)
    return command


# ---- python examples ------------------------------------------------------------------------


def test_python_examples_compile_and_are_accounted_for():
    keys = {}
    for block in python_blocks():
        source = "\n".join(block.lines) + "\n"
        try:
            compile(source, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError as exc:
            pytest.fail(f"{block.where}: the example does not compile: {exc}")
        keys[python_key(block).split("  #")[0].split(" #")[0]] = block.where
    missing = {k: w for k, w in keys.items() if k not in PYTHON_EXAMPLES}
    assert not missing, ("python examples not accounted for in PYTHON_EXAMPLES:\n"
                         + "\n".join(f"  {w}: {k}" for k, w in missing.items()))
    stale = sorted(set(PYTHON_EXAMPLES) - set(keys))
    assert not stale, f"PYTHON_EXAMPLES lists examples no doc has any more: {stale}"


# ---- runs: install, CI ----------------------------------------------------------------------


def test_the_documented_wheel_is_this_version_with_the_plot_extra():
    """The wheel's file name in README is the one pip wheel writes for this version; the
    extra exists and brings matplotlib. (Installing a wheel: tests/test_packaging.py.)"""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    command = "python -m pip install 'dist/dask_metrics-0.1.0-py3-none-any.whl[plot]'"
    (spec,) = shlex.split(documented(command))[4:]
    wheel, _, extra = spec.partition("[")
    assert Path(wheel).name == f"dask_metrics-{project['version']}-py3-none-any.whl"
    extras = project["optional-dependencies"]
    assert any(d.startswith("matplotlib") for d in extras[extra.rstrip("]")])


@pytest.mark.integration
def test_setup_runs_again_quietly_and_puts_the_commands_in_venv():
    """After the first run (CI's), setup.sh installs nothing and says nothing; the commands
    the docs use are in .venv/bin and on PATH after ``source .venv/bin/activate``."""
    setup = subprocess.run(["bash", documented("bash scripts/setup.sh").split()[1]], cwd=ROOT,
                           capture_output=True, text=True, timeout=600, check=False)
    assert setup.returncode == 0, setup.stderr
    assert setup.stdout == "" and setup.stderr == "", setup.stdout + setup.stderr
    activate = documented("source .venv/bin/activate")
    shell = subprocess.run(
        ["bash", "-c", f"{activate} && collector --version && dask-metrics-exporter --version"
                       " && command -v dask"], cwd=ROOT, capture_output=True, text=True,
        timeout=120, check=False, env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})
    assert shell.returncode == 0, shell.stderr
    lines = shell.stdout.splitlines()
    assert lines[-1] == str(ROOT / ".venv" / "bin" / "dask"), lines
    assert all("0.1.0" in line for line in lines[:2]), lines


def test_the_test_command_is_what_ci_runs():
    command = documented("bash scripts/test.sh")
    ci = (ROOT / ".ci" / "run").read_text()
    assert command in ci.splitlines(), ".ci/run must run the README's test command"
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert "ruff check" in script and "pytest" in script


@pytest.mark.integration  # setup and lint first: seconds, and a venv being reinstalled
def test_one_test_file_runs_as_ci_would():
    command = documented("bash scripts/test.sh tests/test_peak_window.py -q")
    done = subprocess.run(shlex.split(command), cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", done.stdout) and "failed" not in done.stdout


# ---- runs: the exporter ---------------------------------------------------------------------


def curl(command: str) -> list[str]:
    """``curl -s URL [| grep PATTERN]``, done with urllib: the body's lines (matching)."""
    stages = [shlex.split(s) for s in command.split("|")]
    assert stages[0][:2] == ["curl", "-s"] and len(stages[0]) == 3, command
    url = stages[0][2]
    url = url if "://" in url else "http://" + url
    status, body = http_get(url)
    assert status == 200, f"{command}: HTTP {status}"
    lines = body.splitlines()
    for stage in stages[1:]:
        assert stage[0] == "grep" and len(stage) == 2, command
        lines = [line for line in lines if re.search(stage[1], line)]
    return lines


def running(proc: subprocess.Popen) -> bool:
    """True while ``proc`` runs; fails at once, with its output, when it has exited."""
    if proc.poll() is not None:
        raise AssertionError(f"{shlex.join(proc.args)} exited {proc.returncode}:\n"
                             f"{proc.stdout.read()[-3000:] if proc.stdout else ''}")
    return True


def exporter_argv(command: str) -> list[str]:
    argv = shlex.split(command.rstrip("& "))
    assert argv[0] == "dask-metrics-exporter", command
    return [sys.executable, "-m", "dask_metrics.exporter", *argv[1:]]


def fake_env(fake: FakeNVML, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in fake.env.items()
           if k not in ("CUDA_VISIBLE_DEVICES", "DASK_WORKER_NAME", "DASK_SCHEDULER_ADDRESS")
           and not k.startswith(("DASK_METRICS_", "DASK_DISTRIBUTED__", "DASK_DASK_METRICS__"))}
    return {**env, **extra}


@pytest.mark.integration
def test_sidecar_follows_a_worker_info_file(fake_nvml, tmp_path):
    from dask_metrics.exporter.identity import GpuRef, WorkerIdentity, write_info_file

    port = free_port()
    info = tmp_path / "shared" / "worker.json"
    info.parent.mkdir()
    start = documented("dask-metrics-exporter --listen :9446 --worker-info-file "
                       "/shared/worker.json")
    argv = exporter_argv(localise(start, {":9446": f"127.0.0.1:{port}",
                                          "/shared/worker.json": str(info)}))
    local = {"localhost:9446": f"127.0.0.1:{port}"}
    used = documented("curl -s localhost:9446/metrics | grep dask_gpu_memory_used_bytes")
    health = documented("curl -s localhost:9446/healthz")
    def series() -> list[str]:  # the matching lines that are samples (not # HELP/# TYPE)
        return [ln for ln in curl(localise(used, local)) if not ln.startswith("#")]

    with processes((argv, fake_env(fake_nvml))) as (proc,):
        wait_for(lambda: running(proc) and curl(localise(health, local)),
                 what="the sidecar's /healthz")
        assert series() == []  # no worker yet: no GPU series
        write_info_file(info, WorkerIdentity("w-7", "tcp://10.0.0.7:4000", 4242, "node-7",
                                             (GpuRef(0, fake_nvml.uuid(1)),), cluster="c-7"))
        lines = wait_for(lambda: running(proc) and series(), what="the worker's GPU series")
    assert len(lines) == 1 and 'worker="w-7"' in lines[0] and fake_nvml.uuid(1) in lines[0]
    assert 'dask_cluster="c-7"' in lines[0]


@pytest.mark.integration
def test_simulated_sidecar(tmp_path):
    port = free_port()
    start = documented("dask-metrics-exporter --simulate 2 --simulate-memory 4GiB --listen "
                       "127.0.0.1:9446")
    argv = exporter_argv(localise(start, {"127.0.0.1:9446": f"127.0.0.1:{port}"}))
    query = documented("curl -s 127.0.0.1:9446/metrics | grep dask_gpu_info")
    query = localise(query, {"127.0.0.1:9446": f"127.0.0.1:{port}"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_METRICS_")}
    with processes((argv, env)) as (proc,):
        lines = wait_for(lambda: running(proc) and [ln for ln in curl(query)
                                                    if not ln.startswith("#")],
                         what="the simulated GPUs")
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
    assert len(lines) == 2 and all('simulated="true"' in line for line in lines), lines
    totals = values(samples, "dask_gpu_memory_total_bytes")
    assert sorted(totals.values()) == [4 * GiB, 4 * GiB]


# ---- runs: one machine, schedulers and workers ----------------------------------------------


def dask_argv(command: str, extra: list[str]) -> tuple[list[str], dict[str, str]]:
    """argv (this interpreter's Dask) and leading VAR=value assignments of a dask command;
    ``extra`` options go right after ``scheduler``/``worker``, before any --preload."""
    words = shlex.split(command.rstrip("& "))
    env = {}
    while "=" in words[0]:
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    assert words[0] == "dask" and words[1] in ("scheduler", "worker"), command
    if words[1] == "worker":  # the scheduler address stays first
        return [sys.executable, "-m", "dask", "worker", words[2], *extra, *words[3:]], env
    return [sys.executable, "-m", "dask", "scheduler", *extra, *words[2:]], env


def scheduler_status(address: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "dask_metrics.collector", "monitor", "status",
                             "--scheduler", address, "--json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.integration
def test_local_deployment(fake_nvml, tmp_path):
    """README's and deploy.md's one-machine commands, scheduler.md's scheduler variants."""
    sched = [(free_port(), free_port()) for _ in range(4)]  # (port, dashboard) each

    def scheduler(i: int) -> list[str]:
        return ["--host", "127.0.0.1", "--port", str(sched[i][0]),
                "--dashboard-address", f"127.0.0.1:{sched[i][1]}"]

    addr = f"tcp://127.0.0.1:{sched[0][0]}"
    info = tmp_path / "gpu0.json"
    sidecar_port, worker_dashboard = free_port(), free_port()
    base = fake_env(fake_nvml)
    cmds = []

    # deploy.md / README: scheduler, worker on GPU 0 with the preload, its sidecar
    argv, env = dask_argv(documented("dask scheduler --preload dask_metrics.scheduler &"),
                          scheduler(0))
    cmds.append((argv, {**base, **env}))
    argv, env = dask_argv(localise(documented(
        "CUDA_VISIBLE_DEVICES=0 dask worker tcp://127.0.0.1:8786 --name gpu0 --preload "
        "dask_metrics.worker --worker-info-file /tmp/gpu0.json --serve-metrics false "
        "--metrics-url 127.0.0.1:9446 &"),
        {"tcp://127.0.0.1:8786": addr, "/tmp/gpu0.json": str(info),
         "127.0.0.1:9446": f"127.0.0.1:{sidecar_port}"}), ["--host", "127.0.0.1"])
    assert env == {"CUDA_VISIBLE_DEVICES": "0"}
    cmds.append((argv, {**base, **env}))
    cmds.append((exporter_argv(localise(documented(
        "dask-metrics-exporter --worker-info-file /tmp/gpu0.json --listen 127.0.0.1:9446 &"),
        {"/tmp/gpu0.json": str(info), "127.0.0.1:9446": f"127.0.0.1:{sidecar_port}"})), base))
    # README: a worker serving its GPUs in-process on its dashboard port
    argv, env = dask_argv(localise(documented(
        "dask worker tcp://scheduler:8786 --dashboard-address :8788 --preload dask_metrics.worker"),
        {"tcp://scheduler:8786": addr, ":8788": f"127.0.0.1:{worker_dashboard}"}),
        ["--host", "127.0.0.1", "--name", "inproc"])
    cmds.append((argv, {**base, **env}))
    # README and scheduler.md: the preload's options on the command line, and as environment
    for i, command in ((1, "dask scheduler --preload dask_metrics.scheduler --prometheus-url "
                           "http://prometheus:9090"),
                       (2, "dask scheduler --preload dask_metrics.scheduler --job-mode span "
                           "--prometheus-url http://prometheus:9090")):
        argv, env = dask_argv(documented(command), scheduler(i))
        cmds.append((argv, {**base, **env}))
    env_lines = [documented("DASK_DISTRIBUTED__SCHEDULER__PRELOAD='[\"dask_metrics.scheduler\"]'"),
                 documented("DASK_DASK_METRICS__SCHEDULER__JOB_MODE=span"),
                 documented("DASK_DASK_METRICS__SCHEDULER__PROMETHEUS_URL=http://prometheus:9090")]
    assignments = dict(shlex.split(line)[0].split("=", 1) for line in env_lines)
    cmds.append(([sys.executable, "-m", "dask", "scheduler", *scheduler(3)],
                 {**base, **assignments}))

    with processes(*cmds) as procs:
        def alive() -> None:
            for proc in procs:
                running(proc)

        sidecar_url = f"http://127.0.0.1:{sidecar_port}/metrics"
        gpu0 = {"worker": "gpu0", "gpu": "0", "uuid": fake_nvml.uuid(0)}
        s = wait_for(lambda: alive() or ((s := scrape(sidecar_url))
                                         and values(s, "dask_gpu_up", **gpu0) and s),
                     timeout=60, what="the sidecar serving gpu0's GPU")
        assert len(values(s, "dask_gpu_up")) == 1  # only the worker's GPU, of the two
        sched_url = f"http://127.0.0.1:{sched[0][1]}/metrics"
        wait_for(lambda: alive() or values(scrape(sched_url), "dask_job_worker_gpu_info",
                                           **gpu0), timeout=60,
                 what="the scheduler preload knowing gpu0's GPU")
        curl_cmd = localise(documented(
            "curl -s http://worker-host:8788/metrics | grep dask_gpu_"),
            {"worker-host:8788": f"127.0.0.1:{worker_dashboard}"})
        lines = wait_for(lambda: alive() or [ln for ln in curl(curl_cmd)
                                             if ln.startswith("dask_gpu_up{")],
                         timeout=60, what="the in-process worker's GPU series")
        assert len(lines) == 2 and all('worker="inproc"' in ln for ln in lines), lines
        # deploy.md: the scheduler lists both GPU endpoints for Prometheus to discover
        sd = f"http://127.0.0.1:{sched[0][1]}/dask-metrics/targets"
        groups = wait_for(lambda: alive() or json.loads(http_get(sd)[1]),
                          lambda g: len(g) == 3, timeout=60, what="the discovered targets")
        assert {(g["labels"].get("worker"), g["targets"][0]) for g in groups} == {
            (None, f"127.0.0.1:{sched[0][1]}"), ("gpu0", f"127.0.0.1:{sidecar_port}"),
            ("inproc", f"127.0.0.1:{worker_dashboard}")}
        statuses = [scheduler_status(f"tcp://127.0.0.1:{sched[i][0]}") for i in (0, 1, 2, 3)]
    expected = [("client", None), ("client", "http://prometheus:9090"),
                ("span", "http://prometheus:9090"), ("span", "http://prometheus:9090")]
    assert [(s["job_mode"], s["prometheus_url"]) for s in statuses] == expected


# ---- runs: the collector against a real Prometheus ------------------------------------------


def _dataset(now: float) -> tuple[OpenMetrics, float, float]:
    """Two workers over the last 25 minutes, a monitor session inside, and an old hour on
    2024-05-01 (for the doc's RFC 3339 example). Returns (data, session start, stop)."""
    om = OpenMetrics()
    start = int(now) - 25 * 60
    session = (start + 60.0, start + 20 * 60.0)
    old = 1714564800  # 2024-05-01T12:00:00Z
    ranges = [(start, start + 24 * 60, ("w-a", "w-b")), (old + 600, old + 1800, ("w-a",))]
    for first, last, workers in ranges:
        times = [float(t) for t in range(first, last + 1, 15)]
        for w, worker in enumerate(workers):
            for gpu in range(2 - w):
                labels = {"worker": worker, "gpu": str(gpu), "uuid": f"GPU-{worker}-{gpu}",
                          "instance": f"host-{worker}:9446", "job": "dask-gpu"}
                om.add("dask_gpu_info", {**labels, "name": "Fake GPU", "hostname": f"h-{worker}",
                                         "pci_bus_id": f"0000:0{gpu}:00.0",
                                         "driver_version": "550.1", "simulated": "false"},
                       [(t, 1.0) for t in times])
                used = [(t, (1 + gpu + w) * GiB + (t - first) * 2**20) for t in times]
                om.add("dask_gpu_memory_used_bytes", labels, used)
                om.add("dask_gpu_memory_peak_bytes", labels,
                       [(t, v + (4 * GiB if 600 <= t - first < 630 else 0)) for t, v in used])
                om.add("dask_gpu_memory_total_bytes", labels, [(t, 16.0 * GiB) for t in times])
                om.add("dask_gpu_utilization_ratio", labels,
                       [(t, ((t - first) // 15 % 10) / 10) for t in times])
                om.add("dask_gpu_busy_seconds_total", labels,
                       [(t, (t - first) / 2) for t in times], "counter")
        sched = {"instance": "scheduler:8787", "job": "dask-scheduler"}
        om.add("dask_job_current_job", sched,
               [(t, 0.0 if t - first < 600 else 1.0) for t in times])
        om.add("dask_job_current_dag", sched, [(t, 0.0) for t in times])
        for worker in workers:
            for job in (0, 1):
                om.add("dask_job_worker_tasks", {**sched, "worker": worker, "job_id": str(job),
                                                 "dag_id": "0"},
                       [(t, 2.0) for t in times if (t - first < 600) == (job == 0)])
    scheduler = {"instance": "scheduler:8787", "job": "dask-scheduler"}
    times = [float(t) for t in range(start, start + 24 * 60 + 1, 15)]
    om.add("dask_job_monitor_start_timestamp_seconds", scheduler,
           [(t, session[0]) for t in times if t >= session[0]])
    om.add("dask_job_monitor_stop_timestamp_seconds", scheduler,
           [(t, 0.0 if t < session[1] else session[1]) for t in times if t >= session[0]])
    return om, *session


def run_collector(command: str, capsys) -> tuple[int, str, str]:
    argv = shlex.split(command)
    assert argv[0] == "collector", command
    code = collector_main(argv[1:])
    out, err = capsys.readouterr()
    return code, out, err


@requires_prometheus
@pytest.mark.integration
def test_collector_commands(tmp_path, monkeypatch, capsys):
    om, session_start, session_stop = _dataset(time.time())
    blocks = create_blocks(om, tmp_path / "blocks")
    with run_prometheus(tmp_path / "prom", blocks=blocks,
                        extra_args=["--storage.tsdb.retention.time=100y"]) as prom:
        work = tmp_path / "work"
        work.mkdir()
        monkeypatch.chdir(work)
        for key in [k for k in os.environ if k.startswith("DASK_METRICS_")]:
            monkeypatch.delenv(key)
        (name, value), = [shlex.split(documented(
            "export DASK_METRICS_PROMETHEUS_URL=http://prometheus:9090"))[1].split("=", 1)]
        monkeypatch.setenv(name, localise(value, {"http://prometheus:9090": prom.url}))

        def run(command: str, replacements: dict[str, str] | None = None) -> str:
            text = localise(documented(command), replacements or {})
            code, out, err = run_collector(text, capsys)
            assert code == 0, f"{text}: exit {code}: {err}"
            return out

        run("collector export --since 2h --out run-42")
        assert {p.name for p in (work / "run-42").iterdir()} == {
            "w-a.csv", "w-b.csv", "workers.csv", "jobs.csv", "export.json", *SUMMARIES}
        with open(work / "run-42" / "w-a.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert len(rows) == 2 * 97 and {r["worker_job"] for r in rows} == {"0", "1"}

        run("collector export --since monitor --layout seed")
        (seed,) = work.glob("dask-metrics-*")
        assert sorted(p.name for p in seed.glob("worker_*.csv")) == ["worker_0.csv",
                                                                    "worker_1.csv"]

        run("collector export --since monitor --out results")
        export = json.loads((work / "results" / "export.json").read_text())
        assert json.dumps(export).count(str(int(session_start))) >= 1

        table = run("collector peaks --since 2024-05-01T12:00:00Z --until 2024-05-01T14:00:00Z")
        assert "w-a" in table and "w-b" not in table and "GPU-w-a-1" in table

        peaks = json.loads(run("collector peaks --since monitor --by job --json"))
        assert {(p["worker"], p["job"]) for p in peaks} == {
            ("w-a", 0), ("w-a", 1), ("w-b", 0), ("w-b", 1)}
        by_job = run("collector peaks --since 2h --by job")
        assert "GPU-w-b-0" in by_job

        recent = run("collector peaks --since 15m --by job --prometheus http://127.0.0.1:9090",
                     {"http://127.0.0.1:9090": prom.url})
        assert "w-a" in recent and "w-b" in recent

        run("collector plot --since monitor --out plots")
        assert {"w-a.png", "w-b.png", "cluster.png"} <= {p.name for p in
                                                         (work / "plots").iterdir()}
        run("collector plot --csv run-42 --out run-42-plots --format png svg")
        assert {"w-a.png", "w-a.svg", "cluster.png", "cluster.svg"} <= {
            p.name for p in (work / "run-42-plots").iterdir()}
        shutil.copytree(work / "results", work / "dask-metrics-demo" / "results")
        run("collector plot --csv dask-metrics-demo/results --out my-plots --format svg")
        assert {"w-a.svg", "cluster.svg"} <= {p.name for p in (work / "my-plots").iterdir()}

        for expr in promql_expressions():
            status, body = prom.get("/api/v1/query?query=" + _quote(expr))
            assert status == 200, f"{expr}: {body}"
    assert session_stop > session_start


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def promql_expressions() -> list[str]:
    """Each expression of the docs' ```promql blocks (comment lines separate them)."""
    exprs: list[str] = []
    for path in doc_files():
        for block in fenced_blocks(path):
            if block.language != "promql":
                continue
            current: list[str] = []
            for line in [*block.lines, "#"]:
                if line.strip().startswith("#") or not line.strip():
                    if current:
                        exprs.append(" ".join(current))
                    current = []
                else:
                    current.append(line.strip())
    return exprs


def test_the_docs_have_promql_examples():
    assert len(promql_expressions()) >= 4


# ---- configuration examples -----------------------------------------------------------------


@requires_prometheus
@pytest.mark.integration
def test_prometheus_configurations_in_the_docs_pass_promtool(tmp_path):
    """Every ```yaml block with scrape_configs is a valid Prometheus configuration."""
    checked = 0
    for path in doc_files():
        for block in fenced_blocks(path):
            if block.language != "yaml" or "scrape_configs:" not in "\n".join(block.lines):
                continue
            config = tmp_path / f"prometheus-{checked}.yml"
            text = "\n".join(block.lines) + "\n"
            parsed = yaml.safe_load(text)
            # relative rule files are relative to the repository root, as the docs say
            parsed["rule_files"] = [str(ROOT / f) for f in parsed.get("rule_files", [])]
            config.write_text(yaml.safe_dump(parsed))
            result = subprocess.run(["promtool", "check", "config", "--syntax-only",
                                     str(config)], capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, f"{block.where}: {result.stdout}{result.stderr}"
            checked += 1
    assert checked >= 2


# ---- runs: the benchmarks' command lines ----------------------------------------------------


PARSE_ONLY = """
import argparse, runpy, sys
real = argparse.ArgumentParser.parse_args
def parse_args(self, args=None, namespace=None):
    result = real(self, args, namespace)
    print("PARSED", sorted(vars(result)))
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = parse_args
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
print("NOT PARSED")
raise SystemExit(1)
"""


@pytest.mark.integration
def test_benchmark_command_lines_parse():
    """The benchmarks take minutes each (their results are docs/benchmarks.md): here each
    documented command line goes through the benchmark's own argument parser, which stops it
    before it runs; a wrong option or value fails as it would for a reader."""
    commands = [c for c, how in ACCOUNTS.items() if isinstance(how, Parsed)]
    defaults = yaml.safe_load((ROOT / "exporter" / "scheduler.yaml").read_text())
    running = []
    for command in commands:
        words = shlex.split(documented(command))
        env = dict(os.environ)
        while "=" in words[0]:
            key, _, value = words.pop(0).partition("=")
            section, _, option = key.removeprefix("DASK_DASK_METRICS__").partition("__")
            known = defaults["dask-metrics"][section.lower()]
            assert option.lower().replace("_", "-") in known, key
            env[key] = value
        assert words[0] == "python", command
        running.append((command, subprocess.Popen(
            [sys.executable, "-c", PARSE_ONLY, *words[1:]], cwd=ROOT, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    for command, proc in running:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "PARSED" in out, f"{command}:\n{out[-2000:]}"


# ---- links between the docs -----------------------------------------------------------------


def _anchors(path: Path) -> set[str]:
    anchors = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            title = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            anchors.add(title)
    return anchors


def test_relative_links_and_anchors_resolve():
    broken = []
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_documented_exporter_options_exist():
    """Every option of docs/exporter.md's table is one the sidecar or the worker preload
    accepts."""
    from dask_metrics.exporter.cli import WORKER_ONLY, build_parser
    from dask_metrics.exporter.config import OPTIONS

    help_text = build_parser().format_help()
    worker_only = {o.flag for o in OPTIONS if o.name in WORKER_ONLY}
    table = (ROOT / "docs" / "exporter.md").read_text()
    options = set(re.findall(r"^\| `(--[a-z-]+)", table, flags=re.M))
    assert len(options) >= 10
    missing = {o for o in options if o not in help_text and o not in worker_only}
    assert not missing, missing
    assert worker_only <= options, worker_only - options  # and every worker-only one is there
