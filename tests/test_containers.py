"""The image and the compose stack, built and run (opt-in tier: pytest -m containers).

The documented `docker` commands (docs/deploy.md) are read from the docs and run with podman:
`docker build` on a Debian base made here with debootstrap (the Dockerfile's PYTHON_IMAGE;
the official Python image stays the default for users), the sidecar, scheduler and worker
roles of the image, and `docker compose ... up --build` under podman-compose with Prometheus
from Debian's package. Grafana is the one service left out: no registry reachable here ships
a Grafana server (not Debian, PyPI or npm), and no image registry is reachable.

Setup: `bash scripts/setup-containers.sh` (podman, runc, debootstrap, podman-compose). A
missing piece skips the tier naming it, and fails it where CI is set.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse

import distributed
import pytest
import yaml

from dask_metrics.contract import CURRENT_JOB, UP
from tests.container_helpers import (
    BASE_PACKAGES,
    DOCKER,
    ROOT,
    as_podman,
    build_options,
    containers,
    documented,
    ensure_base_image,
    ensure_prometheus_image,
    image_size,
    logs,
    podman,
    podman_env,
    remove_labelled,
    require_containers,
    tool,
)
from tests.helpers import Scrape, free_port, http_get, processes, scrape, wait_for

pytestmark = pytest.mark.containers
COMPOSE = DOCKER / "compose.yaml"
# Services that need an image no registry reachable here has (see the module's docstring).
NOT_HERE = {"grafana": "no Grafana server package on Debian, PyPI or npm, no image registry"}
DOCUMENTED_SIZE = re.compile(r"image is about (\d+) MB")


def say(request: pytest.FixtureRequest, line: str) -> None:
    """A line in pytest's report, whatever the output capture."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"containers: {line}")


@pytest.fixture(scope="session")
def base_image() -> str:
    require_containers()
    return ensure_base_image()


@pytest.fixture(scope="session")
def image(base_image: str, request: pytest.FixtureRequest) -> str:
    """The documented `docker build`, run with podman on the local base."""
    (build,) = documented("docker build ")
    tag = build[build.index("-t") + 1]
    command = as_podman(build, options=[*build_options(), "--build-arg",
                                        f"PYTHON_IMAGE={base_image}"])
    started = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900,
                            env=podman_env(), check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    say(request, f"built {tag} in {time.monotonic() - started:.0f} s, "
                 f"{image_size(tag) / 1e6:.0f} MB, on {base_image}")
    return tag


def run_options(label: str, name: str) -> list[str]:
    """What the tests add to a documented `docker run`: in the background, named, labelled
    for clean-up, read-only with a tmpfs /tmp (as compose.yaml and the charts run it), and
    no healthcheck timer (`podman healthcheck run` runs it)."""
    return ["-d", "--name", name, "--label", f"dask-metrics-test={label}", "--read-only",
            "--tmpfs", "/tmp", "--health-interval", "disable"]


def fetch_inside(container: str, url: str) -> str:
    """GET ``url`` from inside ``container`` (no published port needed); ConnectionError
    (which wait_for retries) while it does not answer."""
    result = podman("exec", container, "python", "-c", "import sys, urllib.request; "
                    f"sys.stdout.write(urllib.request.urlopen({url!r}, timeout=4).read()"
                    ".decode())", check=False, timeout=60)
    if result.returncode != 0:
        raise ConnectionError(f"{url} from {container}: {result.stderr.strip()[-300:]}")
    return result.stdout


def families(page: Scrape) -> set[tuple[str, tuple[str, ...]]]:
    return {(name, tuple(k for k, _ in labels)) for name, series in page.samples.items()
            for labels in series}


# ---- the image -------------------------------------------------------------------------


