"""The README's first command, end to end as a new user runs it (simulated GPUs here): its
CSV files, peaks, plots; a second run with --keep-running, stopped like Ctrl-C; nothing left
running after any run. And the demo's other branch, on GPUs read through NVML (the real
binding over the fake driver)."""

from __future__ import annotations

import ast
import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from tests.fake_nvml import GiB
from tests.helpers import http_get, png_size, wait_for
from tests.prometheus_helpers import requires_prometheus

pytestmark = [pytest.mark.integration, requires_prometheus]
ROOT = Path(__file__).resolve().parent.parent
DEMO = ["bash", str(ROOT / "scripts" / "demo.sh")]
WORKERS = ("worker-0", "worker-1", "worker-2")
SPIKE_PERCENT = 25  # the default 1 GiB spike on a simulated GPU of 4 GiB
FIXED = ["timestamp", "time", "worker", "gpu", "uuid", "job", "dag", "worker_job", "worker_dag"]


# distributed's own shutdown race: a heartbeat in flight when the scheduler closes the
# worker fails, and the worker logs it as an error while it stops
SHUTDOWN_RACE = "Failed to communicate with scheduler during heartbeat."
LOG_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}")


def unexpected_errors(text: str) -> list[str]:
    """The ERROR and CRITICAL lines of a log, but for the heartbeat race logged within a
    second of its worker's "Stopping worker" line."""
    def when(line: str) -> datetime | None:
        found = LOG_TIME.match(line)
        return datetime.strptime(found[0], "%Y-%m-%d %H:%M:%S,%f") if found else None

    lines = text.splitlines()
    stopping = [t for line in lines if "Stopping worker" in line if (t := when(line))]
    return [line for line in lines if " - ERROR - " in line or " - CRITICAL - " in line
            if not (SHUTDOWN_RACE in line and (t := when(line))
                    and any(abs((t - s).total_seconds()) <= 1 for s in stopping))]


