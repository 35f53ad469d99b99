"""Faults of the sidecar exporter, each against a real sidecar process.

| part | fault | test (test_...) |
|---|---|---|
| HTTPS | silent client, half a hello or request | silent_and_half_clients_do_not_stall_https |
| HTTP | a request that never ends holds its thread | a_slow_client_is_cut_off_after_the_timeout |
| HTTP | more clients than --max-connections | connections_over_the_cap_get_a_fast_503 |
| listen | a burst of connects meets a backlog of 5 | the_listen_backlog_takes_a_burst |
| signals | SIGTERM under 30 scrapers and a silent client | sigterm_under_load_exits_promptly |
| options | --simulate 100000 | absurd_numbers_are_one_line_errors |
| options | --interval inf, --peak-window 1e12, port http | bounds_of_numeric_options (+ above) |
| GPUs | every simulated GPU has the same UUID | simulated_uuids_are_distinct_and_stable |
| GPUs | ... in every sidecar | simulated_uuids_differ_per_worker_and_index |
| load | the whole page encoded again for every scrape | page_is_reused_per_sampling_round |
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dask_metrics.configfile import ConfigError
from dask_metrics.exporter.config import MAX_SIMULATED_GPUS, resolve
from dask_metrics.exporter.simulated import SimulatedSource, simulated_uuid
from tests.helpers import free_port, http_get, scrape, sidecar, values, wait_for

SIM = ("--simulate", "2", "--worker", "w0", "--interval", "0.2")


def make_cert(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=60)
    return cert, key


def client_hello() -> bytes:
    """The first flight of a real TLS client: a ClientHello record."""
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """True once the server closes ``sock`` (EOF or reset) within ``within`` seconds."""
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


@pytest.mark.integration
def test_silent_and_half_clients_do_not_stall_https(tmp_path):
    cert, key = make_cert(tmp_path)
    port = free_port()
    with sidecar(*SIM, "--tls-cert-file", str(cert), "--tls-key-file", str(key), port=port,
                 ca_file=str(cert)) as base:
        silent = connect(port)
        half_hello = connect(port)
        hello = client_hello()
        half_hello.sendall(hello[: len(hello) // 2])
        half_request = connect(port)
        half_request.sendall(b"GET /metrics HTTP/1.1\r\nHost: local")
        try:
            for path in ("/healthz", "/metrics"):
                status, text = http_get(base + path, timeout=5, ca_file=str(cert))
                assert status == 200, (path, text)
            assert "dask_gpu_up" in text
            # Each of them is cut off by the server, after the default 10 s.
            for sock in (silent, half_hello, half_request):
                assert closed_by_server(sock, within=30)
            assert http_get(base + "/healthz", timeout=5, ca_file=str(cert))[0] == 200
        finally:
            for sock in (silent, half_hello, half_request):
                sock.close()


@pytest.mark.integration
def test_a_slow_client_is_cut_off_after_the_timeout():
    port = free_port()
    with sidecar(*SIM, "--connection-timeout", "1", port=port) as base:
        with connect(port) as slow:
            slow.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n")  # never ends its headers
            assert http_get(base + "/healthz", timeout=5)[0] == 200
            assert closed_by_server(slow, within=10)
        with connect(port) as silent:
            assert closed_by_server(silent, within=10)
        # A byte every 0.2 s never lets one read time out: the whole request has 1 s.
        with connect(port) as trickle:
            stop = threading.Event()

            def drip() -> None:
                for byte in b"GET /metrics HTTP/1.0\r\n" + b"X-Slow: yes\r\n" * 1000:
                    if stop.wait(0.2):
                        return
                    try:
                        trickle.send(bytes([byte]))
                    except OSError:
                        return

            dripping = threading.Thread(target=drip, daemon=True)
            dripping.start()
            try:
                assert closed_by_server(trickle, within=10)
            finally:
                stop.set()
                dripping.join(5)
        assert http_get(base + "/metrics", timeout=5)[0] == 200


@pytest.mark.integration
def test_connections_over_the_cap_get_a_fast_503():
    port = free_port()
    with sidecar(*SIM, "--max-connections", "3", "--connection-timeout", "30",
                 port=port) as base:
        held = [connect(port) for _ in range(3)]
        try:
            wait_for(lambda: http_get(base + "/healthz", timeout=5),
                     lambda r: r[0] == 503, timeout=15, what="a 503 once 3 slots are held")
            status, text = http_get(base + "/metrics", timeout=5)
            assert status == 503 and "--max-connections" in text
        finally:
            for sock in held:
                sock.close()
        wait_for(lambda: http_get(base + "/metrics", timeout=5), lambda r: r[0] == 200,
                 timeout=15, what="/metrics once the slots are free")


@pytest.mark.integration
def test_the_listen_backlog_takes_a_burst():
    """A stopped sidecar accepts nothing: the kernel queues up to the backlog's worth of
    connections; with a backlog of 5 the rest wait for SYN retries (1 s, 3 s, 7 s...)."""
    port = free_port()
    burst = 60
    with sidecar(*SIM, port=port):
        proc_pid = _listener_pid(port)
        os.kill(proc_pid, signal.SIGSTOP)
        socks = []
        try:
            for _ in range(burst):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", port))
                socks.append(s)
            deadline = time.monotonic() + 0.5
            pending = list(socks)
            while pending and time.monotonic() < deadline:
                _, ready, _ = select.select([], pending, [], deadline - time.monotonic())
                pending = [s for s in pending if s not in ready]
            connected = sum(1 for s in socks if s not in pending
                            and s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0)
            assert connected == burst, f"{connected} of {burst} connects completed"
        finally:
            os.kill(proc_pid, signal.SIGCONT)
            for s in socks:
                s.close()


def _listener_pid(port: int) -> int:
    out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True,
                         check=True, timeout=10).stdout
    return int(out.split("pid=", 1)[1].split(",", 1)[0])


@pytest.mark.integration
def test_sighup_shuts_down_cleanly():
    """A closed terminal (SIGHUP) killed the sidecar silently with 129."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dask_metrics.exporter", "--listen",
                             f"127.0.0.1:{port}", "--simulate", "1", "--worker", "w0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: http_get(f"http://127.0.0.1:{port}/healthz", timeout=5)[0] == 200,
                 what="the sidecar's /healthz")
        proc.send_signal(signal.SIGHUP)
        output = proc.communicate(timeout=10)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, output
    assert "shutting down" in output and "Traceback" not in output, output


