"""Faults and bad input, part by part: each row of the table is a test in this file (or the
file named), each one reproducing what a user or an adversary did and checking the program
keeps working, says what happened in one line, and leaves nothing behind.

| part | fault | test |
|---|---|---|
| collector | hostile server echoes credentials back | test_echoed_credentials_never_reach_the_output |
| collector | server down, slow, 5xx, HTML, partial | tests/test_collector_faults.py |
| collector | signal during an export (TERM, HUP, timeout) | test_a_signal_during_an_export_leaves_nothing |
| collector | range far larger than the data (1y, 100y, 2099) | test_cost_follows_the_data_not_the_range |
| collector | bad time input (10000y, year 0) | test_times_out_of_range_are_usage_errors |
| collector | --step too fine or longer than the range | test_steps_that_make_no_sense_are_refused |
| collector | plot without matplotlib | test_plot_without_matplotlib_leaves_no_folder |
| collector | disk full or read-only output | test_an_unwritable_output_is_one_line_and_leaves_nothing |
| watch | a session that cannot be exported | test_watch_exports_later_sessions_after_a_failed_one |
| watch | Prometheus down: one line, not one per retry | test_watch_says_prometheus_is_down_once |
| monitor | no scheduler given, wrong port, bad address | test_monitor_status_without_a_scheduler_is_one_line |
| scheduler preload | bad setting (port in use, bad job-mode, TTL, count) | test_a_bad_preload_setting_stops_the_scheduler_with_one_line |
| exporter (sidecar, worker preload) | TLS stalls, load, SIGTERM, absurd options, UUIDs | tests/test_faults_exporter.py |
| Monitor | sessions, closed clients, attach after start | tests/test_faults_monitor.py |
"""

from __future__ import annotations

import base64
import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import pytest
from distributed import Client

from dask_metrics import Monitor, contract
from dask_metrics.collector.monitor import watch
from tests.helpers import (
    clean_env,
    collector_process,
    free_port,
    preload_cluster,
    serve_http,
    wait_for,
)
from tests.prometheus_helpers import OpenMetrics, create_blocks, run_prometheus

ROOT = Path(__file__).resolve().parent.parent


