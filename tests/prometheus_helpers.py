"""A real Prometheus for tests (Debian's ``prometheus`` package), with deterministic data
backfilled by ``promtool tsdb create-blocks-from openmetrics``.

Backfilling rules, as promtool and the TSDB apply them: the input is OpenMetrics text ending
in ``# EOF``, each family's lines together, each series' samples in time order (an older
sample after a newer one is rejected as out of order), timestamps in seconds. promtool writes
blocks of at most 2 h; Prometheus (2.39+) accepts blocks that overlap each other or the head,
and loads the blocks it finds in --storage.tsdb.path when it starts, so the blocks are copied
in first and Prometheus is started after. Data need not be older than the head's range; time
retention counts from the newest block, so recent data stays.
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import json
import math
import shutil
import signal
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.helpers import free_port, wait_for

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
requires_prometheus = pytest.mark.skipif(
    not (PROMETHEUS and PROMTOOL),
    reason="needs prometheus and promtool (Debian package 'prometheus'; scripts/setup.sh)")


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash for Prometheus' --web.config.file, from the system's libcrypt
    (libxcrypt, on every Debian/Ubuntu), so the tests need neither apache2-utils nor the
    ``bcrypt`` package. Cost 4, the minimum: the tests check the rule, not the strength."""
    name = ctypes.util.find_library("crypt")
    if not name:
        pytest.skip("no libcrypt to make a bcrypt hash for Prometheus' basic auth")
    lib = ctypes.CDLL(name)
    lib.crypt_gensalt.restype = ctypes.c_char_p
    lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int]
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    salt = lib.crypt_gensalt(b"$2b$", 4, None, 0)
    hashed = lib.crypt(password.encode(), salt) if salt else None
    if not hashed or not hashed.startswith(b"$2b$"):
        pytest.skip("this libcrypt cannot make bcrypt hashes")
    return hashed.decode()


@dataclass(frozen=True)
class TlsFiles:
    """A private CA, a server certificate for 127.0.0.1 and a client certificate (PEM)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_tls_files(folder: Path) -> TlsFiles:
    """Certificates made with the openssl command line (EC keys: fast), valid two days."""
    openssl = shutil.which("openssl")
    if not openssl:
        pytest.skip("needs the openssl command to make test certificates")
    folder.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run([str(openssl), *args], cwd=folder, check=True, capture_output=True,
                       timeout=60)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=dask-metrics test CA")
    for name, extension in (("server", "subjectAltName=IP:127.0.0.1"),
                            ("client", "extendedKeyUsage=clientAuth")):
        (folder / f"{name}.ext").write_text(extension + "\n")
        run("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext")
    return TlsFiles(folder / "ca.crt", folder / "server.crt", folder / "server.key",
                    folder / "client.crt", folder / "client.key")


# ---- OpenMetrics fixtures ------------------------------------------------------------------


Labels = Mapping[str, str]


def _value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _labels(labels: Labels) -> str:
    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels.items())) + "}"


@dataclass
class OpenMetrics:
    """Series with explicit timestamps, written as OpenMetrics text for promtool."""

    families: dict[str, tuple[str, list[tuple[Labels, list[tuple[float, float]]]]]] = field(
        default_factory=dict)

    def add(self, name: str, labels: Labels, samples: Iterable[tuple[float, float]],
            kind: str = "gauge") -> None:
        """Samples are (unix seconds, value); a counter's ``name`` ends in ``_total``."""
        family = name.removesuffix("_total") if kind == "counter" else name
        points = sorted(samples)
        if points:
            self.families.setdefault(family, (kind, []))[1].append((dict(labels), points))

    def text(self) -> str:
        lines = []
        for family, (kind, series) in self.families.items():
            lines.append(f"# TYPE {family} {kind}")
            sample = family + "_total" if kind == "counter" else family
            for labels, points in series:
                lines += [f"{sample}{_labels(labels)} {_value(v)} {t:.3f}" for t, v in points]
        return "\n".join([*lines, "# EOF", ""])


