#!/usr/bin/env python
"""The ways a fleet's GPU samples can be fetched, side by side: what an export can be no
faster than, whichever way it reads.

    python benchmarks/bench_floors.py --workers 100 --rounds 3

The same samples (the export's GPU series, every metric of the default columns and of
gpu_by_prefix, the whole cluster, in one-hour chunks) read by each arm in a fresh process:

- ``json``: the collector's way, an instant query of a range selector per metric and chunk
  (``m{dask_cluster="fleet"}[3600001ms]``), its JSON decoded with orjson (the collector's
  decoder); ``json-stdlib``: the same decoded with the standard library's json;
- ``remote-read``: Prometheus' remote-read API (``/api/v1/read``) with streamed XOR chunks,
  one query per metric and chunk, every frame read and its protobuf parsed, the chunks'
  bytes kept undecoded: what the transfer costs without turning the chunks into numbers;
  ``remote-read-decoded``: the same with every XOR chunk decoded in Python (no protobuf or
  snappy library: the request is encoded by hand, the chunks by Prometheus' XOR rules);
- ``vm-export``: VictoriaMetrics' ``/api/v1/export`` (JSON lines) of the very same blocks
  (through ``vmctl``), where victoria-metrics and vmctl are installed.

Each arm reports the samples it read and their sum; every arm that decodes must match the
``json`` arm's (the remote-read arms that keep the chunks count their samples from the chunk
headers). The table: wall time and Prometheus CPU per arm, median of the rounds, and each as
a ratio to ``json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import struct
import sys
import tempfile
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_collector import ROOT, mib, run_child, served_fixture  # sibling scripts
from bench_fleet import STOCK_ARGS, prometheus_cpu
from fleet_data import CLUSTER

CHUNK_MS = 3_600_000
ARMS = ("json", "json-stdlib", "remote-read", "remote-read-decoded", "vm-export")


def export_metrics() -> list[str]:
    """The GPU series an export of the default columns reads, gpu_by_prefix's counters too."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from dask_metrics.collector.columns import select, source_metrics
    from dask_metrics.collector.fetch import ATTRIBUTION_METRICS

    return sorted({*source_metrics(select(None)), *ATTRIBUTION_METRICS})


def plan(metrics: list[str], t0: int, t1: int) -> list[tuple[str, int, int]]:
    """(metric, lo, hi) in ms, [lo, hi] inclusive: every metric in one-hour chunks."""
    lo, hi = t0 * 1000, t1 * 1000
    edges = [*range(lo, hi, CHUNK_MS), hi + 1]
    return [(m, a, b - 1) for m in metrics for a, b in pairwise(edges)]


# ---- the arms (each runs in a child process) ------------------------------------------------


def arm_json(url: str, steps: list[tuple[str, int, int]], loads: str) -> tuple[int, float]:
    import orjson
    import requests

    decode = orjson.loads if loads == "orjson" else json.loads
    samples, total = 0, 0.0
    with requests.Session() as session:
        for metric, lo, hi in steps:
            query = f'{metric}{{dask_cluster="{CLUSTER}"}}[{hi - lo + 1}ms]'
            resp = session.post(f"{url}/api/v1/query", data={"query": query,
                                                             "time": f"{hi / 1000:.3f}"},
                                timeout=(5, 300))
            resp.raise_for_status()
            for series in decode(resp.content)["data"]["result"]:
                for t, v in series["values"]:
                    if lo <= t * 1000 <= hi:
                        samples += 1
                        total += float(v)
    return samples, total


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _uvarint(number << 3 | 2) + _uvarint(len(payload)) + payload


def _varint_field(number: int, value: int) -> bytes:
    return _uvarint(number << 3) + _uvarint(value)


def read_request(metric: str, lo: int, hi: int) -> bytes:
    """prompb.ReadRequest of one query (``__name__`` and the cluster, equal), streamed XOR
    chunks accepted, snappy-framed as one literal (a valid snappy block, uncompressed)."""
    matchers = b"".join(_field(3, _field(2, name.encode()) + _field(3, value.encode()))
                        for name, value in (("__name__", metric), ("dask_cluster", CLUSTER)))
    query = _varint_field(1, lo) + _varint_field(2, hi) + matchers
    body = _field(1, query) + _field(2, _uvarint(1))  # accepted_response_types: [1]
    n = len(body) - 1
    size = (n.bit_length() + 7) // 8 or 1
    literal = bytes([(59 + size) << 2]) + n.to_bytes(size, "little")
    return _uvarint(len(body)) + literal + body