def one_line_error(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert result.returncode == code, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("collector: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


# ---- collector: secrets -------------------------------------------------------------------

USER, PASSWORD, TOKEN = "alice", "s3cret/PW:ä%", "tok-9f8e7d6c5b4a"
ENCODINGS = ("utf-8", "latin-1")  # requests encodes Basic credentials in latin-1 when it can


def leaks(text: str, secret: str) -> list[str]:
    """Every recognisable form of ``secret`` (or of user:secret) found in ``text``, including
    a cut-off base64 prefix long enough to give away characters of the secret."""
    found = []
    for plain in (secret, f"{USER}:{secret}"):
        forms = {plain, quote(plain, safe=""), quote(plain)}
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            for encoding in ENCODINGS:
                encoded = encode(plain.encode(encoding)).decode().rstrip("=")
                forms.add(encoded)
                # base64 of "alice:" gives nothing away; 4 characters past it encode the secret
                forms.add(encoded[: len(base64.b64encode(f"{USER}:".encode()).rstrip(b"=")) + 4])
        found += [f for f in forms if f and f in text]
    return found


Answer = Callable[[dict[str, str], dict[str, str]], tuple[int, dict[str, Any]]]


@contextmanager
def fake_api(answer: Answer) -> Iterator[str]:
    """A server on the Prometheus API's paths whose every answer ``answer(form, headers)``
    decides: for what a real Prometheus cannot be made to do (echo secrets, hang on one
    query). Yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            form = {k: v[0] for k, v in parse_qs(raw).items()}
            status, reply = answer(form, dict(self.headers))
            body = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with suppress(OSError):  # the client went away
                self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    with serve_http(Handler) as url:
        yield url


@pytest.mark.parametrize("how", ["url", "password-file", "bearer-token-file"])
@pytest.mark.parametrize("status", [401, 400, 502])
def test_echoed_credentials_never_reach_the_output(how: str, status: int, tmp_path: Path):
    seen: list[dict[str, str]] = []

    def echo(_form: dict[str, str], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """A hostile proxy: the request's Authorization header, then all of them, echoed."""
        seen.append(headers)
        return status, {"status": "error", "errorType": "bad_data",
                        "error": f"denied {headers.get('Authorization')} ({headers})"}

    with fake_api(echo) as url:
        secret = TOKEN if how == "bearer-token-file" else PASSWORD
        if how == "url":
            conn = ["--prometheus", url.replace("://", f"://{USER}:{quote(PASSWORD, safe='')}@")]
        elif how == "password-file":
            (tmp_path / "pw").write_text(PASSWORD + "\n")
            conn = ["--prometheus", url, "--user", USER, "--password-file", str(tmp_path / "pw")]
        else:
            (tmp_path / "token").write_text(TOKEN + "\n")
            conn = ["--prometheus", url, "--bearer-token-file", str(tmp_path / "token")]
        result = collector_process("export", "--since", "1h", "--out", str(tmp_path / "out"),
                               "--retries", "0", *conn)
    assert seen, "the server was asked"
    sent = seen[0].get("Authorization", "")
    basic = {base64.b64encode(f"{USER}:{PASSWORD}".encode(e)).decode() for e in ENCODINGS}
    assert sent in {f"Bearer {TOKEN}"} | {f"Basic {b}" for b in basic}, "the credentials were sent"
    line = one_line_error(result)
    assert "***" in line, line  # the echo was in the message, masked
    assert not leaks(result.stdout + result.stderr, secret), line
    assert not (tmp_path / "out").exists()


# ---- watch: a session that cannot be exported ---------------------------------------------


def gpu_data(start: float, stop: float, cluster: str = "c1") -> OpenMetrics:
    """One worker's GPU series every 0.25 s over [start, stop]: what Prometheus would hold
    had it scraped the sidecar and the scheduler of Dask cluster ``cluster`` then."""
    data = OpenMetrics()
    times = [start + i / 4 for i in range(int((stop - start) * 4) + 1)]
    scheduler = {contract.DASK_CLUSTER: cluster}
    gpu = {**scheduler, "worker": "w0", "gpu": "0", "uuid": "GPU-0"}
    data.add(contract.INFO.name, {**gpu, "name": "Fake", "simulated": "true"},
             [(t, 1) for t in times])
    data.add(contract.MEMORY_USED.name, gpu, [(t, 2**30) for t in times])
    data.add(contract.MEMORY_TOTAL.name, gpu, [(t, 2**34) for t in times])
    data.add(contract.CURRENT_JOB.name, scheduler, [(t, contract.IDLE) for t in times])
    data.add(contract.CURRENT_DAG.name, scheduler, [(t, contract.IDLE) for t in times])
    return data


@pytest.mark.integration
def test_watch_exports_later_sessions_after_a_failed_one(tmp_path: Path):
    """Session 0 ran while Prometheus held nothing (it was down); session 1 was scraped.
    The watcher exports session 1, tries session 0 MAX_TRIES times, then records why it gave
    up and stops asking."""
    with preload_cluster(threads=1) as lc, Client(lc) as client:
        monitor = Monitor(client)
        for _ in range(2):
            monitor.start()
            client.submit(time.sleep, 1.0, pure=False).result()  # the session's work
            monitor.stop()
        first, second = monitor.sessions()[-2:]
        blocks = create_blocks(gpu_data(second["start"] + 0.5, second["stop"] + 2,
                                        cluster=monitor.scope().cluster or ""),
                               tmp_path / "blocks")
        out = tmp_path / "archive"
        with run_prometheus(tmp_path / "prom", blocks=blocks) as prom:
            runs = [collector_process("watch", "--scheduler", lc.scheduler_address, "--out",
                                  str(out), "--once", "--prometheus", prom.url)
                    for _ in range(watch.MAX_TRIES + 1)]
    done = out / watch.session_folder(second)
    assert (done / "w0.csv").is_file() and (done / "export.json").is_file()
    record = watch.failure_record(out, first)
    assert json.loads(record.read_text())["tries"] == watch.MAX_TRIES
    assert not (out / watch.session_folder(first)).exists()
    for i, result in enumerate(runs[:-1]):
        assert result.returncode == 1, result.stderr
        lines = [line for line in result.stderr.splitlines() if "could not be exported" in line]
        assert len(lines) == 1 and f"monitor session {first['id']} " in lines[0], result.stderr
        assert ("giving up" in lines[0]) == (i == watch.MAX_TRIES - 1), lines[0]
        assert "Traceback" not in result.stderr
    assert runs[-1].returncode == 0 and "could not" not in runs[-1].stderr, runs[-1].stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([done.name, record.name])


@pytest.mark.integration
def test_watch_says_prometheus_is_down_once(tmp_path: Path):
    """Prometheus refuses connections: one line for it, not one per urllib3 retry."""
    with preload_cluster(threads=1) as lc, Client(lc) as client:
        monitor = Monitor(client)
        monitor.start()
        monitor.stop()
        result = collector_process("watch", "--scheduler", lc.scheduler_address, "--out",
                               str(tmp_path / "archive"), "--once", "--prometheus",
                               f"http://127.0.0.1:{free_port()}", "--retries", "2")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("collector: error: cannot reach Prometheus"), lines[0]
    assert "retrying" not in lines[0], lines[0]  # --once does not retry
    assert list((tmp_path / "archive").iterdir()) == []


# ---- collector: signals -------------------------------------------------------------------

EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


def hang_on_gpu_series(form: dict[str, str], _headers: dict[str, str]
                       ) -> tuple[int, dict[str, Any]]:
    """One worker is found; its GPU series take forever: the export sits in its staging."""
    query = form.get("query", "")
    if query.startswith(f"last_over_time({contract.INFO.name}["):
        gpu = {"__name__": contract.INFO.name, "worker": "w0", "gpu": "0", "uuid": "GPU-0"}
        return 200, {"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": gpu, "value": [float(form["time"]), "1"]}]}}
    if contract.MEMORY_USED.name in query:
        time.sleep(30)
    return 200, EMPTY


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT],
                         ids=lambda s: s.name)
