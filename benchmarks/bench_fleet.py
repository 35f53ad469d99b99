"""The collector's commands on a synthetic fleet, against the floor of fetching the same samples.

    python benchmarks/bench_fleet.py --workers 100 300 1000 --gpus 8 --hours 1 --interval 15 \
        --rounds 3 --out /tmp/fleet.md

For each fleet size, fleet_data.py's fleet (every series the exporter and the scheduler
preload write; backfilled once with promtool and cached, as bench_dashboards.py's) is served
by a Prometheus with its default query limits, and each command (``export`` with its default
columns, ``peaks``, ``report --out``; the real CLI, ``--quiet``) runs once with Prometheus'
query log on (its raw samples by queries, the default on Prometheus). Its **floor** is
derived from that log: every query it sent, with its
``worker`` matcher removed, deduplicated, and split into one query per metric name of its
``__name__`` matcher, i.e. the very samples the command read (the same names, windows and
evaluation times, whole-cluster), in the fewest queries Prometheus answers within its limits
(one metric of 8,000 GPUs for an hour at 15 s is 1.9 M samples), fetched with ``requests``
and decoded with ``resp.json()``, nothing else. Queries that name no worker (discovery, the
jobs) are sent as they are.

Then over ``--rounds``, in rotating order, each command, the same with ``--read-api
remote-read`` (raw samples by Prometheus' remote read, which its query log does not show)
and its floor (and with ``--before
REF`` the command of git revision REF, bench_collector's before_tree; ``--at REF`` makes the
commands REF's, so that the checkout may change while it runs) in a fresh process
(bench_collector's LAUNCHER: each peak RSS its own): wall time, peak RSS, the queries
Prometheus counted and the CPU seconds Prometheus spent answering
(``process_cpu_seconds_total`` before and after). Prints (and with ``--out`` writes) a
markdown table by fleet size: medians, ratios to the floor.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_collector import (  # a sibling script, not a package
    READ_TIMEOUT,
    api_queries,
    before_tree,
    imports_from,
    mib,
    run_child,
    served_fixture,
    versions,
)

STOCK_ARGS = ["--storage.tsdb.retention.time=100y"]  # otherwise Prometheus' own defaults
COMMANDS = ("export", "peaks", "report")
WORKER_MATCHER = re.compile(r',?worker=~?"(?:[^"\\]|\\.)*"')
NAME_REGEX = re.compile(r'\{__name__=~"((?:[^"\\]|\\.)*)"')
PLAIN_NAMES = re.compile(r"^[a-z_:][a-z0-9_:]*(\|[a-z_:][a-z0-9_:]*)*$")


def floor_plan(logged: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """The floor's queries from a command's logged query parameters: without their worker
    matcher, deduplicated, one metric name each where the ``__name__`` matcher is a plain
    alternation of names."""
    seen: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for params in logged:
        query = params["query"]
        whole = WORKER_MATCHER.sub("", query).replace("{,", "{")
        found = NAME_REGEX.search(whole) if whole != query else None
        names = found.group(1).split("|") if found and PLAIN_NAMES.match(found.group(1)) \
            else [None]
        for name in names:
            one = whole if name is None else \
                whole[:found.start()] + f'{{__name__="{name}"' + whole[found.end():]
            asked = {**params, "query": one}
            seen.setdefault(tuple(sorted(asked.items())), asked)
    return list(seen.values())


def run_floor(url: str, plan_file: str) -> None:
    """The child: every query of the plan with plain requests; the JSON decoded, dropped."""
    import requests

    plan = json.loads(Path(plan_file).read_text())
    samples = 0
    with requests.Session() as session:
        for logged in plan:  # as the query log writes them: an instant query has step 0
            if logged.get("step"):
                path, params = "query_range", logged
            else:
                path, params = "query", {"query": logged["query"], "time": logged["start"]}
            resp = session.post(f"{url}/api/v1/{path}", data=params, timeout=(5, READ_TIMEOUT))
            resp.raise_for_status()
            result = resp.json()["data"]["result"]
            samples += sum(len(r.get("values", ())) for r in result) if isinstance(
                result, list) else 0
    print(json.dumps({"queries": len(plan), "samples": samples}))


def prometheus_cpu(url: str) -> float:
    """CPU seconds the Prometheus process has used."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("process_cpu_seconds_total "):
                return float(line.split()[1])
    raise SystemExit("Prometheus reports no process_cpu_seconds_total")


def query_log(prom, path: Path | None) -> None:
    """Turn Prometheus' query log on (into ``path``) or off, by its config and a reload."""
    import yaml

    config = prom.data_dir.parent / "prometheus.yml"
    body = yaml.safe_load(config.read_text())
    body["global"].pop("query_log_file", None)
    if path is not None:
        body["global"]["query_log_file"] = str(path)
    config.write_text(yaml.safe_dump(body))
    prom.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the reload is applied when the config says so
        with urllib.request.urlopen(f"{prom.url}/api/v1/status/config", timeout=30) as resp:
            shown = json.loads(resp.read())["data"]["yaml"]
        if (path is not None) == ("query_log_file" in shown):
            return
        time.sleep(0.1)
    raise SystemExit("Prometheus did not reload its configuration")