def create_blocks(data: OpenMetrics, folder: Path) -> Path:
    """TSDB blocks of ``data`` in ``folder`` (made by promtool), ready to copy into a data dir."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "input.om"
    source.write_text(data.text(), encoding="utf-8")
    return blocks_of_file(source, folder)


def blocks_of_file(source: Path, folder: Path) -> Path:
    """TSDB blocks of the OpenMetrics file ``source`` (removed then) in ``folder``."""
    blocks = folder / "blocks"
    result = subprocess.run([str(PROMTOOL), "tsdb", "create-blocks-from", "openmetrics",
                             str(source), str(blocks)], capture_output=True, text=True,
                            timeout=120, check=False)
    if result.returncode != 0:
        raise AssertionError(f"promtool failed: {result.stderr[-2000:]}")
    source.unlink()
    return blocks


# ---- a Prometheus process -------------------------------------------------------------------


@dataclass
class PrometheusServer:
    port: int
    prefix: str
    data_dir: Path
    log: Path
    process: subprocess.Popen[bytes]
    auth: tuple[str, str] | None = None
    tls: TlsFiles | None = None
    argv: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        """Base URL of the API (with the route prefix), without credentials."""
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}{self.prefix}"

    def url_with(self, user: str, password: str) -> str:
        return self.url.replace("://", f"://{user}:{password}@", 1)

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        request = urllib.request.Request(self.url + path)
        if self.auth:
            token = base64.b64encode(":".join(self.auth).encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        context = None
        if self.tls:
            context = ssl.create_default_context(cafile=str(self.tls.ca))
            context.load_cert_chain(self.tls.client_cert, self.tls.client_key)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def restart(self, ready_timeout: float = 60.0) -> None:
        """Stop and start again on the same port and data: a restarted Prometheus."""
        self.stop()
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=self.log.parent)
        _wait_ready(self, ready_timeout)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


RULES_FILE = (Path(__file__).resolve().parent.parent / "deploy" / "helm" / "dask-metrics"
              / "files" / "prometheus-rules.yaml")


def every_second_rules(folder: Path) -> Path:
    """The project's rules file as is, each group evaluated every second (as the test stacks
    scrape), written into ``folder``."""
    rules = yaml.safe_load(RULES_FILE.read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
    path = folder / "rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    return path


@contextmanager
def run_prometheus(workdir: Path, *, blocks: Path | None = None,
                   scrape_configs: Sequence[Mapping[str, object]] = (),
                   rule_files: Sequence[Path] = (),
                   users: Mapping[str, str] | None = None, prefix: str = "",
                   tls: TlsFiles | None = None, extra_args: Sequence[str] = (),
                   ready_timeout: float = 60.0, external_labels: Mapping[str, str] | None = None
                   ) -> Iterator[PrometheusServer]:
    """A Prometheus on a free loopback port, ready when this yields, stopped after.

    ``blocks``: TSDB blocks (from create_blocks) copied into its fresh data dir;
    ``users``: {user: password} for basic auth through --web.config.file (bcrypt);
    ``prefix``: a route prefix such as "/prom", as behind a reverse proxy;
    ``tls``: serve HTTPS and require a client certificate signed by the same CA;
    ``external_labels``: the global ones, which federation and remote read add to series.
    """
    if not (PROMETHEUS and PROMTOOL):
        pytest.skip("needs prometheus and promtool (Debian package 'prometheus')")
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = workdir / "data"
    if blocks is not None:
        shutil.copytree(blocks, data_dir)
    data_dir.mkdir(exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s",
                                                 "evaluation_interval": "1s",
                                                 "external_labels": dict(external_labels or {})},
                                      "scrape_configs": list(scrape_configs),
                                      "rule_files": [str(f) for f in rule_files]}))
    port = free_port()
    args = [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={data_dir}",
            f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn", *extra_args]
    if prefix:
        args += [f"--web.route-prefix={prefix}",
                 f"--web.external-url=http://127.0.0.1:{port}{prefix}"]
    web: dict[str, object] = {}
    if users:
        web["basic_auth_users"] = {u: bcrypt_hash(p) for u, p in users.items()}
    if tls:
        web["tls_server_config"] = {
            "cert_file": str(tls.server_cert), "key_file": str(tls.server_key),
            "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": str(tls.ca)}
    if web:
        (workdir / "web.yml").write_text(yaml.safe_dump(web))
        args.append(f"--web.config.file={workdir / 'web.yml'}")
    log = workdir / "prometheus.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, cwd=workdir)
    auth = next(iter(users.items())) if users else None
    server = PrometheusServer(port, prefix, data_dir, log, process, auth, tls, tuple(args))
    try:
        _wait_ready(server, ready_timeout)
        yield server
    finally:
        server.stop()


@contextmanager
def backfilled_prometheus(data: OpenMetrics, factory: pytest.TempPathFactory, name: str
                          ) -> Iterator[PrometheusServer]:
    """A Prometheus serving ``data`` from blocks promtool made: a module fixture's body."""
    blocks = create_blocks(data, factory.mktemp(f"{name}-blocks"))
    with run_prometheus(factory.mktemp(f"{name}-prom"), blocks=blocks) as server:
        yield server