def test_a_signal_during_an_export_leaves_nothing(sig: signal.Signals, tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    with fake_api(hang_on_gpu_series) as url:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dask_metrics.collector", "export", "--since", "1h", "--out",
             str(work / "out"), "--prometheus", url], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=clean_env())
        try:
            wait_for(lambda: list(work.iterdir()), timeout=30)  # the staging folder
            proc.send_signal(sig)
            _, stderr = proc.communicate(timeout=15)
        finally:
            proc.kill()
    assert proc.returncode == 128 + sig, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and "no file was written" in lines[0], stderr
    assert list(work.iterdir()) == []


# ---- monitor: finding the scheduler -------------------------------------------------------


@contextmanager
def silent_peer() -> Iterator[str]:
    """Accepts connections and never says a word."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"


@contextmanager
def http_peer() -> Iterator[str]:
    """An HTTP server where a scheduler was expected (the dashboard's port, by mistake)."""
    with fake_api(lambda _form, _headers: (200, EMPTY)) as url:
        yield url.replace("http://", "tcp://")


@pytest.mark.integration
@pytest.mark.parametrize(("peer", "code", "says"), [
    (None, 2, "--scheduler ADDR is required"),
    (silent_peer, 1, "no Dask scheduler answered at"),
    (http_peer, 1, "no Dask scheduler answered at"),
    ("tcp://[::1", 2, "--scheduler tcp://[::1"),
    ("http://scheduler:8786", 2, "unknown address scheme 'http'"),
], ids=["none", "silent", "dashboard", "malformed", "scheme"])
def test_monitor_status_without_a_scheduler_is_one_line(peer, code: int, says: str,
                                                        tmp_path: Path):
    env = clean_env(DASK_CONFIG=str(tmp_path))  # no scheduler-address from config files
    with (peer() if callable(peer) else nullcontext(peer)) as address:
        started = time.monotonic()
        args = ["--scheduler", address] if address else []
        result = subprocess.run(
            [sys.executable, "-m", "dask_metrics.collector", "monitor", "status",
             "--connect-timeout", "2", *args], capture_output=True, text=True, timeout=60,
            env=env, cwd=tmp_path, check=False)
        elapsed = time.monotonic() - started
    assert one_line_error(result, code).find(says) > 0, result.stderr
    assert elapsed < 15  # bounded by --connect-timeout (and Python's start), not minutes
    assert list(tmp_path.iterdir()) == []  # no LocalCluster left its dask-scratch-space


# ---- collector: ranges far larger than the data ---------------------------------------------


def api_requests(prom: object) -> float:
    """Queries Prometheus has answered so far, from its own /metrics."""
    status, text = prom.get("/metrics")  # type: ignore[attr-defined]
    assert status == 200
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("prometheus_http_requests_total{")
               and 'handler="/api/v1/query' in line)