def _fields(data: bytes, pos: int = 0, end: int | None = None) -> Iterator[tuple[int, object]]:
    """(field number, value) of a protobuf message: an int or a memoryview of bytes."""
    end = len(data) if end is None else end
    view = memoryview(data)
    while pos < end:
        key, pos = _read_uvarint(data, pos)
        kind = key & 7
        if kind == 0:
            value, pos = _read_uvarint(data, pos)
            yield key >> 3, value
        elif kind == 2:
            size, pos = _read_uvarint(data, pos)
            yield key >> 3, view[pos:pos + size]
            pos += size
        else:
            raise ValueError(f"wire type {kind}")


def _read_uvarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def frames(body: Iterator[bytes]) -> Iterator[bytes]:
    """The messages of a streamed remote-read answer: uvarint size, CRC32C, message."""
    buf = b""
    for part in body:
        buf += part
        while buf:
            try:
                size, pos = _read_uvarint(buf, 0)
            except IndexError:
                break
            if len(buf) < pos + 4 + size:
                break
            yield buf[pos + 4:pos + 4 + size]
            buf = buf[pos + 4 + size:]


class _Bits:
    def __init__(self, data: bytes) -> None:
        self.n, self.big, self.pos = len(data) * 8, int.from_bytes(data, "big"), 0

    def read(self, k: int) -> int:
        self.pos += k
        return (self.big >> (self.n - self.pos)) & ((1 << k) - 1)

    def byte_varint(self, signed: bool) -> int:
        value = shift = 0
        while True:
            byte = self.read(8)
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        return (value >> 1) ^ -(value & 1) if signed else value


def xor_chunk(data: bytes) -> Iterator[tuple[int, float]]:
    """The (ms, value) samples of one Prometheus XOR chunk (tsdb/chunkenc/xor.go): a sample
    count, the first time (varint) and value (64 bits), the second time's delta (uvarint),
    then deltas of deltas; each value XORed with the one before."""
    count = int.from_bytes(data[:2], "big")
    bits = _Bits(data[2:])
    t = value = delta = leading = trailing = 0
    for i in range(count):
        if i == 0:
            t, value = bits.byte_varint(True), bits.read(64)
            yield t, struct.unpack(">d", value.to_bytes(8, "big"))[0]
            continue
        if i == 1:
            delta = bits.byte_varint(False)
        elif bits.read(1):
            delta += _dod(bits)
        t += delta
        if bits.read(1):
            if bits.read(1):
                leading, sig = bits.read(5), bits.read(6) or 64
                trailing = 64 - leading - sig
            value ^= bits.read(64 - leading - trailing) << trailing
        yield t, struct.unpack(">d", value.to_bytes(8, "big"))[0]


def _dod(bits: _Bits) -> int:
    """A delta of deltas after its first '1' bit: '0' + 14 bits, '10' + 17, '110' + 20,
    '111' + 64."""
    for size in (14, 17, 20):
        if not bits.read(1):
            raw = bits.read(size)
            return raw - (1 << size) if raw > (1 << (size - 1)) else raw
    raw = bits.read(64)
    return raw - (1 << 64) if raw >= 1 << 63 else raw


def arm_remote_read(url: str, steps: list[tuple[str, int, int]], decoded: bool
                    ) -> tuple[int, float]:
    import requests

    samples, total = 0, 0.0
    headers = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
               "X-Prometheus-Remote-Read-Version": "0.1.0"}
    with requests.Session() as session:
        for metric, lo, hi in steps:
            resp = session.post(f"{url}/api/v1/read", data=read_request(metric, lo, hi),
                                headers=headers, stream=True, timeout=(5, 300))
            resp.raise_for_status()
            for message in frames(resp.iter_content(1 << 16)):
                for number, series in _fields(message):
                    if number != 1:
                        continue
                    for inner, chunk in _fields(bytes(series)):  # type: ignore[arg-type]
                        if inner != 2:
                            continue
                        data = next(bytes(v) for k, v in _fields(bytes(chunk))  # type: ignore[arg-type]
                                    if k == 4)
                        if not decoded:
                            samples += int.from_bytes(data[:2], "big")
                            continue
                        for t, v in xor_chunk(data):
                            if lo <= t <= hi:
                                samples += 1
                                total += v
    return samples, total