def fleet_size(workers: int, args: argparse.Namespace, work: Path) -> list[dict]:
    """Every command and its floor at one fleet size: one row per command."""
    rows = []
    with served_fixture(workers, args.gpus, args.hours, args.cache, work / f"w{workers}",
                        interval=args.interval, fleet=True, prom_args=STOCK_ARGS
                        ) as (fix, prom):
        base = [sys.executable, "-m", "dask_metrics.collector"]
        span = ["--prometheus", prom.url, "--since", str(fix.t0), "--until", str(fix.t1),
                "--quiet"]
        out = work / "out"
        commands = {"export": [*base, "export", *span, "--out", str(out / "export")],
                    "peaks": [*base, "peaks", *span],
                    "report": [*base, "report", *span, "--out", str(out / "report")]}
        arms: dict[str, list[str]] = {}
        paths: dict[str, Path] = {}
        for name in args.commands:
            if args.at:
                paths[name] = args.at_tree
            log = work / f"queries-{name}.jsonl"
            query_log(prom, log)
            run_child([*commands[name], "--read-api", "query"], work / "child.log",
                      paths.get(name))  # --at REF's default may be another
            query_log(prom, None)
            logged = [json.loads(line)["params"] for line in log.read_text().splitlines()
                      if line.strip()]
            plan = work / f"floor-{name}.json"
            plan.write_text(json.dumps(floor_plan(logged)))
            arms[name] = commands[name]
            arms[f"{name} remote read"] = [*commands[name], "--read-api", "remote-read"]
            if name in paths:
                paths[f"{name} remote read"] = paths[name]
            arms[f"{name} floor"] = [sys.executable, str(Path(__file__).resolve()), "--floor",
                                     prom.url, str(plan)]
            if args.before:
                arms[f"{name} before"] = commands[name]
                paths[f"{name} before"] = args.before_tree
        taken: dict[str, dict[str, list[float]]] = {n: {} for n in arms}
        names = list(arms)
        for r in range(args.rounds):
            print(f"{workers} workers, round {r + 1}/{args.rounds}", file=sys.stderr)
            for name in names[r % len(names):] + names[:r % len(names)]:
                asked, cpu = api_queries(prom.url), prometheus_cpu(prom.url)
                wall, rss, _ = run_child(arms[name], work / "child.log", paths.get(name))
                got = taken[name]
                got.setdefault("wall", []).append(wall)
                got.setdefault("rss", []).append(rss)
                got.setdefault("queries", []).append(api_queries(prom.url) - asked - 1)
                got.setdefault("cpu", []).append(prometheus_cpu(prom.url) - cpu)
                print(f"  {name}: {wall:.2f} s, {mib(rss)} MiB", file=sys.stderr)
        for name in args.commands:
            ours, floor = taken[name], taken[f"{name} floor"]
            med = {k: statistics.median(v) for k, v in ours.items()}
            fmed = {k: statistics.median(v) for k, v in floor.items()}
            before = taken.get(f"{name} before", {}).get("wall")
            remote = {k: statistics.median(v) for k, v in taken[f"{name} remote read"].items()}
            rows.append({"workers": workers, "command": name, "samples": fix.samples,
                         "before": statistics.median(before) if before else None,
                         "remote": remote["wall"], "remote_cpu": remote["cpu"],
                         "remote_rss": max(taken[f"{name} remote read"]["rss"]),
                         "wall": med["wall"], "floor": fmed["wall"],
                         "ratio": med["wall"] / fmed["wall"], "rss": max(ours["rss"]),
                         "floor_rss": max(floor["rss"]), "queries": med["queries"],
                         "floor_queries": fmed["queries"], "cpu": med["cpu"],
                         "floor_cpu": fmed["cpu"]})
    return rows


def table(rows: Sequence[dict], args: argparse.Namespace) -> str:
    """The markdown table of every row."""
    from tests.prometheus_helpers import PROMETHEUS

    ver = versions(str(PROMETHEUS))
    lines = [f"Fleets of {', '.join(str(w) for w in args.workers)} workers x {args.gpus} GPUs, "
             f"{args.hours:g} h at {args.interval} s (fleet_data.py), Prometheus "
             f"{ver['prometheus']} with its default limits; median of {args.rounds} rounds, "
             "max RSS of any round.", "",
             "| workers (samples) | command | wall s | floor s | x floor | --read-api "
             "remote-read s (x floor) | before s (x floor) | max RSS MiB (remote read; floor) "
             "| queries (floor) | Prometheus CPU s (remote read; floor) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        before = "" if r["before"] is None else \
            f"{r['before']:.2f} ({r['before'] / r['floor']:.2f})"
        lines.append(f"| {r['workers']:,} ({r['samples'] / 1e6:.1f} M) | {r['command']} | "
                     f"{r['wall']:.2f} | {r['floor']:.2f} | {r['ratio']:.2f} | "
                     f"{r['remote']:.2f} ({r['remote'] / r['floor']:.2f}) | {before} | "
                     f"{mib(r['rss'])} ({mib(r['remote_rss'])}; {mib(r['floor_rss'])}) | "
                     f"{r['queries']:.0f} ({r['floor_queries']:.0f}) | {r['cpu']:.1f} "
                     f"({r['remote_cpu']:.1f}; {r['floor_cpu']:.1f}) |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--floor"]:
        run_floor(*argv[1:3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--interval", type=int, default=15, help="scrape interval, seconds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commands", nargs="+", choices=COMMANDS, default=list(COMMANDS))
    parser.add_argument("--at", metavar="REF",
                        help="run the commands of git revision REF, not of this checkout")
    parser.add_argument("--before", metavar="REF",
                        help="also run each command of git revision REF (before a change)")
    parser.add_argument("--cache", help="where the backfilled fleets are kept")
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        for ref, name in ((args.at, "at_tree"), (args.before, "before_tree")):
            if ref:
                setattr(args, name, before_tree(ref, Path(tmp) / name))
                imports_from(getattr(args, name), Path(tmp))
        for workers in args.workers:
            rows += fleet_size(workers, args, Path(tmp))
    text = table(rows, args)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