def _wait_ready(server: PrometheusServer, timeout: float) -> None:
    def ready() -> bool:
        if server.process.poll() is not None:
            raise AssertionError(f"prometheus exited with {server.process.returncode}:\n"
                                 f"{server.log_tail()}")
        return server.get("/-/ready", timeout=2)[0] == 200

    try:
        wait_for(ready, timeout=timeout, what="prometheus' /-/ready")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{server.log_tail()}") from None


# ---- VictoriaMetrics and a Thanos/Mimir-style front ------------------------------------------


VICTORIA_METRICS = shutil.which("victoria-metrics")
requires_victoria_metrics = pytest.mark.skipif(
    not VICTORIA_METRICS,
    reason="needs victoria-metrics (Debian package 'victoria-metrics')")


def prometheus_text(data: OpenMetrics) -> str:
    """``data`` as Prometheus text with millisecond timestamps, for VictoriaMetrics'
    /api/v1/import/prometheus. A NaN sample is sent as NaN: VictoriaMetrics drops it."""
    lines = []
    for family, (kind, series) in data.families.items():
        sample = family + "_total" if kind == "counter" else family
        for labels, points in series:
            lines += [f"{sample}{_labels(labels)} {_value(v)} {round(t * 1000)}"
                      for t, v in points]
    return "\n".join([*lines, ""])


@dataclass
class VictoriaMetricsServer(PrometheusServer):
    """A single-node VictoriaMetrics: the API under ``prefix`` (-http.pathPrefix), one basic
    auth user (-httpAuth.*) if given."""


@contextmanager
def run_victoria_metrics(workdir: Path, *, data: OpenMetrics | None = None,
                         users: Mapping[str, str] | None = None, prefix: str = "",
                         extra_args: Sequence[str] = (), ready_timeout: float = 60.0
                         ) -> Iterator[VictoriaMetricsServer]:
    """VictoriaMetrics on a free loopback port, ``data`` imported through its import API and
    visible to queries when this yields (polled: its in-memory buffers are flushed first)."""
    if not VICTORIA_METRICS:
        pytest.skip("needs victoria-metrics (Debian package 'victoria-metrics')")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    args = [str(VICTORIA_METRICS), f"-storageDataPath={workdir / 'data'}",
            f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=100y", "-loggerLevel=ERROR",
            *extra_args]
    if prefix:
        args.append(f"-http.pathPrefix={prefix}")
    if users:
        (user, password), = users.items()
        args += [f"-httpAuth.username={user}", f"-httpAuth.password={password}"]
    log = workdir / "victoria-metrics.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, cwd=workdir)
    auth = next(iter(users.items())) if users else None
    server = VictoriaMetricsServer(port, prefix, workdir / "data", log, process, auth)
    try:
        def healthy() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"victoria-metrics exited: {server.log_tail()}")
            return server.get("/health", timeout=2)[0] == 200

        wait_for(healthy, timeout=ready_timeout, what="victoria-metrics' /health")
        if data is not None:
            import_data(server, data)
        yield server
    finally:
        server.stop()


def _post(server: PrometheusServer, path: str, body: bytes) -> int:
    request = urllib.request.Request(server.url + path, data=body, method="POST")
    if server.auth:
        token = base64.b64encode(":".join(server.auth).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=60) as resp:
        return resp.status