def left_running(folder: Path) -> list[str]:
    """Processes whose command line names ``folder``: what the demo started and left."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if str(folder) in cmdline and proc.pid != os.getpid():
            found.append(cmdline)
    return found


def printed(stdout: str, call: str) -> object:
    """The value the demo printed after ``call ->``."""
    match = re.search(re.escape(call) + r" -> (\[.*?\]) ", stdout)
    assert match, f"{call} not printed:\n{stdout}"
    return ast.literal_eval(match.group(1))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "out"
    proc = subprocess.run([*DEMO, "--out", str(out)], capture_output=True, text=True,
                          timeout=280, cwd=tmp_path_factory.getbasetemp())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout


def test_demo_end_to_end(first_run):
    out, stdout = first_run
    assert "SIMULATED GPUs" in stdout and "NO NVIDIA GPU HERE" in stdout
    assert re.search(r"Prometheus: http://127\.0\.0\.1:\d+ \(data in " + re.escape(str(out)),
                     stdout)
    assert (out / "prometheus").is_dir() and (out / "prometheus.yml").is_file()
    # One CSV per worker, job/DAG columns filled during the work and empty when idle.
    jobs_seen: set[tuple[str, str]] = set()
    for name in WORKERS:
        path = out / "results" / f"{name}.csv"
        assert str(path) in stdout
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert rows and list(rows[0])[:9] == FIXED
        assert {r["worker"] for r in rows} == {name}
        times = [float(r["timestamp"]) for r in rows]
        assert times == sorted(times) and times[0] >= 0
        jobs_seen |= {(r["job"], r["dag"]) for r in rows}
        assert "" in {r["worker_job"] for r in rows} and {"0", "1"} & {r["worker_job"]
                                                                       for r in rows}
    assert {("0", "0"), ("1", "0"), ("", "")} <= jobs_seen  # the DAGs that last 2 s or more
    for name in ("tables/workers.csv", "tables/jobs.csv", "tables/activities.csv",
                 "tables/gpu_by_prefix.csv", "export.json"):  # every file is named, and there
        assert f"{out / 'results' / name}  (" in stdout and (out / "results" / name).is_file()
    # the original to_csv contract: the folder's CSV files are one per worker
    assert sorted(p.name for p in (out / "results").glob("*.csv")) == [
        f"{w}.csv" for w in WORKERS]
    # The spike: on worker-0 only, and counted though it fell between scrapes or not.
    peaks = printed(stdout, "monitor.peak_memory()")
    assert len(peaks) == 3 and all(len(p) == 1 for p in peaks), peaks
    assert peaks[0][0] >= SPIKE_PERCENT and max(peaks[1][0], peaks[2][0]) < 10, peaks
    with open(out / "results" / "worker-0.csv", newline="") as fh:
        assert max(float(r["peak-mem"]) for r in csv.DictReader(fh)) >= 2**30
    assert printed(stdout, "monitor.successful_jobs()") == [[True, True], [True, True, True]]
    assert "$ collector peaks --since monitor" in stdout and "worker-0  0" in stdout
    # Names and provenance: the jobs by name, the simulated GPUs marked in files and plots.
    with open(out / "results" / "tables" / "jobs.csv", newline="") as fh:
        dags = [(r["job"], r["job_name"], r["dag"], r["status"]) for r in csv.DictReader(fh)]
    assert dags == [("0", "etl", "0", "finished"), ("0", "etl", "1", "finished"),
                    ("1", "train", "0", "finished"), ("1", "train", "1", "finished"),
                    ("1", "train", "2", "finished")], dags
    with open(out / "results" / "tables" / "workers.csv", newline="") as fh:
        assert {(r["worker"], r["simulated"]) for r in csv.DictReader(fh)} == {
            (w, "true") for w in WORKERS}
    assert json.loads((out / "results" / "export.json").read_text())["simulated"] is True
    assert re.search(r"worker-0  0 .*(etl|train) · DAG \d", stdout), stdout[-2000:]
    # The pictures: real PNG images of the documented size, and SVG files.
    for stem in ("cluster", *WORKERS):
        assert png_size(out / "plots" / f"{stem}.png") == (1200, 650)
        svg = (out / "plots" / f"{stem}.svg").read_text()
        assert svg.startswith("<?xml") and "<svg" in svg and "SIMULATED GPUs" in svg
        assert str(out / "plots" / f"{stem}.png") in stdout
        assert ("capacity of a worker (4 GiB)" if stem == "cluster" else "capacity (4 GiB)"
                ) in svg  # --simulate-memory's default, one line for equal capacities
    # The session report (Monitor.report): its path printed, both jobs by name, simulated.
    assert str(out / "report" / "report.html") in stdout
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["session"]["simulated"] == "all"
    assert [(j["job_name"], j["status"]) for j in report["jobs"]] == [("etl", "finished"),
                                                                      ("train", "finished")]
    assert "SIMULATED GPUs" in (out / "report" / "report.html").read_text()
    assert not left_running(out)
    for log in (out / "logs").glob("*.log"):  # a normal shutdown logs no error
        text = log.read_text(errors="replace")  # (Dask may log a closed comm at INFO level)
        assert not unexpected_errors(text), (log.name, text[-2000:])


def test_the_readmes_table_of_files_is_what_the_demo_writes(first_run):
    out, _ = first_run
    table = (ROOT / "README.md").read_text().split("Where the files land", 1)[1]
    cells = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| `DIR/")]
    assert len(cells) >= 10
    for cell in cells:
        paths: list[str] = []
        for token in re.findall(r"`([^`]+)`", cell):
            if token.startswith("DIR/"):
                paths.append(token[4:])
            elif token.startswith("."):  # `DIR/a.png`, `.svg`: a.png and a.svg
                paths.append(paths[-1].rsplit(".", 1)[0] + token)
            else:  # `DIR/b/a.html`, `a.json`: b/a.html and b/a.json
                paths.append(str(Path(paths[-1]).parent / token))
        for path in paths:
            for name in ([path.replace("<worker>", w) for w in WORKERS] if "<worker>" in path
                         else [path]):
                assert (out / name).exists(), name


def test_second_run_keeps_running_until_interrupted(first_run):
    out, _ = first_run
    proc = subprocess.Popen([*DEMO, "--out", str(out), "--keep-running"], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "Press Ctrl-C to stop" in line:
                break
        url = re.search(r"Prometheus (http://127\.0\.0\.1:\d+)", lines[-1] if lines else "")
        assert url, "".join(lines)
        assert http_get(url.group(1) + "/-/ready")[0] == 200
        assert left_running(out)  # still up while it waits
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "".join(lines) + rest
    assert "stopping" in rest and "everything started was stopped" in rest
    wait_for(lambda: not left_running(out), timeout=20, what="every process to stop")
    assert png_size(out / "plots" / "cluster.png") == (1200, 650)


def test_demo_on_gpus_found_through_nvml(fake_nvml, tmp_path):
    fake_nvml.gpus[0].memory_used, fake_nvml.gpus[0].gpu_util = 20 * GiB, 70
    fake_nvml.gpus[1].memory_used, fake_nvml.gpus[1].gpu_util = 8 * GiB, 30
    fake_nvml.write()
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "dask_metrics.demo", "--out", str(out)],
                          env=fake_nvml.env, capture_output=True, text=True, timeout=280,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "SIMULATED" not in proc.stdout
    assert "2 worker(s) with sidecar exporters on 2 GPU(s)" in proc.stdout  # one per GPU
    assert printed(proc.stdout, "monitor.peak_memory()") == [[25], [10]]  # of 80 GiB each
    for i, util in ((0, "70"), (1, "30")):  # worker i was given GPU i, and only that one
        with open(out / "results" / f"worker-{i}.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert {(r["uuid"], r["compute-util"]) for r in rows} == {(fake_nvml.uuid(i), util)}
    assert png_size(out / "plots" / "cluster.png") == (1200, 650)
    assert not left_running(out)


def test_demo_failures_are_one_line_and_leave_nothing_running(tmp_path):
    out = tmp_path / "out"
    demo = [sys.executable, "-m", "dask_metrics.demo", "--simulate", "--out", str(out)]
    missing = subprocess.run(demo, env={**os.environ, "PATH": str(tmp_path)}, cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1
    assert "demo: error: Prometheus is not installed: 'sudo apt-get install prometheus'" in \
        missing.stderr and "Traceback" not in missing.stderr
    with socket.socket() as taken:  # Prometheus cannot listen: it exits, the demo says so
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = subprocess.run([*demo, "--prometheus-port", port], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
    assert busy.returncode == 1 and "Traceback" not in busy.stderr, busy.stderr
    assert re.search(r"demo: error: prometheus exited with \d+ while waiting for Prometheus "
                     r".*address already in use", busy.stderr), busy.stderr
    assert not left_running(out)
    bad = subprocess.run([*demo, "--spike", "lots"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("demo: error: --spike: must be bytes")
    assert bad.stderr.count("\n") == 1