def rows_without_offsets(folder: Path) -> list[list[str]]:
    """The CSV rows less the ``timestamp`` column, which counts from --since."""
    with open(folder / "w0.csv", newline="") as fh:
        return [row[1:] for row in csv.reader(fh)]


@pytest.mark.integration
def test_cost_follows_the_data_not_the_range(tmp_path: Path):
    """Five minutes of data, asked for with --since 1y, 100y and --until 2099: the same rows,
    for a few dozen more queries, not one per hour of the range."""
    now = time.time()
    blocks = create_blocks(gpu_data(now - 900, now - 600), tmp_path / "blocks")
    with run_prometheus(tmp_path / "prom", blocks=blocks) as prom:
        exported = {}
        for name, span in {"data": ["--since", "20m"], "1y": ["--since", "1y"],
                           "100y": ["--since", "100y"],
                           "2099": ["--since", "1y", "--until", "2099-01-01T00:00:00Z"]}.items():
            before = api_requests(prom)
            result = collector_process("export", *span, "--out", str(tmp_path / name),
                                   "--prometheus", prom.url, "--quiet", timeout=120)
            assert result.returncode == 0, result.stderr
            exported[name] = (rows_without_offsets(tmp_path / name), api_requests(prom) - before)
        reported = {}
        for name, since in {"data": "20m", "100y": "100y"}.items():
            before = api_requests(prom)
            result = collector_process("report", "--since", since, "--plots", "0", "--out",
                                       str(tmp_path / f"report-{name}"), "--prometheus",
                                       prom.url, "--quiet", timeout=120)
            assert result.returncode == 0, result.stderr
            reported[name] = api_requests(prom) - before
    rows, queries = exported["data"]
    assert len(rows) > 1000  # 300 s at 4 a second, and the header
    for name in ("1y", "100y", "2099"):
        assert exported[name][0] == rows, name
        assert exported[name][1] <= queries + 80, (name, exported[name][1], queries)
    assert reported["100y"] <= reported["data"] + 80, reported  # a report is an export's cost


@pytest.mark.parametrize(("args", "says"), [
    (["report", "--headroom", "inf"], "--headroom inf: must be from 1 to 100"),
    (["report", "--headroom", "1e308"], "--headroom 1e+308: must be from 1 to 100"),
    (["export", "--max-age", "9999y"], "--max-age: '9999y' is too long (at most 1d)"),
    (["report", "--peak-window", "2d"], "--peak-window: '2d' is too long (at most 1d)"),
    (["export", "--chunk", "1ms"], "--chunk: '1ms' is too short (at least 1m)"),
    (["export", "--since", "2024-05-01T12:00:00+25:00"],
     "the offset +25:00 is not a time zone's"),
], ids=["headroom-inf", "headroom-huge", "max-age", "peak-window", "chunk", "offset"])
def test_options_out_of_bounds_are_usage_errors(args: list[str], says: str, tmp_path: Path):
    """Values that would overflow, take all memory or send a query per millisecond."""
    since = [] if "--since" in args else ["--since", "1h"]
    result = collector_process(*args, *since, "--out", str(tmp_path / "out"),
                               "--prometheus", "http://127.0.0.1:1")
    assert says in one_line_error(result, 2)
    assert list(tmp_path.iterdir()) == []


