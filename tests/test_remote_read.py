"""Raw samples read through Prometheus' remote-read API (collector/store/remote_read.py) and
VictoriaMetrics' export API (collector/store/vm_export.py) are exactly those a query of the same
selector gives: the same series, times and values (NaN where a GPU reading failed, the
infinities, -0.0), staleness markers left out as queries leave them out, and the server's
external labels (which remote read adds) taken off again.

The truth is a real Prometheus answering both ways: backfilled blocks whose series carry
every kind of time step the XOR encoding has a case for and label values a selector must
escape, and a live scrape of a target whose series vanish and come back (staleness
markers in the head). The pure part checks the codec on chunks written by xor.go's rules,
and what an answer cut short or of another encoding gives; VictoriaMetrics (imported the
same backfill) is read both ways too."""

from __future__ import annotations

import math
import random
import struct
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dask_metrics.collector.model.series import Series
from dask_metrics.collector.query.promql import literal_matchers
from dask_metrics.collector.query.reads import fetch_raw
from dask_metrics.collector.query.scope import Scope, selector
from dask_metrics.collector.store.client import PrometheusClient
from dask_metrics.collector.store.remote_read import (
    EQ,
    NRE,
    RE,
    Matcher,
    _fields,
    _read_uvarint,
    _uvarint,
    parse_selector,
    read_request,
    read_series,
)
from dask_metrics.collector.store.settings import ConnectionSettings
from dask_metrics.collector.store.vm_export import ExportError, export_series
from dask_metrics.collector.store.xor_chunk import STALE_NAN, ReadError, xor_samples
from tests.helpers import wait_for
from tests.prometheus_helpers import (
    OpenMetrics,
    PrometheusServer,
    create_blocks,
    requires_prometheus,
    run_prometheus,
    run_victoria_metrics,
)

# ---- an XOR encoder by xor.go's rules, for the codec's own tests ----------------------------


def _bits(value: float) -> int:
    return int.from_bytes(struct.pack(">d", value), "big")


def _put(out: list[str], value: int, width: int) -> None:
    out.append(format(value & ((1 << width) - 1), f"0{width}b"))


def _put_varint(out: list[str], value: int) -> None:
    for byte in _uvarint(value):
        _put(out, byte, 8)


def _dod_code(dod: int) -> tuple[str, int]:
    """The prefix and width of a change of step, the narrowest that holds it."""
    for prefix, width in (("10", 14), ("110", 17), ("1110", 20)):
        if -((1 << (width - 1)) - 1) <= dod <= 1 << (width - 1):
            return prefix, width
    return "1111", 64