def test_sidecar_serves_read_only_as_uid_10001_and_its_healthcheck_passes(image):
    (run,) = [w for w in documented("docker run --rm -p 9446:9446 ") if "--simulate" in w]
    port = free_port()
    with containers("sidecar") as label:
        command = as_podman(run, options=run_options(label, label))
        command[command.index("9446:9446")] = f"127.0.0.1:{port}:9446"
        podman(*command[1:])
        base = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: http_get(base + "/healthz"), lambda r: r[0] == 200, timeout=60,
                     what="the sidecar's /healthz")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{logs(label)}") from None
        samples = scrape(base + "/metrics")
        ups = dict(samples[UP.name])
        assert len(ups) == 2 and set(ups.values()) == {1.0}, ups
        # The same series and label names as the exporter of this checkout: the image is
        # built from the current sources (renamed modules, new labels and all).
        with processes(([sys.executable, "-m", "dask_metrics.exporter", "--simulate", "2",
                         "--listen", f"127.0.0.1:{(host := free_port())}"], os.environ)):
            here = wait_for(lambda: scrape(f"http://127.0.0.1:{host}/metrics"),
                            lambda s: bool(s[UP.name]), timeout=60,
                            what="the host's exporter")
        assert families(samples) == families(here)

        # Runs as 10001:10001 (the process, not only the image's USER).
        status = podman("exec", label, "cat", "/proc/1/status").stdout
        assert re.search(r"^Uid:\s+10001\s+10001\s+10001\s+10001$", status, re.M), status
        assert re.search(r"^Gid:\s+10001\s+10001\s+10001\s+10001$", status, re.M), status
        # The image's HEALTHCHECK command succeeds inside it.
        healthcheck = json.loads(podman("image", "inspect", image).stdout)[0]["Healthcheck"]
        assert healthcheck["Test"][0] == "CMD", healthcheck
        check = podman("healthcheck", "run", label, check=False)
        assert check.returncode == 0, check.stdout + check.stderr
        state = podman("inspect", "--format", "{{.State.Health.Status}}", label).stdout.strip()
        assert state == "healthy", state
        # Read-only root: nothing written outside the tmpfs /tmp. podman's own mount points
        # for /etc/hosts, /etc/resolv.conf and /run/.containerenv show up as changed dirs.
        changes = podman("diff", label).stdout.split("\n")
        written = [c for c in changes if c and c.split()[-1] not in ("/etc", "/run")]
        assert written == [], written


def test_scheduler_and_worker_roles_start_from_the_same_image(image):
    (scheduler,) = documented("docker run --rm dask-metrics:0.1.0 dask scheduler")
    (worker,) = documented("docker run --rm dask-metrics:0.1.0 dask worker")
    preloads = [w[w.index("--preload") + 1] for w in (scheduler, worker)]
    assert preloads == ["dask_metrics.scheduler", "dask_metrics.worker"]
    address = worker[worker.index("worker") + 1]
    host = urllib.parse.urlparse(address).hostname  # the worker's `scheduler` host
    with containers("roles") as label:
        network = label
        podman("network", "create", "--label", f"dask-metrics-test={label}", network)
        on_network = ["--network", network]
        podman(*as_podman(scheduler, options=[*run_options(label, f"{label}-scheduler"),
                                             *on_network, "--network-alias", host])[1:])
        podman(*as_podman(worker, options=[*run_options(label, f"{label}-worker"),
                                          *on_network])[1:])

        def scheduler_metrics() -> str:
            return fetch_inside(f"{label}-scheduler", "http://127.0.0.1:8787/metrics")

        def one_worker() -> bool:
            found = re.search(r"^dask_scheduler_workers\{[^}]*\} (\S+)$", scheduler_metrics(),
                              re.M)
            return found is not None and float(found.group(1)) >= 1

        try:
            wait_for(one_worker, timeout=90, interval=0.5,
                     what="the worker to register with the scheduler")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- scheduler\n{logs(f'{label}-scheduler')}\n"
                                 f"--- worker\n{logs(f'{label}-worker')}") from None
        # The scheduler preload serves the job series; both preloads ran.
        assert f"{CURRENT_JOB.name} " in scheduler_metrics()
        for role, module in (("scheduler", preloads[0]), ("worker", preloads[1])):
            output = logs(f"{label}-{role}")
            assert re.search(rf"preload.*{re.escape(module)}", output, re.I), output
            assert "Traceback" not in output, output


