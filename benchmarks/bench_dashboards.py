"""Every Grafana panel's query against a synthetic fleet, as Grafana sends it.

    python benchmarks/bench_dashboards.py --workers 1000 --gpus 8 --hours 1 --interval 15 \
        --rounds 3 --out /tmp/dashboards.md
    python benchmarks/bench_dashboards.py ... \
        --rules deploy/helm/dask-metrics/files/prometheus-rules.yaml

The fleet (fleet_data.py: every series the exporter and the scheduler preload write) is
backfilled once with promtool and served by a Prometheus with its default query limits.
With ``--rules``, the rules file's recording rules are backfilled over the same range
(``promtool tsdb create-blocks-from rules``, as a Prometheus that had them loaded all along
would hold them) and served too.

Each dashboard of grafana/dashboards/ is read as Grafana would open it: its variables at
their defaults (All for workers, GPUs and jobs, the cluster the fleet's), the time range its
default (the last ``--hours`` of data), ``$__interval`` the range over ``--width`` points,
at least the scrape interval, and ``$__rate_interval`` max(``$__interval`` + scrape
interval, 4 scrape intervals), as Grafana computes them. Every target is sent as Grafana's
Prometheus data source sends it (``query_range`` with that step, or an instant ``query`` at
the range's end), and so is every variable's ``label_values()``; each is timed over
``--rounds`` (median, the full answer read), with the series and points it returned.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_collector import ROOT, served_fixture, versions  # a sibling script, not a package

DASHBOARDS = ROOT / "grafana" / "dashboards"
STOCK_ARGS = ["--storage.tsdb.retention.time=100y"]  # otherwise Prometheus' own defaults
BUDGET_S = 2.0
LABEL_VALUES = re.compile(r"label_values\((?:(.*),\s*)?(\w+)\)$")


@dataclass(frozen=True)
class Query:
    dashboard: str
    panel: str
    ref: str
    kind: str  # "range", "instant" or "variable"
    expr: str


@dataclass(frozen=True)
class Timing:
    seconds: float
    series: int
    points: int
    kib: float
    error: str


def grafana_intervals(range_s: float, scrape_s: float, width: int) -> tuple[float, float]:
    """($__interval, $__rate_interval) in seconds for a panel ``width`` points wide."""
    interval = max(scrape_s, math.ceil(range_s / width))
    return interval, max(interval + scrape_s, 4 * scrape_s)


def expand(expr: str, variables: dict[str, str], range_s: float, interval: float,
           rate_interval: float) -> str:
    """``expr`` with Grafana's variables replaced, the longest names first."""
    values = {
        "__rate_interval": f"{rate_interval:g}s", "__interval_ms": f"{interval * 1000:g}",
        "__interval": f"{interval:g}s", "__range_ms": f"{range_s * 1000:g}",
        "__range_s": f"{range_s:g}", "__range": f"{range_s:g}s", **variables,
    }
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return expr


