"""The bounds on every wait and every answer of the collector's HTTP side: --timeout values
that cannot be waited for, a Retry-After over the cap, a server that trickles its answer a
byte at a time or never ends it, and secrets echoed back in another case.

The servers are local stubs (tests/helpers.serve_http and the stub of
test_collector_faults.py) ONLY because a real Prometheus cannot be made to misbehave so.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from dask_metrics.collector.cli.options import cli_option
from dask_metrics.collector.errors import UsageError
from dask_metrics.collector.store.client import (
    ConnectionSettings,
    PrometheusClient,
    PrometheusError,
)
from dask_metrics.collector.store.connection import resolve
from dask_metrics.collector.store.settings import MAX_TIMEOUT
from tests.helpers import collector, free_port, serve_http
from tests.test_collector_faults import EMPTY_VECTOR, Reply, fails_in_one_line, stub_server

Write = Callable[[bytes], object]


@contextmanager
def raw_server(respond: Callable[[Write], None]) -> Iterator[str]:
    """A server that reads each request and lets ``respond`` write the raw answer, status
    line included, until it is done or the client has gone; yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.close_connection = True
            with suppress(OSError):  # the client gave up: what these tests want
                respond(self.wfile.write)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    with serve_http(Handler) as url:
        yield url


HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"X-Padding: " + b"p" * 150 + b"\r\n\r\n")
BODY = json.dumps(EMPTY_VECTOR).encode() + b" " * 150


# ---- --timeout -------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", ["nan", "inf", "5,-inf", "1e308", "5,nan", "inf,5", "3601",
                                     "0", "-1"])