def test_the_image_runs_the_dask_of_its_build_argument(image):
    """DASK_VERSION pins Dask in the image to the clients' version (no mismatch warning)."""
    script = "import dask, distributed; print(dask.__version__, distributed.__version__)"
    out = podman("run", "--rm", "--entrypoint", "python", image, "-c", script).stdout
    assert out.split() == [distributed.__version__] * 2, out


def test_the_image_has_no_compiler_no_pip_and_a_documented_size(image, request):
    script = r"""
for t in gcc cc c++ g++ clang make ld as pip pip3 pip3.11 pip3.12; do
  command -v "$t" && echo "found: $t"
done
for py in /opt/dask-metrics/bin/python /usr/bin/python3 /usr/local/bin/python3; do
  [ -x "$py" ] && "$py" -c 'import pip' 2>/dev/null && echo "pip importable by $py"
done
find / -xdev \( -name 'pip' -o -name 'pip-*.dist-info' \) -path '*-packages*' 2>/dev/null
exit 0
"""
    out = podman("run", "--rm", "--entrypoint", "sh", image, "-c", script).stdout
    assert out.strip() == "", out
    size = image_size(image)
    say(request, f"image {image}: {size / 1e6:.0f} MB on the debootstrap base "
                 f"({', '.join(BASE_PACKAGES)})")
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    documented_mb = DOCUMENTED_SIZE.search(deploy)
    assert documented_mb, "docs/deploy.md states the image's size ('image is about N MB')"
    assert abs(size / 1e6 - int(documented_mb.group(1))) <= 25, (size, documented_mb.group(0))


# ---- the compose stack ------------------------------------------------------------------


def compose_services(profile: str) -> list[str]:
    data = yaml.safe_load(COMPOSE.read_text())
    return [name for name, svc in data["services"].items()
            if (not svc.get("profiles") or profile in svc["profiles"]) and name not in NOT_HERE]


def prometheus_targets() -> set[str]:
    config = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    return {t for job in config["scrape_configs"] for group in job["static_configs"]
            for t in group["targets"]}


def query(prometheus: str, expr: str) -> list[dict]:
    status, body = http_get(f"{prometheus}/api/v1/query?query={urllib.parse.quote(expr)}")
    assert status == 200, body
    return json.loads(body)["data"]["result"]


@pytest.fixture(scope="module")
def stack(image, base_image, request):
    """`docker compose -f docker/compose.yaml up --build` under podman-compose, on free
    ports, every service but Grafana; down (volumes too) and removed afterwards, whatever
    happens. Yields (scheduler address, Prometheus URL)."""
    (up,) = documented("docker compose -f docker/compose.yaml up")
    assert up[up.index("-f") + 1] == "docker/compose.yaml" and "--build" in up
    say(request, f"compose: leaving out {', '.join(f'{k} ({v})' for k, v in NOT_HERE.items())}")
    ports = {name: free_port() for name in ("SCHEDULER_PORT", "DASHBOARD_PORT",
                                            "PROMETHEUS_PORT", "GRAFANA_PORT")}
    prometheus = f"http://127.0.0.1:{ports['PROMETHEUS_PORT']}"
    env = {**podman_env(), **{k: str(v) for k, v in ports.items()},
           "PYTHON_IMAGE": base_image, "PROMETHEUS_IMAGE": ensure_prometheus_image(base_image),
           "DASK_METRICS_PROMETHEUS_URL": prometheus}
    project = f"dask-metrics-test-{os.getpid()}"
    compose = [tool("podman-compose") or "podman-compose", "-p", project,
               *up[up.index("-f"):up.index("up")],
               f"--podman-build-args={' '.join(build_options())}"]
    services = compose_services(env.get("COMPOSE_PROFILES", "sim"))

    def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*compose, *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)

    started = time.monotonic()
    try:
        result = run(*up[up.index("up"):], "-d", *services)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
        names = podman("ps", "-a", "--filter", f"label=io.podman.compose.project={project}",
                       "--format", "{{.Names}}").stdout.split()
        try:
            wait_for(lambda: query(prometheus, "up"),
                     lambda r: len(r) == len(prometheus_targets())
                     and all(x["value"][1] == "1" for x in r),
                     timeout=120, interval=0.5, what="Prometheus to scrape every target up")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n" + "\n".join(f"--- {n}\n{logs(n)}"
                                                         for n in names)) from None
        say(request, f"compose stack up and scraped in {time.monotonic() - started:.0f} s: "
                     f"{', '.join(services)}")
        yield f"tcp://127.0.0.1:{ports['SCHEDULER_PORT']}", prometheus, names
    finally:
        down = run("down", "-v", "-t", "5", timeout=300)
        remove_labelled(f"io.podman.compose.project={project}")
        left = podman("ps", "-a", "-q", "--filter",
                      f"label=io.podman.compose.project={project}").stdout.split()
        assert down.returncode == 0 and not left, down.stdout + down.stderr