@pytest.mark.integration
def test_sigterm_under_load_exits_promptly(tmp_path):
    """30 HTTPS scrapers and one client that connected and says nothing (a TCP probe): the
    accept loop used to sit in that client's handshake, and shutdown waited on it."""
    cert, key = make_cert(tmp_path)
    port = free_port()
    cmd = [sys.executable, "-m", "dask_metrics.exporter", "--listen", f"127.0.0.1:{port}",
           "--simulate", "8", "--worker", "w0", "--interval", "0.2",
           "--tls-cert-file", str(cert), "--tls-key-file", str(key)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"https://localhost:{port}"
    stop = threading.Event()
    answered = [0]

    def get(path: str) -> int:
        return http_get(base + path, timeout=5, ca_file=str(cert))[0]

    def scraper() -> None:
        while not stop.is_set():
            try:
                if get("/metrics") == 200:
                    answered[0] += 1
            except OSError:
                pass

    threads = [threading.Thread(target=scraper, daemon=True) for _ in range(30)]
    silent = None
    try:
        wait_for(lambda: get("/healthz") == 200, what="the sidecar's /healthz")
        for t in threads:
            t.start()
        wait_for(lambda: answered[0] >= 50, timeout=60, what="50 scrapes under load")
        silent = connect(port)
        seen = answered[0]
        wait_for(lambda: answered[0] >= seen + 50, timeout=30,
                 what="50 more scrapes with a silent client connected")
        # The kernel hands a process's signal to any of its threads: under load, seldom the
        # main one. Send it to another thread, as it lands most of the time.
        signal_a_thread(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pytest.fail("the sidecar was still running 5 s after SIGTERM under load")
        assert code == 0
    finally:
        stop.set()
        if silent is not None:
            silent.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        output = proc.stdout.read()
        proc.stdout.close()
        for t in threads:
            t.join(10)
    assert "Traceback" not in output, output


def test_page_is_reused_per_sampling_round(monkeypatch):
    """Under load the unfiltered page is encoded once per snapshot, and never served older
    than PAGE_MAX_AGE: a new snapshot or the age limit makes a new one."""
    from prometheus_client import CollectorRegistry, Counter

    from dask_metrics.exporter import http as sidecar_http

    class Gpu:
        collected = 0

        def collect(self):
            Gpu.collected += 1
            return []

    rest = CollectorRegistry()
    scrapes = Counter("scrapes_seen", "changes between two scrapes", registry=rest)
    snapshot = [object()]
    clock = [1000.0]
    monkeypatch.setattr(sidecar_http.time, "monotonic", lambda: clock[0])
    app = sidecar_http.make_app(Gpu(), rest, lambda: (True, "ok"), version=lambda: snapshot[0])

    def get() -> bytes:
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": ""}
        return b"".join(app(environ, lambda status, headers: None))

    first = get()
    scrapes.inc()
    assert [get() for _ in range(50)] == [first] * 50 and Gpu.collected == 1
    snapshot[0] = object()  # the sampler's next round
    assert get() != first and Gpu.collected == 2
    scrapes.inc()
    clock[0] += sidecar_http.PAGE_MAX_AGE  # the sampler stalled: the page still ages out
    assert b"scrapes_seen_total 2.0" in get() and Gpu.collected == 3


def signal_a_thread(pid: int, sig: int) -> None:
    """``sig`` to one thread of ``pid`` other than its main thread (tgkill). Request threads
    come and go under load, so one that ended between listing and signalling is skipped."""
    libc = ctypes.CDLL(None, use_errno=True)
    for _ in range(50):
        tids = sorted((int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid),
                      reverse=True)
        assert tids, "the sidecar has no thread besides its main one"
        for tid in tids:
            if libc.tgkill(pid, tid, int(sig)) == 0:
                return
            if ctypes.get_errno() != errno.ESRCH:
                raise OSError(ctypes.get_errno(), "tgkill failed")
    raise AssertionError("every thread of the sidecar ended before it could be signalled")


# -- options ---------------------------------------------------------------------------------


def run_exporter(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dask_metrics.exporter", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.integration
@pytest.mark.parametrize(("args", "needle"), [
    (("--simulate", "100000"), f"--simulate='100000' (command line): must be "
                               f"0-{MAX_SIMULATED_GPUS}"),
    (("--interval", "inf"), "--interval='inf'"),
    (("--peak-window", "1e12"), "--peak-window='1e12'"),
    (("--listen", "127.0.0.1:http"), "port must be a number 0-65535"),
    (("--max-connections", "0"), "--max-connections='0'"),
    (("--connection-timeout", "nan"), "--connection-timeout='nan'"),
])
def test_absurd_numbers_are_one_line_errors(args, needle):
    result = run_exporter("--listen", f"127.0.0.1:{free_port()}", *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("cli", "needle"), [
    ({"simulate": "65"}, "--simulate"),
    ({"interval": "86401"}, "--interval"),
    ({"peak_window": "inf"}, "--peak-window"),
    ({"max_connections": "100001"}, "--max-connections"),
    ({"connection_timeout": "0"}, "--connection-timeout"),
    ({"connection_timeout": "3601"}, "--connection-timeout"),
    ({"simulate_memory": "2TiB"}, "--simulate-memory"),
])
def test_bounds_of_numeric_options(cli, needle):
    with pytest.raises(ConfigError) as err:
        resolve(cli, {})
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert resolve({"simulate": str(MAX_SIMULATED_GPUS)}, {}).simulate == MAX_SIMULATED_GPUS


# -- simulated UUIDs -------------------------------------------------------------------------


def test_simulated_uuids_are_distinct_and_stable():
    a = [simulated_uuid(i, host="h", worker="w1") for i in range(8)]
    b = [simulated_uuid(i, host="h", worker="w2") for i in range(8)]
    c = [simulated_uuid(i, host="h2", worker="w1") for i in range(8)]
    assert len(set(a + b + c)) == 24
    assert a == [simulated_uuid(i, host="h", worker="w1") for i in range(8)]
    assert all(u.startswith("GPU-5151a7ed-") and len(u) == 40 for u in a)
    source = SimulatedSource(3, instance=lambda: ("h", "w1"))
    uuids = [c.uuid for c in source.candidates()]
    assert uuids == a[:3]
    assert source.describe(uuids[2]).pci_bus_id.endswith(":03:00.0")


@pytest.mark.integration
def test_simulated_uuids_differ_per_worker_and_index():
    got = {}
    for worker in ("w1", "w2"):
        with sidecar("--simulate", "2", "--worker", worker, "--interval", "0.2") as base:
            s = scrape(base + "/metrics")
            again = scrape(base + "/metrics")
        info = values(s, "dask_gpu_info", worker=worker)
        assert all(dict(k)["simulated"] == "true" for k in info)
        got[worker] = sorted(dict(k)["uuid"] for k in info)
        assert got[worker] == sorted(dict(k)["uuid"] for k in values(again, "dask_gpu_info"))
        assert got[worker] == sorted(simulated_uuid(i, host=socket.gethostname(), worker=worker)
                                     for i in range(2))
    assert len(set(got["w1"] + got["w2"])) == 4, got