def natural(value: str) -> list[Any]:
    """Grafana's natural sort key (sort 3): w-2 before w-10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", value)]


def defaults(dashboard: dict[str, Any], cluster: str,
             values: Callable[[str], list[str]]) -> dict[str, str]:
    """Each variable's value as the dashboard opens, in order (a variable's query may use
    the ones before it): All (its allValue) where it has one, a custom variable's current
    value, the cluster ``cluster``, else the first of ``values(query)`` sorted as the
    variable says."""
    out: dict[str, str] = {}
    for var in dashboard.get("templating", {}).get("list", []):
        name = var["name"]
        if name == "dask_cluster":
            out[name] = cluster
        elif var.get("includeAll"):
            out[name] = var.get("allValue") or ".*"
        elif var.get("type") == "custom":
            out[name] = var["current"]["value"]
        elif var.get("type") == "query":
            found = values(expand(var["definition"], out, 0, 0, 0))
            if not found:
                raise SystemExit(f"variable {name} has no value: {var['definition']}")
            out[name] = sorted(found, key=natural if var.get("sort") == 3 else str)[0]
    return out


def panels(items: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


def dashboard_queries(folder: Path, cluster: str, range_s: float, interval: float,
                      rate_interval: float, values: Callable[[str], list[str]]) -> list[Query]:
    """Every query the dashboards in ``folder`` send when opened (``values``: a variable
    query's answer)."""
    out: list[Query] = []
    for path in sorted(folder.glob("*.json")):
        board = json.loads(path.read_text())
        variables = defaults(board, cluster, values)
        name = path.stem

        def text(expr: str, variables: dict[str, str] = variables) -> str:
            return expand(expr, variables, range_s, interval, rate_interval)

        for var in board.get("templating", {}).get("list", []):
            if var.get("type") == "query":
                q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
                out.append(Query(name, f"${var['name']}", "", "variable", text(q)))
        for p in panels(board.get("panels", [])):
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append(Query(name, p.get("title", ""), t.get("refId", ""),
                                     "instant" if t.get("instant") else "range",
                                     text(t["expr"])))
    return out


def label_values(session: requests.Session, url: str, expr: str, start: float, end: float
                 ) -> requests.Response:
    """``label_values([selector, ]label)`` as Grafana's Prometheus data source asks it."""
    m = LABEL_VALUES.match(expr.strip())
    if not m:
        raise SystemExit(f"not a label_values() variable: {expr}")
    params: dict[str, Any] = {"start": start, "end": end}
    if m.group(1):
        params["match[]"] = m.group(1)
    return session.get(f"{url}/api/v1/label/{m.group(2)}/values", params=params, timeout=300)


def run(session: requests.Session, url: str, q: Query, start: float, end: float,
        step: float) -> Timing:
    """Send ``q`` as Grafana would; time it until the whole answer is read."""
    began = time.perf_counter()
    if q.kind == "variable":
        resp = label_values(session, url, q.expr, start, end)
    elif q.kind == "instant":
        resp = session.post(f"{url}/api/v1/query", data={"query": q.expr, "time": end},
                            timeout=300)
    else:
        resp = session.post(f"{url}/api/v1/query_range",
                            data={"query": q.expr, "start": start, "end": end, "step": step},
                            timeout=300)
    body = resp.content
    seconds = time.perf_counter() - began
    answer = resp.json()
    if answer.get("status") != "success":
        return Timing(seconds, 0, 0, len(body) / 1024, answer.get("error", resp.reason)[:120])
    data = answer["data"]
    if q.kind == "variable":
        return Timing(seconds, len(data), len(data), len(body) / 1024, "")
    result = data["result"] if isinstance(data["result"], list) else [data["result"]]
    points = sum(len(r.get("values", ())) or 1 for r in result)
    return Timing(seconds, len(result), points, len(body) / 1024, "")


def rule_levels(rules: Path) -> list[dict[str, Any]]:
    """The recording rules of ``rules`` as rules files by level: a record that uses another
    record comes a level after it. promtool backfills each rule from what the server holds,
    so a level is backfilled once the levels before it are served (a running Prometheus
    evaluates a group's rules in order, each seeing the records before it)."""
    groups = yaml.safe_load(rules.read_text())["groups"]
    records = [(g, r) for g in groups for r in g["rules"] if "record" in r]
    level: dict[str, int] = {}
    for _, rule in records:  # a record only uses the ones written before it in its group
        used = [level[name] for name in level if re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])",
                                                           rule["expr"])]
        level[rule["record"]] = 1 + max(used, default=-1)
    files: list[dict[str, Any]] = []
    for n in range(max(level.values(), default=-1) + 1):
        files.append({"groups": [
            {**{k: v for k, v in g.items() if k != "rules"},
             "rules": [r for r in g["rules"] if level.get(r.get("record", "")) == n]}
            for g in groups if any(level.get(r.get("record", "")) == n for r in g["rules"])]})
    return files


