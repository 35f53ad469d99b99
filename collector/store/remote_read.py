"""Prometheus' remote-read API with streamed XOR chunks, pure: the request for a selector's
raw samples, and the series of the answer.

Read this way, raw samples cost the server about a twentieth of the CPU that a query's
JSON costs (no query engine, no JSON: the chunks as stored), and the collector less than
decoding that JSON (docs/benchmarks.md, "How raw samples are read"). No protobuf or snappy
library is needed: the request is a few hand-encoded fields in one snappy literal, the
answer's messages are read field by field, and each chunk is decoded by the rules of
Prometheus' ``tsdb/chunkenc/xor.go`` (``xor_chunk``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

from dask_metrics.collector.store.xor_chunk import ReadError, xor_samples

EQ, NEQ, RE, NRE = 0, 1, 2, 3
_OPERATORS = {"=": EQ, "!=": NEQ, "=~": RE, "!~": NRE}
STREAMED_XOR_CHUNKS = 1  # prompb.ReadRequest.ResponseType
XOR = 1  # prompb.Chunk.Encoding
CONTENT_TYPE = "application/x-streamed-protobuf"  # "; proto=prometheus.ChunkedReadResponse"
REQUEST_HEADERS = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
                   "X-Prometheus-Remote-Read-Version": "0.1.0"}


class Matcher(NamedTuple):
    kind: int  # EQ, NEQ, RE or NRE
    name: str
    value: str


# ---- the selector ---------------------------------------------------------------------------

_NAME = r"[A-Za-z_:][A-Za-z0-9_:]*"
_SELECTOR = re.compile(rf"\s*({_NAME})?\s*(?:\{{(.*)\}})?\s*", re.S)
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*'
                      r"(?:,|$)", re.S)
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def parse_selector(selector: str) -> list[Matcher] | None:
    """The matchers of a vector selector as the collector writes them (``m{a="x",b=~"y"}``,
    string literals escaped as ``promql.label`` escapes them), or None for anything else: the
    caller then asks the query API, which reads every PromQL."""
    whole = _SELECTOR.fullmatch(selector)
    if whole is None or not (whole.group(1) or whole.group(2) is not None):
        return None
    found = [Matcher(EQ, "__name__", whole.group(1))] if whole.group(1) else []
    body, pos = whole.group(2) or "", 0
    while pos < len(body):
        part = _MATCHER.match(body, pos)
        if part is None or part.end() == pos:
            return None
        value = _unescape(part.group(3))
        if value is None:
            return None
        found.append(Matcher(_OPERATORS[part.group(2)], part.group(1), value))
        pos = part.end()
    return found or None  # "{}" selects nothing; PromQL refuses it


def _unescape(text: str) -> str | None:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\":
            plain = _ESCAPES.get(text[i + 1])
            if plain is None:
                return None
            out.append(plain)
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


# ---- the request ----------------------------------------------------------------------------


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _uvarint(number << 3 | 2) + _uvarint(len(payload)) + payload


def _int_field(number: int, value: int) -> bytes:
    return _uvarint(number << 3) + _uvarint(value % 2**64)  # int64: two's complement


def read_request(matchers: list[Matcher], lo: int, hi: int) -> bytes:
    """The body of a remote read of ``matchers``' samples in [lo, hi] (ms), answered as
    streamed XOR chunks: a prompb.ReadRequest, snappy-framed as one literal (a valid snappy
    block that is not compressed: the request is small)."""
    query = _int_field(1, lo) + _int_field(2, hi) + b"".join(
        _bytes_field(3, _int_field(1, m.kind) + _bytes_field(2, m.name.encode())
                     + _bytes_field(3, m.value.encode())) for m in matchers)
    body = _bytes_field(1, query) + _bytes_field(2, _uvarint(STREAMED_XOR_CHUNKS))
    n = len(body) - 1
    size = (n.bit_length() + 7) // 8 or 1
    return _uvarint(len(body)) + bytes([(59 + size) << 2]) + n.to_bytes(size, "little") + body


# ---- the answer -----------------------------------------------------------------------------


def _read_uvarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def read_series(content: bytes, lo: int = -2**63, hi: int = 2**63
                ) -> Iterator[tuple[dict[str, str], list[int], list[float]]]:
    """(labels, ms times, values) of each series of a streamed answer, a piece per frame
    in which it appears (a series of many chunks may span frames), samples in time order
    without staleness markers. The server sends whole chunks: those outside [lo, hi] are
    not decoded, nor a chunk's samples after ``hi`` (those before ``lo`` are: the caller
    clips). ReadError for an answer cut short or not of XOR chunks."""
    labels: dict[bytes, tuple[str, str]] = {}  # a label's bytes: its name and value
    floats: dict[int, float] = {}
    pos = 0
    try:
        while pos < len(content):
            size, pos = _read_uvarint(content, pos)
            pos += 4  # the frame's CRC32C: TCP already checks the bytes
            if pos + size > len(content):
                raise ReadError("the answer ends inside a frame")
            for number, series in _fields(content[pos:pos + size]):
                if number == 1:  # ChunkedReadResponse.chunked_series; 2: the query's index
                    yield _series(series, labels, floats, lo, hi)
            pos += size
    except IndexError:
        raise ReadError("the answer ends inside a number") from None


def _fields(message: bytes) -> Iterator[tuple[int, bytes]]:
    """(field number, bytes) of a message's length-delimited fields; its numbers (the
    chunks' times and encoding, a query's index) are skipped."""
    pos, end = 0, len(message)
    while pos < end:
        key, pos = _read_uvarint(message, pos)
        if key & 7 == 0:
            pos = _read_uvarint(message, pos)[1]
        elif key & 7 == 2:
            size, pos = _read_uvarint(message, pos)
            if pos + size > end:
                raise ReadError("a field runs past its message")
            yield key >> 3, message[pos:pos + size]
            pos += size
        else:
            raise ReadError(f"protobuf wire type {key & 7}")


def _series(message: bytes, labels: dict[bytes, tuple[str, str]], floats: dict[int, float],
            lo: int, hi: int) -> tuple[dict[str, str], list[int], list[float]]:
    """A ChunkedSeries: labels (1: a Label, its name 1 and value 2) and chunks (2: a Chunk,
    its encoding 3 and data 4)."""
    found: dict[str, str] = {}
    times: list[int] = []
    values: list[float] = []
    for number, field in _fields(message):
        if number == 1:
            pair = labels.get(field)
            if pair is None:
                parts = dict(_fields(field))
                pair = labels[field] = (parts.get(1, b"").decode(), parts.get(2, b"").decode())
            found[pair[0]] = pair[1]
        elif number == 2:
            first, last, data = _xor_chunk(field)
            if last < lo or first > hi:
                continue
            before = len(times)
            xor_samples(data, times, values, floats, hi)
            if before and len(times) > before and times[before] <= times[before - 1]:
                times, values = _ordered(times, values)  # overlapping chunks: rare
    return found, times, values


def _xor_chunk(chunk: bytes) -> tuple[int, int, bytes]:
    """The first and last time (ms) and the data of a Chunk message whose encoding is XOR:
    fields 1, 2 (int64), 3 (the encoding), 4 (the data)."""
    pos, data, encoding, times = 0, b"", 0, [-2**63, 2**63]
    while pos < len(chunk):
        key, pos = _read_uvarint(chunk, pos)
        if key == 3 << 3:
            encoding, pos = _read_uvarint(chunk, pos)
        elif key in (1 << 3, 2 << 3):
            value, pos = _read_uvarint(chunk, pos)
            times[(key >> 3) - 1] = value - (value >= 1 << 63) * 2**64
        elif key & 7 == 0:
            pos = _read_uvarint(chunk, pos)[1]
        elif key == 4 << 3 | 2:
            size, pos = _read_uvarint(chunk, pos)
            data = chunk[pos:pos + size]
            pos += size
        else:
            raise ReadError(f"an unexpected field {key >> 3} in a chunk")
    if encoding != XOR:
        raise ReadError(f"a chunk of encoding {encoding}, not XOR")
    return times[0], times[1], data


def _ordered(times: list[int], values: list[float]) -> tuple[list[int], list[float]]:
    """Samples sorted by time, one per timestamp (the earlier chunk's)."""
    kept: dict[int, float] = {}
    for t, v in zip(times, values, strict=True):
        kept.setdefault(t, v)
    order = sorted(kept)
    return order, [kept[t] for t in order]
