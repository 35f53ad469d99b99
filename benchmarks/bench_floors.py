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
  ``remote-read-decoded``: the same with every XOR chunk decoded by the collector's own
  decoder (collector/store/remote_read.py: pure Python, no protobuf or snappy library);
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
import sys
import tempfile
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
    from dask_metrics.collector.model.columns import select, source_metrics
    from dask_metrics.collector.query.scope import ATTRIBUTION_METRICS

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


def arm_remote_read(url: str, steps: list[tuple[str, int, int]], decoded: bool
                    ) -> tuple[int, float]:
    """Remote read by the collector's own request and decoder (collector/store/remote_read.py);
    undecoded, the samples are counted from the chunks' headers."""
    import requests

    from dask_metrics.collector.store.remote_read import (
        REQUEST_HEADERS,
        _fields,
        _read_uvarint,
        _xor_chunk,
        parse_selector,
        read_request,
        read_series,
    )

    samples, total = 0, 0.0
    with requests.Session() as session:
        for metric, lo, hi in steps:
            sel = parse_selector(f'{metric}{{dask_cluster="{CLUSTER}"}}')
            resp = session.post(f"{url}/api/v1/read", data=read_request(sel, lo, hi),  # type: ignore[arg-type]
                                headers=REQUEST_HEADERS, timeout=(5, 300))
            resp.raise_for_status()
            if decoded:
                for _, times, values in read_series(resp.content, lo, hi):
                    for t, v in zip(times, values, strict=True):
                        if lo <= t <= hi:
                            samples += 1
                            total += v
                continue
            content, pos = resp.content, 0
            while pos < len(content):
                size, pos = _read_uvarint(content, pos)
                for number, series in _fields(content[pos + 4:pos + 4 + size]):
                    if number == 1:
                        samples += sum(int.from_bytes(_xor_chunk(chunk)[2][:2], "big")
                                       for k, chunk in _fields(series) if k == 2)
                pos += 4 + size
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