def test_prometheus_scrapes_every_target_of_the_stack(stack):
    _, prometheus, _ = stack
    up = {r["metric"]["instance"]: r["value"][1] for r in query(prometheus, "up")}
    assert up == dict.fromkeys(prometheus_targets(), "1")
    # Both sidecars serve their worker's GPUs, named by the worker-info file on the volume.
    workers = {r["metric"]["worker"] for r in query(prometheus, UP.name)}
    assert workers == {"worker-1", "worker-2"}, workers


def test_compose_healthchecks_pass_inside_the_containers(stack):
    _, _, names = stack
    for name in names:
        check = podman("healthcheck", "run", name, check=False)
        assert check.returncode == 0, f"{name}: {check.stdout}{check.stderr}\n{logs(name)}"


def test_a_monitored_workload_exports_per_worker_csvs(stack, tmp_path):
    """The Monitor API from the host, then `collector export` against the stack's
    Prometheus: one CSV per worker, with the job and DAG columns filled while it ran."""
    from distributed import Client

    from dask_metrics import Monitor

    address, prometheus, _ = stack
    with Client(address, timeout=60) as client:
        client.wait_for_workers(2, timeout=60)
        monitor = Monitor(client)  # Prometheus: the URL the scheduler advertises
        monitor.start()
        # Two tasks per worker, long enough for a scrape (every 5 s) to see them run.
        futures = [client.submit(time.sleep, 7, workers=[name], pure=False, key=f"nap-{i}")
                   for i, name in enumerate(["worker-1", "worker-2"] * 2)]
        client.gather(futures)
        since = time.time()
        wait_for(lambda: query(prometheus, f"{CURRENT_JOB.name}[20s]"),
                 lambda r: any(float(t) >= since and v == "-1"
                               for s in r for t, v in s["values"]),
                 timeout=60, interval=0.5, what="a scrape of the idle scheduler")
        stopped = Monitor(client).stop()["session"]
    assert stopped["stop"] > stopped["start"]
    out = tmp_path / "csv"
    result = subprocess.run([tool("collector") or "collector", "export", "--since", "monitor",
                             "--prometheus", prometheus, "--out", str(out)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in out.glob("worker-*.csv")) == ["worker-1.csv", "worker-2.csv"]
    for name in ("worker-1.csv", "worker-2.csv"):
        with open(out / name, newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert rows, name
        assert {"job", "dag", "worker_job", "worker_dag"} <= set(rows[0]), list(rows[0])
        busy = {(r["worker_job"], r["worker_dag"]) for r in rows if r["worker_job"]}
        assert busy, f"{name}: no row saw the workload's job: {rows}"
        assert {r["simulated"] for r in rows if "simulated" in r} <= {"true"}
    assert "workers.csv" in {p.name for p in out.iterdir()}

