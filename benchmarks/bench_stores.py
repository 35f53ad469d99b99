#!/usr/bin/env python
"""The collector's commands on one synthetic fleet served by Prometheus and by VictoriaMetrics,
each with its default query limits, side by side.

    python benchmarks/bench_stores.py --workers 1000 --gpus 8 --hours 1 --interval 15

The fleet is bench_collector's (fleet_data.py's every series of the exporter and the
scheduler preload, backfilled once with promtool and cached); VictoriaMetrics (Debian package
victoria-metrics) gets the very same blocks through ``vmctl prometheus`` (timed). Each command
(``export``, ``peaks --json``, ``report``; the real CLI, ``--quiet``) runs once per store, in a
fresh process (bench_collector's LAUNCHER: wall time and its own peak RSS), each way of
reading raw samples (``--read-api query``, the default, and the store's faster API:
Prometheus' ``remote-read``, VictoriaMetrics' ``export``), and its output is compared
between them all: every file of the export, report.json (not the page, which shows the
store) and peaks' JSON, numbers to 1e-12, less what names the store (its URL, kind, note
and version) and the API that read it.

``--vm-limit N`` starts VictoriaMetrics with a limit of N series per query
(``-search.maxUniqueTimeseries``, ``-search.maxExportSeries``; its defaults are far above a
fleet's batches), and ``--before REF`` runs its commands of git revision REF too: each
VictoriaMetrics run also says how many queries the store answered and how many it refused
(its own ``vm_http_requests_total`` and ``vm_http_request_errors_total``).
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_collector import (  # a sibling script
    ROOT,
    before_tree,
    imports_from,
    mib,
    run_child,
    served_fixture,
)

READ_APIS = {"Prometheus": ("remote-read", "query"), "VictoriaMetrics": ("export", "query")}
COMMANDS = {"export": ["export", "--out", "{out}"], "peaks": ["peaks", "--json"],
            "report": ["report", "--out", "{out}"]}
# what names the store in a command's JSON, left out of the comparison
STORE_NAMED = frozenset({"prometheus", "store", "store_note", "versions", "raw_reads"})


def vm_import(blocks: Path, url: str) -> float:
    """``vmctl prometheus`` of ``blocks`` into ``url``, then a flush: seconds taken. vmctl
    asks for a terminal even when silent, so it gets one (``script``)."""
    began = time.perf_counter()
    vmctl = (f"vmctl prometheus -s --vm-disable-progress-bar --prom-snapshot {blocks} "
             f"--vm-addr {url} --prom-concurrency 2")
    subprocess.run(["script", "-qec", vmctl, "/dev/null"], check=True, capture_output=True)
    subprocess.run(["curl", "-sf", f"{url}/internal/force_flush"], check=True)
    return time.perf_counter() - began


def vm_requests(url: str) -> tuple[int, int]:
    """Queries VictoriaMetrics has answered and refused since it started (its query, query
    range and export APIs, and the label values and series APIs that list a label's values
    for a question over its limit on series), once its counters have settled: they lag
    the answers by a second or so."""
    now, then = _vm_counts(url), None
    while now != then:
        time.sleep(2)
        now, then = _vm_counts(url), now
    return now


def _vm_counts(url: str) -> tuple[int, int]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    counts = {"vm_http_requests_total": 0.0, "vm_http_request_errors_total": 0.0}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name in counts and any(f'path="/api/v1/{p}"' in rest
                                  for p in ("query", "query_range", "export", "series",
                                            "label/{}/values")):
            counts[name] += float(line.rsplit(" ", 1)[1])
    return round(counts["vm_http_requests_total"]), round(counts["vm_http_request_errors_total"])


@contextlib.contextmanager
def fresh_vm(workdir: Path, limits: list[str]) -> Iterator[object]:
    """VictoriaMetrics started again on the imported data, its caches left behind: 1.79
    answers a question over its limit on series once its series API has listed the same
    series (the tag filters cache), so an arm run after another's listing would be spared
    refusals that it meets on its own."""
    from tests.prometheus_helpers import run_victoria_metrics

    shutil.rmtree(workdir / "data" / "cache", ignore_errors=True)
    with run_victoria_metrics(workdir, extra_args=limits) as vm:
        yield vm


def alike(x: object, y: object) -> bool:
    """Two values alike: equal, or numbers within 1e-12 of each other (VictoriaMetrics keeps a
    float to about 15 significant digits: 74.80000000000001 comes back as 74.8); in JSON, what
    names the store left out."""
    if isinstance(x, dict) and isinstance(y, dict):
        x, y = ({k: v for k, v in d.items() if k not in STORE_NAMED} for d in (x, y))
        return x.keys() == y.keys() and all(alike(x[k], y[k]) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(map(alike, x, y))
    if x == y:
        return True
    try:
        return math.isclose(float(x), float(y), rel_tol=1e-12)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def same(a: Path, b: Path) -> bool:
    """Whether two outputs (a folder or a file: CSV or JSON) hold the same."""
    if a.is_dir():
        names = sorted(p.name for p in a.iterdir())
        return names == sorted(p.name for p in b.iterdir()) and all(
            same(a / n, b / n) for n in names)
    if filecmp.cmp(a, b, shallow=False):
        return True
    if a.suffix == ".json":
        return alike(json.loads(a.read_text()), json.loads(b.read_text()))
    rows = [[line.split(",") for line in p.read_text().splitlines()] for p in (a, b)]
    return alike(*rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--interval", type=int, default=15, help="scrape interval, seconds")
    parser.add_argument("--commands", nargs="+", choices=list(COMMANDS), default=list(COMMANDS))
    parser.add_argument("--cache", help="where the backfilled fleets are kept")
    parser.add_argument("--vm-limit", type=int, metavar="N",
                        help="VictoriaMetrics refuses queries of more than N series")
    parser.add_argument("--before", metavar="REF",
                        help="also run VictoriaMetrics' commands of git revision REF")
    args = parser.parse_args()
    if not shutil.which("vmctl") or not shutil.which("script"):
        raise SystemExit("needs vmctl (Debian package victoria-metrics) and script (util-linux)")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.prometheus_helpers import run_victoria_metrics

    work = Path(tempfile.mkdtemp(prefix="bench-stores-"))
    limits = [f"-search.{flag}={args.vm_limit}" for flag in
              ("maxUniqueTimeseries", "maxExportSeries")] if args.vm_limit else []
    trees: dict[str, Path | None] = {"": None}
    if args.before:
        trees[" before"] = before_tree(args.before, work / "before")
        imports_from(trees[" before"], work)
    try:
        with served_fixture(args.workers, args.gpus, args.hours, args.cache, work,
                            interval=args.interval, fleet=True) as (fix, prom), \
                contextlib.ExitStack() as held:
            with run_victoria_metrics(work / "vm", extra_args=limits) as vm:
                loaded = vm_import(fix.blocks, vm.url)
            print(f"vmctl: {fix.samples:,} samples in {loaded:.0f} s", file=sys.stderr)
            rows, vm_rows = [], []
            arms = [("Prometheus", api, "") for api in READ_APIS["Prometheus"]] + [
                ("VictoriaMetrics", api, tree) for tree in trees
                for api in READ_APIS["VictoriaMetrics"]]
            for name in args.commands:
                found = {}
                for store, api, tree in arms:
                    if store == "VictoriaMetrics":  # cold: see fresh_vm
                        held.close()
                        vm = held.enter_context(fresh_vm(work / "vm", limits))
                    url = prom.url if store == "Prometheus" else vm.url
                    out = work / f"{store}-{api}-{name}{tree.strip()}"
                    cmd = [sys.executable, "-m", "dask_metrics.collector",
                           *(a.format(out=out) for a in COMMANDS[name]), "--since",
                           str(fix.t0), "--until", str(fix.t1), "--prometheus", url,
                           "--read-api", api, "--quiet"]
                    asked = vm_requests(vm.url) if store == "VictoriaMetrics" else (0, 0)
                    wall, rss, stdout = run_child(
                        cmd, work / f"{store}-{name}{tree.strip()}.log", trees[tree])
                    if name == "peaks":
                        out.write_text(json.dumps(json.loads(stdout), sort_keys=True))
                    elif name == "report":  # the page shows the store; report.json too
                        (out / "report.html").unlink()
                    found[store, api, tree] = (wall, rss, out)
                    if store == "VictoriaMetrics":
                        now = vm_requests(vm.url)
                        vm_rows.append(f"| {name}{tree} | {api} | {wall:.1f} | "
                                       f"{now[0] - asked[0]:,} | {now[1] - asked[1]:,} | "
                                       f"{mib(rss)} |")
                first = found["Prometheus", "query", ""][2]
                alike_all = all(same(first, out) for _, _, out in found.values())
                found = {k: v for k, v in found.items() if not k[2]}
                cells = [f"{found[key][0]:.1f}" for key in found]
                rss = [mib(found[key][1]) for key in found]
                pw, vw = found["Prometheus", "query", ""][0], found["VictoriaMetrics", "query",
                                                                    ""][0]
                rows.append(f"| {name} | {' | '.join(cells)} | {vw / pw:.2f} | "
                            f"{' / '.join(rss)} | {'yes' if alike_all else 'NO'} |")
                print(rows[-1], file=sys.stderr)
        limit = f"; VictoriaMetrics limited to {args.vm_limit:,} series" if limits else ""
        print(f"{args.workers} workers x {args.gpus} GPUs, {args.hours:g} h at "
              f"{args.interval} s ({fix.samples:,} samples); vmctl import {loaded:.0f} s"
              f"{limit}\n")
        print("| command | Prometheus s, remote read | Prometheus s, query | "
              "VictoriaMetrics s, export | VictoriaMetrics s, query | VM / Prometheus (query) "
              "| RSS MiB, in that order | same output, every arm |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        print("\n".join(rows))
        print("\n| VictoriaMetrics: command | read API | s | queries | refused | RSS MiB |\n"
              "|---|---|---:|---:|---:|---:|\n" + "\n".join(vm_rows))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
