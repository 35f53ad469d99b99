"""Podman helpers for tests/test_containers.py: what is missing, the locally made base and
Prometheus images (no container registry is reachable here), the documented `docker`
commands turned into podman's, and clean-up that survives a failed test.

Docker stays the documented tool; podman (rootful or rootless, with runc) proves the files.
Images and build layers stay in podman's storage between runs: the base image is made once
per recipe (its tag carries the recipe's hash), and the builds reuse their cached layers.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import distributed
import pytest

from tests.doc_commands import shell_commands

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
# runc (crun refuses hybrid cgroups), no default ulimits (the machine's hard limits are
# lower than podman's defaults), cgroupfs and file events (no systemd).
CONTAINERS_CONF = DOCKER / "local" / "containers.conf"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
DEBIAN_MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
_RECIPE = hashlib.sha256(f"{BASE_SUITE} {' '.join(BASE_PACKAGES)} minbase 1".encode())
BASE_IMAGE = f"localhost/dask-metrics-base:{BASE_SUITE}-{_RECIPE.hexdigest()[:8]}"
PROMETHEUS_DOCKERFILE = DOCKER / "local" / "prometheus.Dockerfile"
PROMETHEUS_IMAGE = f"localhost/dask-metrics-prometheus:{BASE_SUITE}-{_RECIPE.hexdigest()[:8]}"
SETUP = "bash scripts/setup-containers.sh"


def tool(name: str) -> str | None:
    """``name`` on PATH or next to this Python (the virtual environment's bin/)."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def podman_env() -> dict[str, str]:
    """The environment for podman and podman-compose: the repository's containers.conf
    unless the caller set CONTAINERS_CONF (a user's own configuration is left alone)."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    return env


def podman(*args: str, check: bool = True, timeout: float = 600,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                            env=env or podman_env(), check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"podman {shlex.join(args)} failed ({result.returncode}):\n"
                             f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def missing() -> str | None:
    """What this machine lacks to run the tier, said exactly; None when nothing is."""
    need = [name for name in ("podman", "runc") if shutil.which(name) is None]
    if tool("podman-compose") is None:
        need.append("podman-compose")
    if need:
        return f"missing {', '.join(need)}: run `{SETUP}`"
    if os.getuid() != 0 and not Path("/etc/subuid").is_file():
        return ("rootless podman needs user namespaces: /etc/subuid and /etc/subgid entries "
                f"and newuidmap (package uidmap); run `{SETUP}` as root or add them")
    info = podman("info", "--format", "{{.Host.OCIRuntime.Name}}", check=False, timeout=120)
    if info.returncode != 0:
        return f"`podman info` fails: {info.stderr.strip()[-800:]}"
    if info.stdout.strip() != "runc":
        return (f"podman uses the {info.stdout.strip()} runtime, not runc: set CONTAINERS_CONF="
                f"{CONTAINERS_CONF} or runtime = \"runc\" in your containers.conf")
    return None


def require_containers() -> None:
    """Skip, naming what is missing; in CI (CI set) fail instead: CI must run the tier."""
    reason = missing()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the containers tier: {reason}")
    pytest.skip(reason)


def image_exists(name: str) -> bool:
    return podman("image", "exists", name, check=False, timeout=60).returncode == 0


def ensure_base_image() -> str:
    """A Debian base with Python made by debootstrap and imported (about a minute, once)."""
    if image_exists(BASE_IMAGE):
        return BASE_IMAGE
    if shutil.which("debootstrap") is None:
        pytest.fail(f"making the base image needs debootstrap: run `{SETUP}`")
    with tempfile.TemporaryDirectory(prefix="dask-metrics-rootfs-", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        result = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
             BASE_SUITE, str(rootfs), DEBIAN_MIRROR],
            capture_output=True, text=True, timeout=900, check=False)
        assert result.returncode == 0, f"debootstrap failed:\n{result.stdout[-3000:]}"
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (rootfs / junk).glob("*"):
                if path.is_file():
                    path.unlink()
        tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."],
                               stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["podman", "import", "--change", 'CMD ["/bin/bash"]', "--change",
             "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "-", BASE_IMAGE], stdin=tar.stdout, capture_output=True, text=True,
            env=podman_env(), timeout=600, check=False)
        assert tar.stdout is not None
        tar.stdout.close()
        assert tar.wait() == 0 and imported.returncode == 0, imported.stderr
    return BASE_IMAGE


def build_options() -> list[str]:
    """What a podman build adds to `docker build`: the Docker image format (HEALTHCHECK is
    not in OCI's), the Dockerfile's own ignore file, the Dask version of the tests' own
    clients (else Dask warns of a mismatch), and the host's CA bundle, read-only, as the
    registries are reached through it."""
    options = ["--format", "docker", "--ignorefile", "docker/Dockerfile.dockerignore",
               "--build-arg", f"DASK_VERSION={distributed.__version__}"]
    if CA_BUNDLE.is_file():
        options += ["-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"]
    return options


def ensure_prometheus_image(base: str) -> str:
    """Prometheus from Debian's package on the local base (cached layers after the first)."""
    podman("build", *build_options()[:2], "-f", str(PROMETHEUS_DOCKERFILE.relative_to(ROOT)),
           "--build-arg", f"BASE_IMAGE={base}", "-t", PROMETHEUS_IMAGE,
           str(PROMETHEUS_DOCKERFILE.parent.relative_to(ROOT)), timeout=900)
    return PROMETHEUS_IMAGE


def documented(prefix: str) -> list[str]:
    """The documented commands (docs/, README.md) that start with ``prefix``, as words."""
    found = [shlex.split(c.text) for c in shell_commands() if c.text.startswith(prefix)]
    assert found, f"no documented command starts with {prefix!r}"
    return found


def as_podman(words: Sequence[str], *, options: Sequence[str] = ()) -> list[str]:
    """A documented `docker SUBCOMMAND ...` as podman's, ``options`` after the subcommand."""
    assert words[0] == "docker", words
    return ["podman", words[1], *options, *words[2:]]


def image_size(name: str) -> int:
    return int(podman("image", "inspect", "--format", "{{.Size}}", name).stdout.strip())


@contextmanager
def containers(label: str) -> Iterator[str]:
    """Yield a label value to put on containers (``--label`` dask-metrics-test=value) and
    remove every container, network and volume carrying it afterwards, failed or not."""
    value = f"{label}-{os.getpid()}"
    try:
        yield value
    finally:
        remove_labelled(f"dask-metrics-test={value}")


def remove_labelled(label: str) -> None:
    ids = podman("ps", "-a", "-q", "--filter", f"label={label}", check=False).stdout.split()
    if ids:
        podman("rm", "-f", "-t", "2", *ids, check=False)
    for kind in ("network", "volume"):
        names = podman(kind, "ls", "-q", "--filter", f"label={label}",
                       check=False).stdout.split()
        if names:
            podman(kind, "rm", "-f", *names, check=False)


def logs(container: str) -> str:
    result = podman("logs", container, check=False, timeout=60)
    return (result.stdout + result.stderr)[-3000:]