def import_data(server: VictoriaMetricsServer, data: OpenMetrics) -> None:
    """Import ``data`` and wait until every one of its series can be queried."""
    _post(server, "/api/v1/import/prometheus", prometheus_text(data).encode())
    server.get("/internal/force_flush")
    expected = len({(family, tuple(sorted(labels.items())))
                    for family, (_, series) in data.families.items() for labels, _ in series})
    # From the data's first sample, not from 0: VictoriaMetrics answers start=0 from the
    # current UTC day's index only, so data from before midnight would never be counted.
    first = min(points[0][0] for _, series in data.families.values() for _, points in series)
    query = urllib.parse.urlencode({"match[]": '{__name__=~".+"}', "start": f"{first:.3f}"})

    def count() -> int:
        import json

        status, body = server.get(f"/api/v1/series?{query}", timeout=30)
        return len(json.loads(body)["data"]) if status == 200 else -1

    wait_for(count, lambda n: n >= expected, timeout=60, what="the imported series")


class TenantProxy:
    """A Thanos/Mimir-style front: the API under ``prefix`` (e.g. /prometheus), answering
    401 without an ``X-Scope-OrgID: <tenant>`` header, forwarding everything else (basic
    auth included) to ``backend``; ``requests`` counts what it forwarded."""

    def __init__(self, backend: str, prefix: str = "/prometheus", tenant: str = "tenant-1"
                 ) -> None:
        import http.server
        import threading

        proxy = self
        self.backend, self.prefix, self.tenant, self.requests = backend, prefix, tenant, 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                if self.headers.get("X-Scope-OrgID") != proxy.tenant:
                    self._reply(401, b"no org id\n", "text/plain")
                    return
                if not self.path.startswith(proxy.prefix + "/"):
                    self._reply(404, b"404 page not found\n", "text/plain")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                request = urllib.request.Request(
                    proxy.backend + self.path[len(proxy.prefix):], data=body,
                    method=self.command)
                for name in ("Authorization", "Content-Type", "Accept-Encoding"):
                    if self.headers.get(name):
                        request.add_header(name, self.headers[name])
                proxy.requests += 1
                try:
                    with urllib.request.urlopen(request, timeout=120) as resp:
                        self._reply(resp.status, resp.read(), resp.headers.get("Content-Type"),
                                    resp.headers.get("Content-Encoding"))
                except urllib.error.HTTPError as err:
                    self._reply(err.code, err.read(), err.headers.get("Content-Type"),
                                err.headers.get("Content-Encoding"))

            def _reply(self, status: int, body: bytes, kind: str | None,
                       encoding: str | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind or "application/octet-stream")
                if encoding:
                    self.send_header("Content-Encoding", encoding)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{self.prefix}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def scraping_like(stack: ExitStack, config: Path, folder: Path, intervals: Iterable[int]
                  ) -> dict[int, PrometheusServer]:
    """One Prometheus per scrape interval (seconds) with the scrape jobs of ``config`` (a
    local stack's prometheus.yml), each scraping every job once before this returns."""
    jobs = yaml.safe_load(config.read_text())["scrape_configs"]
    servers = {every: stack.enter_context(run_prometheus(
        folder / f"prom-{every}", scrape_configs=[
            {**job, "scrape_interval": f"{every}s", "scrape_timeout": f"{min(every, 5)}s"}
            for job in jobs])) for every in intervals}
    for every, server in servers.items():
        for job in jobs:
            wait_for(lambda s=server, j=job["job_name"]: newest_scrape(s, j),
                     timeout=2 * every + 30, interval=0.5,
                     what=f"the {every} s server's first scrape of {job['job_name']}")
    return servers


def newest_scrape(server: PrometheusServer, job: str) -> float:
    """The time by which ``server`` has scraped every target of ``job`` it knows: the
    oldest of their newest scrapes (0 before the first)."""
    status, body = server.get("/api/v1/query?query=" + urllib.parse.quote(
        f'min(timestamp(up{{job="{job}"}}))'))
    found = json.loads(body)["data"]["result"] if status == 200 else []
    return float(found[0]["value"][1]) if found else 0.0