def arm_vm_export(url: str, steps: list[tuple[str, int, int]]) -> tuple[int, float]:
    import orjson
    import requests

    samples, total = 0, 0.0
    with requests.Session() as session:
        for metric, lo, hi in steps:
            resp = session.get(f"{url}/api/v1/export", params={
                "match[]": f'{metric}{{dask_cluster="{CLUSTER}"}}',
                "start": f"{lo / 1000:.3f}", "end": f"{hi / 1000:.3f}"}, timeout=(5, 300))
            resp.raise_for_status()
            for line in resp.content.splitlines():
                row = orjson.loads(line)
                for t, v in zip(row["timestamps"], row["values"], strict=True):
                    if lo <= t <= hi:
                        samples += 1
                        total += float(v)
    return samples, total


def run_arm(arm: str, url: str, plan_file: str) -> None:
    steps = [tuple(s) for s in json.loads(Path(plan_file).read_text())]
    if arm in ("json", "json-stdlib"):
        found = arm_json(url, steps, "orjson" if arm == "json" else "json")
    elif arm.startswith("remote-read"):
        found = arm_remote_read(url, steps, arm == "remote-read-decoded")
    else:
        found = arm_vm_export(url, steps)
    print(json.dumps({"samples": found[0], "sum": found[1]}))


# ---- the parent ------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--interval", type=int, default=15, help="scrape interval, seconds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--cache", help="where the backfilled fleets are kept")
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--plan", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        run_arm(args.arm, args.url, args.plan)
        return
    arms = [a for a in args.arms if a != "vm-export" or shutil.which("vmctl")]
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.prometheus_helpers import run_victoria_metrics

    work = Path(tempfile.mkdtemp(prefix="bench-floors-"))
    try:
        with served_fixture(args.workers, args.gpus, args.hours, args.cache, work,
                            interval=args.interval, fleet=True, prom_args=STOCK_ARGS
                            ) as (fix, prom):
            plan_file = work / "plan.json"
            plan_file.write_text(json.dumps(plan(export_metrics(), fix.t0, fix.t1)))
            urls = {arm: prom.url for arm in arms}
            vm = None
            if "vm-export" in arms:
                from bench_stores import vm_import

                vm = run_victoria_metrics(work / "vm")
                urls["vm-export"] = vm.__enter__().url
                print(f"vmctl: {vm_import(fix.blocks, urls['vm-export']):.0f} s",
                      file=sys.stderr)
            taken: dict[str, dict[str, list[float]]] = {a: {} for a in arms}
            found: dict[str, dict] = {}
            for r in range(args.rounds):
                for arm in arms[r % len(arms):] + arms[:r % len(arms)]:
                    cpu = prometheus_cpu(prom.url)
                    wall, rss, out = run_child(
                        [sys.executable, str(Path(__file__).resolve()), "--arm", arm,
                         "--url", urls[arm], "--plan", str(plan_file)], work / "arm.log")
                    got = taken[arm]
                    got.setdefault("wall", []).append(wall)
                    got.setdefault("rss", []).append(rss)
                    got.setdefault("cpu", []).append(prometheus_cpu(prom.url) - cpu)
                    found[arm] = json.loads(out)
                    print(f"  {arm}: {wall:.2f} s, {mib(rss)} MiB, {found[arm]}",
                          file=sys.stderr)
            if vm is not None:
                vm.__exit__(None, None, None)
        base = {k: statistics.median(v) for k, v in taken["json"].items()}
        truth = found["json"]
        print(f"{args.workers} workers x {args.gpus} GPUs, {args.hours:g} h at {args.interval}"
              f" s ({fix.samples:,} samples in all; these arms read {truth['samples']:,}); "
              f"median of {args.rounds} rounds\n")
        print("| arm | wall s | x json | Prometheus CPU s | x json | max RSS MiB | samples, "
              "sum as json's |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for arm in arms:
            med = {k: statistics.median(v) for k, v in taken[arm].items()}
            mine = found[arm]
            exact = mine["samples"] == truth["samples"] and (
                arm == "remote-read" or abs(mine["sum"] - truth["sum"])
                <= 1e-9 * abs(truth["sum"]))
            cpu = "" if arm == "vm-export" else f"{med['cpu']:.1f}"
            ratio = "" if arm == "vm-export" else f"{med['cpu'] / base['cpu']:.2f}"
            print(f"| {arm} | {med['wall']:.2f} | {med['wall'] / base['wall']:.2f} | {cpu} | "
                  f"{ratio} | {mib(max(taken[arm]['rss']))} | "
                  f"{'yes' if exact else 'NO'}{' (count only)' if arm == 'remote-read' else ''} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