def test_times_out_of_range_are_usage_errors(tmp_path: Path):
    for when, says in (("0000-01-01T00:00:00Z", "year 0 is out of range"),
                       ("1969-12-31T23:59:59Z", "before 1970"),
                       ("9999-12-31T23:59:59Z", "must be before the end")):
        result = collector_process("export", "--since", when, "--out", str(tmp_path / "out"),
                               "--prometheus", "http://127.0.0.1:1")
        assert says in one_line_error(result, 2), when
    assert list(tmp_path.iterdir()) == []


# ---- collector: steps, plots, unwritable output -------------------------------------------


@pytest.mark.parametrize(("since", "step", "says"), [
    ("5m", "1h", "--step 1h is longer than the range (5m)"),
    ("30d", "1ms", "rows per GPU (at most 5,000,000)"),
])
def test_steps_that_make_no_sense_are_refused(since: str, step: str, says: str,
                                              tmp_path: Path):
    with fake_api(lambda _form, _headers: (200, EMPTY)) as url:
        result = collector_process("export", "--since", since, "--until", "now", "--step", step,
                               "--out", str(tmp_path / "out"), "--prometheus", url)
    assert says in one_line_error(result, 2)
    assert list(tmp_path.iterdir()) == []


NO_MATPLOTLIB = ("import sys; sys.modules['matplotlib'] = None  # as if it were not installed\n"
                 "from dask_metrics.collector.cli.main import main; sys.exit(main(sys.argv[1:]))")


@pytest.mark.integration
def test_plot_without_matplotlib_leaves_no_folder(tmp_path: Path):
    with fake_api(hang_on_gpu_series) as url:
        for source in (["--since", "1h", "--prometheus", url], ["--csv", str(tmp_path)]):
            result = subprocess.run(
                [sys.executable, "-c", NO_MATPLOTLIB, "plot", *source, "--out",
                 str(tmp_path / "plots")], capture_output=True, text=True, timeout=60,
                check=False)
            assert "plots need matplotlib" in one_line_error(result), result.stderr
    assert list(tmp_path.iterdir()) == []


