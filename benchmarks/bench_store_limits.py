#!/usr/bin/env python
"""How many questions each case of tests/test_store_limits.py costs a limited store.

    python benchmarks/bench_store_limits.py --before a61f589

The test's fleet (40 workers of two GPUs, 30 jobs, ten minutes at ``--interval`` s) is
served by VictoriaMetrics refusing queries of more than 100 series (the test's LIMIT) or 12
(TIGHT, below the cluster's 80 GPUs); each case (a collector command, its cluster) runs
against a store started for it alone, since VictoriaMetrics 1.79 lets a question over its
limit pass once its series API has listed the same series. The store counts the questions
it answered and refused (bench_stores.vm_requests). ``--before REF`` runs the cases with
git revision REF's collector too.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_collector import ROOT, before_tree, imports_from, run_child  # siblings
from bench_stores import vm_requests

CASES = (("LIMIT", "export", "limited"), ("LIMIT", "peaks", "limited"),
         ("TIGHT", "export", "limited"), ("TIGHT", "peaks", "limited"),
         ("TIGHT", "report", "limited"), ("TIGHT", "export", "ports"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=int, default=15, choices=(1, 15, 60),
                        help="scrape interval of the fleet, seconds (the test's three)")
    parser.add_argument("--before", metavar="REF", help="also run git revision REF's cases")
    args = parser.parse_args()
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests import test_store_limits as cases
    from tests.prometheus_helpers import run_victoria_metrics

    work = Path(tempfile.mkdtemp(prefix="bench-store-limits-"))
    trees: dict[str, Path | None] = {"this tree": None}
    if args.before:
        trees[args.before] = before_tree(args.before, work / "before")
        imports_from(trees[args.before], work)
    n = int(time.time()) - 30
    data = cases.fleet(n, args.interval)
    print(f"| case | {' | '.join(f'{t}: questions (refused)' for t in trees)} |")
    print(f"|---|{'---:|' * len(trees)}")
    for k, (limit, command, cluster) in enumerate(CASES):
        most = getattr(cases, limit)
        cells = []
        for tree in trees.values():
            flags = [f"-search.maxUniqueTimeseries={most}", f"-search.maxExportSeries={most}"]
            out = work / f"{k}-{len(cells)}"
            asked = {"export": ["export", "--out", str(out)], "peaks": ["peaks", "--json"],
                     "report": ["report", "--out", str(out)]}[command]
            with run_victoria_metrics(out.with_suffix(".vm"), data=data,
                                      extra_args=flags) as vm:
                before = vm_requests(vm.url)
                run_child([sys.executable, "-m", "dask_metrics.collector", *asked, "--since",
                           str(n - cases.SECONDS), "--until", str(n), "--prometheus", vm.url,
                           "--cluster", cluster, "--quiet"], out.with_suffix(".log"), tree)
                after = vm_requests(vm.url)
            cells.append(f"{after[0] - before[0]:,} ({after[1] - before[1]:,})")
        print(f"| {command} of {cluster!r}, limit {most} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