def test_a_timeout_that_cannot_be_waited_for_is_a_usage_error(timeout: str,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, stderr = collector("report", "--since", "1h", "--timeout", timeout, "--out",
                                str(out), "--prometheus", f"http://127.0.0.1:{free_port()}")
    assert code == 2, stderr
    assert stderr == (f"collector: error: --timeout expects SECONDS or CONNECT,READ seconds, "
                      f"each more than 0 and at most 3600 (got {timeout!r})\n")
    assert not out.exists()


def test_a_config_file_and_the_python_api_check_the_timeout_too(tmp_path: Path) -> None:
    config = tmp_path / "collector.yaml"
    config.write_text(f"prometheus: http://127.0.0.1:{free_port()}\ntimeout: .inf\n")
    code, _, stderr = collector("export", "--since", "1h", "--config", str(config),
                                "--out", str(tmp_path / "out"))
    assert code == 2 and len(stderr.splitlines()) == 1
    assert "--timeout expects SECONDS" in stderr and "at most 3600" in stderr
    # Monitor(timeout=...) resolves its options so
    with pytest.raises(UsageError, match="at most 3600"):
        resolve({"prometheus": "http://h:1", "timeout": math.inf}, {})
    assert resolve({"prometheus": "http://h:1", "timeout": MAX_TIMEOUT}, {}).read_timeout == 3600
    for bad in (math.nan, math.inf, 0.0, MAX_TIMEOUT + 1):
        with pytest.raises(ValueError, match="read_timeout must be more than 0"):
            ConnectionSettings("http://h:1", read_timeout=bad)


# ---- Retry-After -----------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("retries", ["0", "2"])
def test_a_retry_after_over_the_cap_is_reported_not_waited_for(retries: str,
                                                              tmp_path: Path) -> None:
    asked = Reply(429, "slow down", "text/plain", headers={"Retry-After": "100000"})
    with stub_server(asked) as stub:
        line = fails_in_one_line(["--prometheus", stub.url, "--retries", retries,
                                  "--timeout", "3"], 1, tmp_path)
    assert line == (f"collector: error: Prometheus at {stub.url} answered HTTP 429 Too Many "
                    "Requests and asked to be retried after 100000 s (Retry-After), longer "
                    "than the 30 s the collector waits: try again later")
    assert len(stub.requests) == 1


@pytest.mark.integration
def test_an_unreadable_retry_after_falls_back_to_the_backoff() -> None:
    replies = (Reply(503, "busy", "text/plain", headers={"Retry-After": "soon"}), Reply())
    with stub_server(*replies) as stub, PrometheusClient(ConnectionSettings(stub.url)) as client:
        assert client.query("up", 1_700_000_000) == []
    assert len(stub.requests) == 2


# ---- one request's time and size -------------------------------------------------------------


def trickle(slow: bytes, before: bytes = b"", after: bytes = b"") -> Callable[[Write], None]:
    """An answer whose ``slow`` part comes a byte every 50 ms (so a read timeout never fires),
    between ``before`` and ``after``, which come at once."""

    def respond(write: Write) -> None:
        write(before)
        for byte in slow:
            write(bytes([byte]))
            time.sleep(0.05)  # the server's pace, not a wait of the test
        write(after)

    return respond


@pytest.mark.integration
@pytest.mark.parametrize("respond", [trickle(HEAD, after=BODY), trickle(BODY, before=HEAD)],
                         ids=["headers", "body"])
def test_a_trickling_answer_ends_at_the_deadline(respond: Callable[[Write], None]) -> None:
    settings = {"read_timeout": 2.0, "total_timeout": 1.0, "retries": 0}
    with (raw_server(respond) as url,
          PrometheusClient(ConnectionSettings(url, **settings)) as client,
          pytest.raises(PrometheusError) as err):
        client.query("up", 1_700_000_000)
    assert err.value.worded(cli_option) == (
        f"Prometheus at {url} did not finish its answer within 1 s, although it kept sending: "
        "raise --timeout (each try may take max(30 s, 4 x it)), or lower --chunk")
    # the Python API names its keywords
    assert str(err.value).endswith("raise read_timeout (each try may take max(30 s, 4 x it)), "
                                   "or lower chunk")


def test_the_deadline_follows_the_read_timeout() -> None:
    assert ConnectionSettings("http://h:1").deadline == 240  # 4 x the default 60 s
    assert ConnectionSettings("http://h:1", read_timeout=0.5).deadline == 30
    assert ConnectionSettings("http://h:1", total_timeout=2).deadline == 2


def endless_json(write: Write) -> None:
    """A 200 whose JSON never closes (here: stops, unfinished, after 8 MiB)."""
    write(HEAD + b'{"status":"success","data":{"resultType":"vector","result":[')
    item = b'{"metric":{"gpu":"0"},"value":[1700000000,"1"]},'
    for _ in range(128):
        write(item * (2**16 // len(item)))


@pytest.mark.integration
def test_an_endless_answer_stops_at_the_size_limit() -> None:
    with (raw_server(endless_json) as url,
          PrometheusClient(ConnectionSettings(url, max_response_bytes=2**20)) as client,
          pytest.raises(PrometheusError) as err):
        client.query("up", 1_700_000_000)
    assert err.value.worded(cli_option) == (
        f"Prometheus at {url} answered more than 1 MiB, the most the collector reads: lower "
        "--chunk, or select fewer --workers")


@pytest.mark.integration
def test_an_answer_of_exactly_the_limit_is_read() -> None:
    size = len(json.dumps(EMPTY_VECTOR).encode())
    with stub_server(Reply()) as stub:
        with PrometheusClient(ConnectionSettings(stub.url, max_response_bytes=size)) as client:
            assert client.query("up", 1) == []
            assert client.query("up", 2) == []
        with (PrometheusClient(ConnectionSettings(stub.url, max_response_bytes=size - 1))
              as client, pytest.raises(PrometheusError, match=f"more than {size - 1} bytes,")):
            client.query("up", 1)


# ---- secrets ---------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("echo", [str.lower, str.upper, str.swapcase])
def test_secrets_echoed_in_another_case_are_masked(
        echo: Callable[[str], str], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    token = tmp_path_factory.mktemp("secrets") / "token"
    token.write_text("TokenSecret123\n")
    said = echo("denied: Bearer TokenSecret123 | X-Api-Key: HdrSecret")
    with stub_server(Reply(500, said, "text/plain")) as stub:
        line = fails_in_one_line(["--prometheus", stub.url, "--retries", "0",
                                  "--bearer-token-file", str(token),
                                  "--header", "X-Api-Key: HdrSecret"], 1, tmp_path)
    assert "tokensecret" not in line.lower() and "hdrsecret" not in line.lower()
    assert echo("denied: Bearer ") + "*** | " + echo("X-Api-Key: ") + "***" in line