@contextmanager
def small_filesystem(path: Path, options: str, size: str = "64k") -> Iterator[Path]:
    """A tmpfs of ``size`` at ``path`` (``ro`` in ``options``: read-only), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},{options}", "tmpfs", str(path)],
                   check=True, capture_output=True, timeout=30)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True, capture_output=True, timeout=30)


@pytest.mark.integration
@pytest.mark.parametrize(("options", "says"), [("rw", "No space left on device"),
                                               ("ro", "Read-only file system")],
                         ids=["disk-full", "read-only"])
def test_an_unwritable_output_is_one_line_and_leaves_nothing(options: str, says: str,
                                                             tmp_path: Path):
    now = time.time()
    blocks = create_blocks(gpu_data(now - 900, now - 600), tmp_path / "blocks")
    with (run_prometheus(tmp_path / "prom", blocks=blocks) as prom,
          small_filesystem(tmp_path / "small", options) as small):
        # the data's own range: no stretch without samples to warn about beside the error
        result = collector_process("export", "--since", "16m", "--until", "9m", "--out",
                                   str(small / "out"), "--prometheus", prom.url, "--quiet")
        left = list(small.iterdir())
    line = one_line_error(result)
    assert "cannot write the output" in line and says in line, line
    assert left == []


@pytest.mark.integration
def test_an_export_into_a_mount_point_itself(tmp_path: Path):
    """A volume mounted where the export goes (Docker, a Kubernetes volume): no rename can
    leave it, so the export is staged inside it; a second export replaces the first."""
    now = time.time()
    blocks = create_blocks(gpu_data(now - 900, now - 600), tmp_path / "blocks")
    with (run_prometheus(tmp_path / "prom", blocks=blocks) as prom,
          small_filesystem(tmp_path / "volume", "rw", "16m") as volume):
        starts = []
        for since in ("20m", "16m"):
            result = collector_process("export", "--since", since, "--out", str(volume),
                                       "--prometheus", prom.url, "--quiet")
            assert result.returncode == 0, result.stderr
            starts.append(json.loads((volume / "export.json").read_text())["since"])
        names = sorted(p.name for p in volume.iterdir())
    assert starts[0] != starts[1]  # the second export is the one in place
    assert "w0.csv" in names and not [n for n in names if n.startswith(".")], names


# ---- scheduler preload: bad settings --------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize(("args", "env", "says"), [
    (["--metrics-port", "BUSY"], {},
     "--metrics-port/--metrics-address: cannot listen (Address already in use)"),
    (["--metrics-port", "0", "--metrics-address", "no-such-host.invalid"], {},
     "--metrics-port/--metrics-address: cannot listen ("),
    ([], {"DASK_DASK_METRICS__SCHEDULER__JOB_MODE": "bogus"},
     "dask-metrics.scheduler.job-mode: 'bogus' is not one of client, span, manual"),
    ([], {"DASK_DASK_METRICS__SCHEDULER__FINISHED_DAG_TTL": "soon"},
     "dask-metrics.scheduler.finished-dag-ttl: 'soon' is not a duration"),
    ([], {"DASK_DASK_METRICS__SCHEDULER__MAX_JOBS": "many"},
     "dask-metrics.scheduler.max-jobs: 'many' is not a whole number"),
    (["--prometheus", "local", "--local-prometheus-port", "BUSY"], {},
     "the local Prometheus cannot listen on 127.0.0.1:"),
    (["--prometheus", "local"], {"PATH": "/nonexistent"},
     "Prometheus is not installed: 'sudo apt-get install prometheus'"),
    ([], {"DASK_DASK_METRICS__SCHEDULER__PROMETHEUS": "remote"},
     "dask-metrics.scheduler.prometheus: 'remote' is not local"),
], ids=["port-in-use", "bad-address", "job-mode", "ttl", "max-jobs", "local-port-in-use",
        "no-prometheus-binary", "prometheus-not-local"])
def test_a_bad_preload_setting_stops_the_scheduler_with_one_line(args: list[str],
                                                                 env: dict[str, str], says: str):
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen(1)
        args = [str(busy.getsockname()[1]) if a == "BUSY" else a for a in args]
        result = subprocess.run(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
             "--port", "0", "--dashboard-address", "127.0.0.1:0", "--preload",
             "dask_metrics.scheduler", *args],
            capture_output=True, text=True, timeout=60, check=False,
            env=clean_env(**env))
    log = result.stdout + result.stderr
    lines = [line for line in log.splitlines() if "dask-metrics:" in line]
    assert len(lines) == 1 and says in lines[0], log
    assert "stopping the scheduler" in lines[0]
    assert "Closing scheduler. Reason: dask-metrics-bad-setting" in log
    assert "Traceback" not in log
    assert result.returncode == 2, log  # a supervisor or batch system sees the failure


@pytest.mark.integration
def test_the_dask_command_exits_non_zero_after_a_bad_setting_too():
    """``python -m dask scheduler`` (what ``dask scheduler`` runs) exits 2 as well."""
    result = subprocess.run(
        [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
         "--dashboard-address", "127.0.0.1:0", "--preload", "dask_metrics.scheduler"],
        capture_output=True, text=True, timeout=60, check=False,
        env=clean_env(DASK_DASK_METRICS__SCHEDULER__JOB_MODE="bogus"))
    log = result.stdout + result.stderr
    assert result.returncode == 2, log
    assert "job-mode: 'bogus' is not one of" in log and "Traceback" not in log