def backfill_rules(rules: Path, blocks: Path, work: Path, start: float, end: float) -> float:
    """Add to ``blocks`` the recording rules of ``rules`` evaluated over [start, end], level
    by level (rule_levels), each level from a Prometheus serving ``blocks`` as they are;
    return the seconds it took."""
    began = time.perf_counter()
    for n, level in enumerate(rule_levels(rules)):
        path = work / f"rules-{n}.yaml"
        path.write_text(yaml.safe_dump(level))
        with served_blocks(blocks, work / f"rules-{n}") as prom:
            done = subprocess.run(
                ["promtool", "tsdb", "create-blocks-from", "rules", "--quiet",
                 f"--start={int(start)}", f"--end={int(end)}", f"--url={prom.url}",
                 f"--output-dir={work / f'rules-{n}-blocks'}", str(path)],
                capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"promtool rules backfill failed: {done.stderr[-2000:]}")
        for block in (work / f"rules-{n}-blocks").iterdir():
            shutil.move(block, blocks / block.name)
    return time.perf_counter() - began


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--interval", type=int, default=15, help="scrape interval, seconds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--width", type=int, default=1000, help="points a panel asks for")
    ap.add_argument("--rules", type=Path, help="a rules file whose recording rules to backfill")
    ap.add_argument("--dashboards", type=Path, default=DASHBOARDS)
    ap.add_argument("--cache", help="where the backfilled fleet is kept")
    ap.add_argument("--out", type=Path, help="also write the markdown here")
    args = ap.parse_args(argv)

    import fleet_data

    range_s = args.hours * 3600
    interval, rate_interval = grafana_intervals(range_s, args.interval, args.width)

    def measure(url: str, t1: float) -> dict[Query, list[Timing]]:
        session = requests.Session()
        queries = dashboard_queries(
            args.dashboards, fleet_data.CLUSTER, range_s, interval, rate_interval,
            lambda expr: label_values(session, url, expr, t1 - range_s, t1).json()["data"])
        timings: dict[Query, list[Timing]] = {q: [] for q in queries}
        for _ in range(args.rounds):
            for q in queries:
                timings[q].append(run(session, url, q, t1 - range_s, t1, interval))
        return timings

    rules_s = None
    with tempfile.TemporaryDirectory(prefix="bench-dashboards-") as tmp:
        work = Path(tmp)
        with served_fixture(args.workers, args.gpus, args.hours, args.cache, work,
                            interval=args.interval, fleet=True,
                            prom_args=STOCK_ARGS) as (fix, prom):
            if not args.rules:
                timings = measure(prom.url, fix.t1)
        if args.rules:
            blocks = work / "blocks"
            shutil.copytree(fix.blocks, blocks)
            rules_s = backfill_rules(args.rules, blocks, work, fix.t0, fix.t1)
            with served_blocks(blocks, work / "served") as prom:
                timings = measure(prom.url, fix.t1)
    lines = report(args, fix, timings, interval, rate_interval, rules_s)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    over = [q for q, ts in timings.items() if statistics.median(t.seconds for t in ts) > BUDGET_S
            or ts[-1].error]
    return 1 if over else 0


def served_blocks(blocks: Path, work: Path) -> Any:
    """A Prometheus with its default query limits over ``blocks``."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.prometheus_helpers import run_prometheus

    return run_prometheus(work, blocks=blocks, extra_args=STOCK_ARGS, ready_timeout=300)


def report(args: argparse.Namespace, fix: Any, timings: dict[Query, list[Timing]],
           interval: float, rate_interval: float, rules_s: float | None) -> list[str]:
    ver = versions("prometheus")
    built = (f"built in {fix.seconds_to_build:.0f} s" if fix.seconds_to_build is not None
             else "from the cache")
    lines = [
        f"{args.workers} workers x {args.gpus} GPUs, {args.hours:g} h at {args.interval} s "
        f"({fix.samples:,} samples, {built}); Prometheus {ver['prometheus']} with its default "
        f"query limits; $__interval {interval:g}s, $__rate_interval {rate_interval:g}s; "
        f"recording rules: {args.rules or 'none'}"
        + (f" (backfilled in {rules_s:.0f} s)" if rules_s is not None else "")
        + f"; median of {args.rounds} rounds, nproc {ver['nproc']}.",
        "",
        "| dashboard | panel | ref | kind | s (median) | max s | series | points | KiB | error |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for q, ts in timings.items():
        med = statistics.median(t.seconds for t in ts)
        last = ts[-1]
        flag = " **over**" if med > BUDGET_S else ""
        lines.append(f"| {q.dashboard} | {q.panel} | {q.ref} | {q.kind} | {med:.3f}{flag} | "
                     f"{max(t.seconds for t in ts):.3f} | {last.series} | {last.points} | "
                     f"{last.kib:.0f} | {last.error} |")
    slow = sorted(timings.items(), key=lambda kv: -statistics.median(t.seconds for t in kv[1]))
    worst = statistics.median(t.seconds for t in slow[0][1]) if slow else 0.0
    over = sum(statistics.median(t.seconds for t in ts) > BUDGET_S for ts in timings.values())
    errors = sum(bool(ts[-1].error) for ts in timings.values())
    lines += ["", f"Queries: {len(timings)}; over {BUDGET_S:g} s: {over}; slowest {worst:.2f} s; "
              f"errors: {errors}."]
    return lines


if __name__ == "__main__":
    sys.exit(main())
