"""Failures of the collector's HTTP side that a real Prometheus cannot be made to produce on
demand: nothing listening, a server that answers 5xx/429 then recovers, one that hangs, one
that answers HTML, a Thanos-style partial response with warnings, a query engine timeout.

These use a tiny local http.server stub ONLY because of that; everything a real Prometheus
can show (wrong credentials, bad_data, 404 on a wrong prefix, too many samples) is tested
against a real one in test_collector_prometheus.py. Each CLI failure must be one line
``collector: error: ...``, the right exit code, and no file left behind.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from dask_metrics.collector.store.client import (
    ConnectionSettings,
    PrometheusClient,
    PrometheusError,
)
from tests.helpers import collector, free_port, serve_http

EMPTY_VECTOR = {"status": "success", "data": {"resultType": "vector", "result": []}}


@dataclass
class Reply:
    status: int = 200
    body: str | dict = field(default_factory=lambda: EMPTY_VECTOR)
    content_type: str = "application/json"
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Stub:
    """Answers requests with ``replies`` in turn (the last one forever) and records them."""

    replies: list[Reply]
    requests: list[dict[str, object]] = field(default_factory=list)
    url: str = ""

    def next_reply(self) -> Reply:
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


@contextmanager
def stub_server(*replies: Reply) -> Iterator[Stub]:
    stub = Stub(list(replies))

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = urllib.parse.parse_qs(self.rfile.read(length).decode()) if length else {}
            stub.requests.append({"method": self.command, "path": self.path,
                                  "headers": dict(self.headers), "form": form})
            reply = stub.next_reply()
            if reply.delay:
                time.sleep(reply.delay)
            body = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(body.encode())))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            with suppress(BrokenPipeError, ConnectionResetError):  # the client gave up waiting
                self.wfile.write(body.encode())

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    with serve_http(Handler) as stub.url:
        yield stub


def fails_in_one_line(args: list[str], code: int, tmp_path: Path) -> str:
    """Run an export into tmp_path/out; check the one-line failure and that nothing is left."""
    out = tmp_path / "out"
    got, stdout, stderr = collector("export", "--since", "1h", "--out", str(out), *args)
    assert got == code, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("collector: error: "), stderr
    assert stdout == ""
    assert list(tmp_path.iterdir()) == []
    return lines[0]


def test_prometheus_down(tmp_path: Path) -> None:
    url = f"http://bob:hunter2@127.0.0.1:{free_port()}"  # nothing listens there
    line = fails_in_one_line(["--prometheus", url, "--retries", "1"], 1, tmp_path)
    assert "cannot reach Prometheus at http://127.0.0.1:" in line
    assert "connection refused" in line
    assert "hunter2" not in line and "bob" not in line


@pytest.mark.integration
def test_server_errors_are_retried_then_reported(tmp_path: Path) -> None:
    with stub_server(Reply(500, "upstream exploded\n", "text/plain")) as stub:
        line = fails_in_one_line(["--prometheus", stub.url, "--retries", "2"], 1, tmp_path)
    assert "HTTP 500" in line and "after 2 retries" in line and "upstream exploded" in line
    assert len(stub.requests) == 3


@pytest.mark.integration
def test_retry_after_429_and_502_then_success() -> None:
    replies = (Reply(429, "slow down", "text/plain", headers={"Retry-After": "0"}),
               Reply(502, "<html>bad gateway</html>", "text/html"), Reply())
    with stub_server(*replies) as stub, PrometheusClient(ConnectionSettings(stub.url)) as client:
        assert client.query("up", 1_700_000_000) == []
    assert len(stub.requests) == 3


@pytest.mark.integration
def test_an_engine_timeout_is_not_retried_but_can_be_split() -> None:
    timeout = {"status": "error", "errorType": "timeout",
               "error": "query timed out in expression evaluation"}
    with (stub_server(Reply(503, timeout)) as stub,
          PrometheusClient(ConnectionSettings(stub.url)) as client,
          pytest.raises(PrometheusError, match="timeout: query timed out") as err):
        client.query("up[1h]", 1_700_000_000)
    assert err.value.splittable and err.value.status == 503
    assert len(stub.requests) == 1  # retrying the same query would only time out again


@pytest.mark.integration
def test_a_hanging_server_hits_the_read_timeout_and_is_retried(tmp_path: Path) -> None:
    with stub_server(Reply(delay=3)) as stub:
        started = time.monotonic()
        line = fails_in_one_line(["--prometheus", stub.url, "--timeout", "0.5", "--retries", "1"],
                                 1, tmp_path)
        assert time.monotonic() - started < 2.9  # two tries of 0.5 s, not the server's 3 s
    assert "did not answer within 0.5 s (1 retries)" in line and "--timeout" in line
    assert len(stub.requests) == 2


@pytest.mark.integration
def test_a_non_json_answer_is_explained(tmp_path: Path) -> None:
    page = "<!doctype html><html><title>Grafana</title></html>"
    with stub_server(Reply(200, page, "text/html")) as stub:
        line = fails_in_one_line(["--prometheus", stub.url], 1, tmp_path)
    assert "text/html, not the API's JSON" in line and "<!doctype html>" in line


@pytest.mark.integration
def test_warnings_and_partial_responses_are_shown(tmp_path: Path) -> None:
    partial = {"status": "success", "data": {"resultType": "vector", "result": []},
               "warnings": ["partial response: store gateway sg-1 unavailable"]}
    with stub_server(Reply(200, partial)) as stub:
        seen: list[str] = []
        with PrometheusClient(ConnectionSettings(stub.url), on_warning=seen.append) as client:
            client.query("up", 1)
            client.query("up", 2)
        assert seen == ["Prometheus: partial response: store gateway sg-1 unavailable "
                        "(in the query up)"]
        code, _, stderr = collector("export", "--since", "1h", "--prometheus", stub.url,
                                    "--out", str(tmp_path / "out"))
    assert code == 1
    assert stderr.startswith("collector: warning: Prometheus: partial response: store gateway")
    assert stderr.splitlines()[-1].startswith("collector: error: no GPU series")


@pytest.mark.integration
def test_auth_headers_and_post_form(tmp_path: Path) -> None:
    """What goes on the wire (a real Prometheus ignores these headers, so a stub records
    them): queries are form-encoded POSTs, the token and tenant header are sent, never shown."""
    token = tmp_path / "token"
    token.write_text("tok-123\n")
    with stub_server(Reply(500, "tok-123 is invalid here", "text/plain")) as stub:
        code, _, stderr = collector(
            "peaks", "--since", "1h", "--prometheus", stub.url + "/prefix/",
            "--bearer-token-file", str(token), "--header", "X-Scope-OrgID: team-a",
            "--retries", "0")
    assert code == 1 and "tok-123" not in stderr and "*** is invalid here" in stderr
    request = stub.requests[0]
    assert (request["method"], request["path"]) == ("POST", "/prefix/api/v1/query")
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert headers["authorization"] == "Bearer tok-123"
    assert headers["x-scope-orgid"] == "team-a"
    assert headers["content-type"] == "application/x-www-form-urlencoded"
    assert request["form"]["query"][0].startswith("max by (worker) (max_over_time(dask_gpu_")


@pytest.mark.parametrize(("args", "message"), [
    (["--since", "yesterday"], "--since: 'yesterday' is not a time"),
    (["--since", "1h", "--until", "2024-13-01T00:00:00Z"], "--until:"),
    (["--since", "1h", "--metrics", "gpu-util"], "--metrics: unknown metric 'gpu-util'"),
    (["--since", "1h", "--step", "0s"], "--step: '0s' must be more than zero"),
    (["--since", "1h", "--layout", "wide"], "invalid choice: 'wide'"),
    (["--since", "1h", "--header", "NoColon"], "--header expects NAME:VALUE"),
    (["--since", "1h", "--user", "bob"], "--user needs --password-file"),
    (["--since", "1h", "--config", "/nonexistent.yaml"], "--config /nonexistent.yaml"),
    (["--since", "1h", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_input_is_a_usage_error(args: list[str], message: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, stderr = collector("export", "--out", str(out), "--prometheus",
                                f"http://127.0.0.1:{free_port()}", *args)
    assert code == 2
    assert len(stderr.splitlines()) == 1 and stderr.startswith("collector: error: ")
    assert message in stderr
    assert not out.exists()


def test_no_url_is_a_usage_error() -> None:
    code, _, stderr = collector("peaks", "--since", "1h")
    assert code == 2 and "DASK_METRICS_PROMETHEUS_URL" in stderr