def xor_chunk(samples: list[tuple[int, int]]) -> bytes:
    """A Prometheus XOR chunk of (ms, value bits), encoded as tsdb/chunkenc/xor.go does."""
    out: list[str] = []
    t0, v0 = samples[0]
    _put_varint(out, (t0 << 1) ^ (t0 >> 63))
    _put(out, v0, 64)
    prev_t, prev_v, delta, leading, trailing = t0, v0, 0, None, 0
    for i, (t, v) in enumerate(samples[1:], 1):
        if i == 1:
            delta = t - prev_t
            _put_varint(out, delta)
        else:
            dod = t - prev_t - delta
            delta = t - prev_t
            if dod == 0:
                out.append("0")
            else:
                prefix, width = _dod_code(dod)
                out.append(prefix)
                _put(out, dod, width)
        xor = v ^ prev_v
        if xor == 0:
            out.append("0")
        else:
            lead = min(64 - xor.bit_length(), 31)
            trail = (xor & -xor).bit_length() - 1
            if leading is not None and lead >= leading and trail >= trailing:
                out.append("10")
                _put(out, xor >> trailing, 64 - leading - trailing)
            else:
                leading, trailing = lead, trail
                out.append("11")
                _put(out, lead, 5)
                _put(out, 64 - lead - trail, 6)  # 64 is written as 0
                _put(out, xor >> trail, 64 - lead - trail)
        prev_t, prev_v = t, v
    text = "".join(out)
    text += "0" * (-len(text) % 8)
    return len(samples).to_bytes(2, "big") + int(text or "0", 2).to_bytes(len(text) // 8, "big")


def _message(*fields: tuple[int, bytes | int]) -> bytes:
    out = b""
    for number, value in fields:
        if isinstance(value, int):
            out += _uvarint(number << 3) + _uvarint(value)
        else:
            out += _uvarint(number << 3 | 2) + _uvarint(len(value)) + value
    return out


def frame(series: list[tuple[dict[str, str], list[bytes]]], encoding: int = 1,
          times: list[tuple[int, int]] | None = None) -> bytes:
    """One frame of a streamed answer: ChunkedReadResponse with these series' chunks (their
    first and last times ``times``, or 0 and 2**40)."""
    spans = iter(times or [])
    body = _message(*[(1, _message(
        *[(1, _message((1, k.encode()), (2, v.encode()))) for k, v in labels.items()],
        *[(2, _message(*zip((1, 2), next(spans, (0, 2**40)), strict=True), (3, encoding),
                       (4, c))) for c in chunks]))
        for labels, chunks in series], (2, 0))
    return _uvarint(len(body)) + b"\0\0\0\0" + body


def decoded(chunk: bytes) -> tuple[list[int], list[float]]:
    times: list[int] = []
    values: list[float] = []
    xor_samples(chunk, times, values, {})
    return times, values


def same_floats(a: list[float], b: list[float]) -> bool:
    """Equal bit for bit, but for a NaN's payload (-0.0 is not 0.0)."""
    def bits(values: list[float]) -> list[bytes | None]:
        return [None if math.isnan(v) else struct.pack(">d", v) for v in values]

    return bits(a) == bits(b)


# ---- the codec ------------------------------------------------------------------------------


SPECIAL = [0.0, -0.0, 1.0, -1.5, math.inf, -math.inf, math.nan, 1e308, 5e-324, 2**53 + 1.0]


@pytest.mark.parametrize("seed", range(40))
def test_xor_chunks_decode_to_their_samples(seed: int) -> None:
    rng = random.Random(seed)
    t = rng.randrange(-10**6, 2 * 10**12)
    value = rng.choice(SPECIAL)
    samples: list[tuple[int, int]] = []
    for _ in range(rng.randrange(1, 240)):
        samples.append((t, _bits(value)))
        roll = rng.random()
        if roll < 0.3:
            value = rng.choice(SPECIAL)
        elif roll < 0.6:  # else the same value: with the same step, '00' again and again
            value = round(rng.uniform(-1e6, 1e6), rng.randrange(0, 6))
        t += rng.choice([15_000, 15_000, 15_000, 15_003, 14_990, 60_000, 300_000, 400_000,
                         7_200_000, 1, 2**40])  # every width of a change of step
    times, got = decoded(xor_chunk(samples))
    want = [struct.unpack(">d", v.to_bytes(8, "big"))[0] for _, v in samples]
    assert times == [s[0] for s in samples]
    assert same_floats(got, want)


def test_staleness_markers_are_left_out_and_nan_kept() -> None:
    nan = _bits(math.nan)
    assert nan != STALE_NAN
    samples = [(1000, _bits(1.0)), (2000, STALE_NAN), (3000, STALE_NAN), (4000, STALE_NAN),
               (5000, nan), (6000, nan), (7000, STALE_NAN), (8000, _bits(2.0))]
    times, values = decoded(xor_chunk(samples))
    assert times == [1000, 5000, 6000, 8000]
    assert values[0] == 1.0 and math.isnan(values[1]) and math.isnan(values[2])
    assert values[3] == 2.0


def test_a_series_over_frames_and_chunks() -> None:
    first = xor_chunk([(t, _bits(float(t))) for t in range(0, 120_000, 1000)])
    second = xor_chunk([(t, _bits(float(t))) for t in range(120_000, 150_000, 1000)])
    labels = {"__name__": "m", "worker": "w\n\"1\""}
    answer = frame([(labels, [first]), ({"__name__": "m", "worker": "2"}, [second])]) + \
        frame([(labels, [second])])
    found = list(read_series(answer))
    assert [(f[0], len(f[1])) for f in found] == [(labels, 120), ({"__name__": "m",
                                                                    "worker": "2"}, 30),
                                                  (labels, 30)]
    assert found[2][1][0] == 120_000 and found[2][2][-1] == 149_000.0


def test_chunks_outside_the_range_and_samples_after_it_are_not_decoded() -> None:
    chunks = [xor_chunk([(t, _bits(float(t % 7000 > 3000))) for t in range(a, a + 10_000, 500)])
              for a in (0, 10_000, 20_000, 30_000)]
    answer = frame([({"a": "b"}, chunks)], times=[(a, a + 9500) for a in range(0, 40_000,
                                                                               10_000)])
    [(_, times, values)] = read_series(answer, 12_000, 25_250)
    assert times == list(range(10_000, 25_001, 500))  # from its chunk's start, to hi
    assert values == [float(t % 7000 > 3000) for t in times]
    times, values = [], []
    xor_samples(chunks[0], times, values, {}, until=4_999)
    assert times == list(range(0, 4_999, 500))


def test_overlapping_chunks_keep_one_sample_per_time() -> None:
    first = xor_chunk([(t, _bits(1.0)) for t in range(0, 10_000, 1000)])
    second = xor_chunk([(t, _bits(2.0)) for t in range(5000, 15_000, 1000)])
    [(_, times, values)] = read_series(frame([({"a": "b"}, [first, second])]))
    assert times == list(range(0, 15_000, 1000))
    assert values == [1.0] * 10 + [2.0] * 5


@pytest.mark.parametrize("cut", [1, 3, 7, 20, -1])
def test_an_answer_cut_short_is_a_read_error(cut: int) -> None:
    whole = frame([({"a": "b"}, [xor_chunk([(t, _bits(t * 0.5)) for t in range(50)])])])
    with pytest.raises(ReadError):
        list(read_series(whole[:cut]))


def test_a_chunk_cut_short_is_a_read_error() -> None:
    chunk = xor_chunk([(t * 1000, _bits(t * 0.37)) for t in range(100)])
    with pytest.raises(ReadError):
        decoded(chunk[:len(chunk) // 2])


def test_another_encoding_is_a_read_error() -> None:
    answer = frame([({"a": "b"}, [xor_chunk([(0, _bits(1.0))])])], encoding=2)
    with pytest.raises(ReadError, match="encoding 2"):
        list(read_series(answer))


NAMES = ["tcp://10.0.0.1:4000", "w.a+b(1)|x", 'q"uote\\back', "new\nline", "ünï code"]


def test_the_collectors_selectors_parse_to_their_matchers() -> None:
    scope = Scope("c\\\"1")
    assert parse_selector(selector(["a", "b_total"], NAMES[:2], scope)) == [
        Matcher(RE, "__name__", "a|b_total"),
        Matcher(RE, "worker", "tcp://10\\.0\\.0\\.1:4000|w\\.a\\+b\\(1\\)\\|x"),
        Matcher(EQ, "dask_cluster", 'c\\"1')]
    for name in [*NAMES, ""]:
        assert parse_selector(scope.of("m", worker=name)) == [
            Matcher(EQ, "__name__", "m"), Matcher(EQ, "worker", name),
            Matcher(EQ, "dask_cluster", 'c\\"1')]
    assert parse_selector(selector(["m"], None, Scope(None),
                                   literal_matchers("job_id", ["j.1", "j2"]))) == [
        Matcher(RE, "__name__", "m"), Matcher(RE, "job_id", "j\\.1|j2")]
    assert parse_selector("up") == [Matcher(EQ, "__name__", "up")]
    assert parse_selector('{a!~"x", b != "y"}') == [Matcher(NRE, "a", "x"),
                                                     Matcher(1, "b", "y")]


@pytest.mark.parametrize("promql", ["rate(m[5m])", 'm{a="x"} or n', 'm{a="\\d"}', "m[5m]",
                                    'm{a="x"', "", "{}", 'm{a=x}', "sum(m)"])
def test_other_promql_is_left_to_the_query_api(promql: str) -> None:
    assert parse_selector(promql) is None


@pytest.mark.parametrize("size", [1, 59, 60, 300, 70_000])
def test_the_request_is_one_snappy_literal_of_a_read_request(size: int) -> None:
    matchers = [Matcher(RE, "worker", "w" * size), Matcher(EQ, "__name__", "m")]
    body = read_request(matchers, -5, 2**41)
    length, pos = _read_uvarint(body, 0)
    tag = body[pos]
    assert tag & 3 == 0  # a literal
    extra = (tag >> 2) - 59
    assert 1 <= extra <= 4
    assert int.from_bytes(body[pos + 1:pos + 1 + extra], "little") == length - 1
    message = body[pos + 1 + extra:]
    assert len(message) == length
    top = list(_fields_with_ints(message))
    assert [number for number, _ in top] == [1, 2]
    assert top[1][1] == _uvarint(1)  # accepted: streamed XOR chunks
    found = list(_fields_with_ints(top[0][1]))  # type: ignore[arg-type]
    assert found[0] == (1, 2**64 - 5) and found[1] == (2, 2**41)
    assert [dict(_fields_with_ints(m))[2].decode() for _, m in found[2:]] == ["worker",
                                                                             "__name__"]


def _fields_with_ints(message: bytes) -> Iterator[tuple[int, bytes | int]]:
    pos = 0
    while pos < len(message):
        key, pos = _read_uvarint(message, pos)
        if key & 7 == 0:
            value, pos = _read_uvarint(message, pos)
            yield key >> 3, value
        else:
            size, pos = _read_uvarint(message, pos)
            yield key >> 3, message[pos:pos + size]
            pos += size


def test_export_lines_are_series_without_staleness_markers() -> None:
    answer = (b'{"metric":{"__name__":"m","w":"a"},"values":[1,2.5,NaN,-0.0],'
              b'"timestamps":[3000,1000,2000,4000]}\n\n'
              b'{"metric":{"__name__":"m","w":"b"},"values":[1e308,null],"timestamps":[1,2]}\n'
              b'{"metric":{"__name__":"m","w":"+Inf-Inf"},"values":[+Inf,-Inf,7],'
              b'"timestamps":[1,2,3]}')
    assert list(export_series(answer)) == [
        ({"__name__": "m", "w": "a"}, [1000, 3000, 4000], [2.5, 1.0, -0.0]),
        ({"__name__": "m", "w": "b"}, [1], [1e308]),
        ({"__name__": "m", "w": "+Inf-Inf"}, [1, 2, 3], [math.inf, -math.inf, 7.0])]


@pytest.mark.parametrize("line", [b"{", b'{"metric":{}}', b'{"metric":{},"values":[1],'
                                  b'"timestamps":[]}', b"[1]", b"<html>"])
def test_a_broken_export_line_is_an_export_error(line: bytes) -> None:
    with pytest.raises(ExportError):
        list(export_series(line))


def test_fields_skip_numbers() -> None:
    assert list(_fields(_message((1, 7), (2, b"x"), (3, 2**40)))) == [(2, b"x")]


# ---- against a real Prometheus --------------------------------------------------------------

T0 = 1_700_000_000.0
METRICS = ("dask_gpu_memory_used_bytes", "dask_gpu_utilization_ratio",
           "dask_gpu_energy_joules_total")


def tricky_data() -> OpenMetrics:
    """Six workers, whose names need escaping, two GPUs each; 3 h of samples every 15 s with
    every step a chunk can encode (jitter of ms, a minute, ten minutes, an hour and a half),
    runs of one value, NaN, the infinities and -0.0."""
    rng = random.Random(7)
    om = OpenMetrics()
    for w, worker in enumerate(NAMES):
        for gpu in ("0", "1"):
            labels = {"worker": worker, "gpu": gpu, "uuid": f"GPU-{w}-{gpu}",
                      "dask_cluster": "lab", "instance": f"h{w}:9446", "job": "dask-gpu"}
            t, times = T0, []
            while t < T0 + 3 * 3600:
                times.append(round(t, 3))
                t += rng.choice([15, 15, 15, 15.004, 14.993, 60, 300, 600,
                                 5400 if w == 1 else 15])
            value = 0.0
            for metric in METRICS:
                points = []
                for t in times:
                    roll = rng.random()
                    if roll < 0.05:
                        value = rng.choice([math.nan, math.inf, -math.inf, -0.0])
                    elif roll < 0.5:
                        value = round(rng.uniform(0, 8e10), rng.randrange(0, 4))
                    points.append((t, value))
                om.add(metric, labels, points,
                       "counter" if metric.endswith("_total") else "gauge")
    return om


class Vanishing:
    """A scrape target whose series ``gone`` is left out of every other stretch of scrapes:
    Prometheus writes staleness markers into the head each time it disappears."""

    def __init__(self) -> None:
        self.scrapes = 0
        target = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                target.scrapes += 1
                lines = [f'dask_gpu_utilization_ratio{{worker="live",gpu="0"}} {target.scrapes}']
                if (target.scrapes // 3) % 2 == 0:
                    lines.append(f'dask_gpu_utilization_ratio{{worker="live",gpu="1"}} '
                                 f'{"NaN" if target.scrapes % 2 else 0.5}')
                body = ("\n".join(lines) + "\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer,
                                                                          Vanishing]]:
    work = tmp_path_factory.mktemp("remote-read")
    blocks = create_blocks(tricky_data(), work / "blocks")
    target = Vanishing()
    scrape = {"job_name": "live", "scrape_interval": "1s",
              "static_configs": [{"targets": [f"127.0.0.1:{target.server.server_port}"]}]}
    try:
        with run_prometheus(work / "prom", blocks=blocks, scrape_configs=[scrape],
                            external_labels={"replica": "r1", "site": "lab"}) as server:
            yield server, target
    finally:
        target.close()


def both_ways(url: str, sel: str, lo: int, hi: int, chunk: int, scope: Scope,
              api: str = "remote-read") -> tuple[list[Series], list[Series], str]:
    query = PrometheusClient(ConnectionSettings(url, read_api="query"))
    auto = PrometheusClient(ConnectionSettings(url, read_api=api))
    found = fetch_raw(query, sel, lo, hi, chunk, scope), fetch_raw(auto, sel, lo, hi, chunk,
                                                                   scope)
    assert query.raw_reads == "query"
    return found[0], found[1], auto.raw_reads


def assert_same(one: list[Series], other: list[Series]) -> None:
    def keyed(found: list[Series]) -> dict[tuple[tuple[str, str], ...], Series]:
        return {tuple(sorted(s.labels.items())): s for s in found}

    a, b = keyed(one), keyed(other)
    assert sorted(a) == sorted(b)
    for key, s in a.items():
        assert s.times == b[key].times, key
        assert same_floats(s.values, b[key].values), key


@pytest.mark.integration
@requires_prometheus
@pytest.mark.parametrize("chunk_s", [600, 3 * 3600 + 60, 47])
@pytest.mark.parametrize("workers", [None, NAMES[:3], [NAMES[3]], NAMES[4:]])
def test_backfilled_blocks_read_alike(served: tuple[PrometheusServer, Vanishing],
                                      chunk_s: int, workers: list[str] | None) -> None:
    server, _ = served
    scope = Scope("lab")
    lo, hi = round(T0 * 1000) + 7, round((T0 + 3 * 3600) * 1000)
    if chunk_s == 47:  # small chunks over a part of the range only: their edges cut chunks
        lo, hi = lo + 3_600_000, lo + 3_600_000 + 1200_000
    query, remote, how = both_ways(server.url, selector(list(METRICS), workers, scope), lo, hi,
                                   chunk_s * 1000, scope)
    assert how == "remote read"
    assert sum(len(s.times) for s in query) > 0
    found = {s.labels["worker"] for s in query}
    assert found == set(workers or NAMES) if chunk_s != 47 else found <= set(workers or NAMES)
    assert not {"replica", "site"} & {k for s in remote for k in s.labels}
    assert_same(query, remote)


@pytest.fixture(scope="module")
def victoria(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    with run_victoria_metrics(tmp_path_factory.mktemp("export"), data=tricky_data()) as vm:
        yield vm


@pytest.mark.integration
@pytest.mark.parametrize("chunk_s", [600, 3 * 3600 + 60])
@pytest.mark.parametrize("workers", [None, NAMES[:3], [NAMES[3]]])
def test_victoria_metrics_exports_read_alike(victoria: PrometheusServer, chunk_s: int,
                                             workers: list[str] | None) -> None:
    scope = Scope("lab")
    lo, hi = round(T0 * 1000) + 7, round((T0 + 3 * 3600) * 1000)
    query, export, how = both_ways(victoria.url, selector(list(METRICS), workers, scope), lo,
                                   hi, chunk_s * 1000, scope, "export")
    assert how == "export"
    assert {s.labels["worker"] for s in query} == set(workers or NAMES)
    assert_same(query, export)


@pytest.mark.integration
@requires_prometheus
def test_live_series_with_staleness_markers_read_alike(served: tuple[PrometheusServer,
                                                                     Vanishing]) -> None:
    server, target = served
    start = time.time()
    wait_for(lambda: target.scrapes, lambda n: n >= 17, timeout=60,
             what="17 scrapes of the vanishing target")
    # 3 s before now: every scrape up to then is in the head, for both reads alike
    query, remote, how = both_ways(server.url, selector(["dask_gpu_utilization_ratio"],
                                                        ["live"], Scope(None)),
                                   round(start * 1000) - 5000, round(time.time() * 1000) - 3000,
                                   4000, Scope(None))
    assert how == "remote read"
    assert_same(query, remote)
    gone = next(s for s in remote if s.labels["gpu"] == "1")
    steps = [b - a for a, b in zip(gone.times, gone.times[1:], strict=False)]
    assert max(steps) >= 2500, "the series came back after staleness markers"
    assert any(math.isnan(v) for v in gone.values)  # its NaN readings stay
    assert {s.labels.get("job") for s in remote} == {"live"}


@pytest.mark.integration
@requires_prometheus
def test_a_matcher_on_an_external_label_is_left_to_the_query_api(
        served: tuple[PrometheusServer, Vanishing]) -> None:
    server, _ = served
    client = PrometheusClient(ConnectionSettings(server.url, read_api="remote-read"))
    assert client.read_raw('dask_gpu_utilization_ratio{site="lab"}', 0, 10**13) is None
    assert client.read_raw('{__name__="dask_gpu_utilization_ratio",worker="live"}', 0,
                           10**13)
    assert client.raw_reads == "remote read"


class Refusing:
    """A server whose remote-read path answers ``status`` with ``kind``."""

    def __init__(self, status: int, kind: str) -> None:
        self.asked: list[str] = []
        target = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                target.asked.append(self.path)
                body = b"no"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.integration
@pytest.mark.parametrize(("status", "kind"), [(404, "text/plain"), (403, "text/plain"),
                                              (200, "application/x-protobuf"),
                                              (200, "text/html")])
def test_a_store_without_the_api_is_queried(status: int, kind: str) -> None:
    server = Refusing(status, kind)
    try:
        for api, path in (("remote-read", "/api/v1/read"), ("export", "/api/v1/export")):
            client = PrometheusClient(ConnectionSettings(
                f"http://127.0.0.1:{server.server.server_port}", retries=0, read_api=api))
            assert client.read_raw("m", 0, 1000) is None
            assert client.read_raw("m", 0, 1000) is None  # asked once: the client remembers
            assert server.asked.count(path) == 1, api
            assert client.raw_reads == "query"
        # and remote read's client its external labels, once
        assert server.asked == ["/api/v1/status/config", "/api/v1/read", "/api/v1/export"]
    finally:
        server.server.shutdown()
        server.server.server_close()


def test_read_api_query_never_asks_remote_read() -> None:
    client = PrometheusClient(ConnectionSettings("http://127.0.0.1:9", read_api="query"))
    assert client.read_raw("m", 0, 1000) is None  # no request: port 9 would refuse it


@pytest.mark.integration
@requires_prometheus
def test_export_queries_prometheus(served: tuple[PrometheusServer, Vanishing]) -> None:
    """``export`` asks Prometheus' export path once (it has none), then queries."""
    server, _ = served
    client = PrometheusClient(ConnectionSettings(server.url, read_api="export"))
    assert client.read_raw('{__name__="dask_gpu_utilization_ratio"}', 0, 10**13) is None
    assert client.raw_reads == "query"
