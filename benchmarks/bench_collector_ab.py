"""Two installations' ``collector export`` on the collector benchmark's fixture, alternating:
what a change costs against another checkout (e.g. main's venv), and whether the per-worker
CSV files stay byte-identical.

    python benchmarks/bench_collector_ab.py --against /work/main/.venv/bin/python --rounds 5

Each collector runs as ``PYTHON -m dask_metrics.collector export`` from a neutral folder (so
that this checkout's ``dask_metrics/`` does not shadow the other installation), with the
benchmark's ``--metrics``, on the fixture of ``bench_collector.py`` (same cache).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_collector import DEFAULT_CACHE, METRICS, served_fixture  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the other installation's python")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--cache", default=str(DEFAULT_CACHE))
    args = parser.parse_args()
    pythons = {"this": sys.executable, "against": args.against}
    walls: dict[str, list[float]] = {name: [] for name in pythons}
    work = Path(tempfile.mkdtemp(prefix="bench-collector-ab-"))
    try:
        with served_fixture(args.workers, args.gpus, args.hours, args.cache,
                            work) as (fix, prom):
            for r in range(args.rounds):
                for name in (list(pythons) if r % 2 else list(pythons)[::-1]):
                    out = work / name
                    shutil.rmtree(out, ignore_errors=True)
                    began = time.perf_counter()
                    subprocess.run([pythons[name], "-m", "dask_metrics.collector", "export",
                                    "--prometheus", prom.url, "--since", str(fix.t0),
                                    "--until", str(fix.t1), "--out", str(out), "--quiet",
                                    "--metrics", *METRICS], check=True, cwd=work)
                    walls[name].append(time.perf_counter() - began)
                    print(f"round {r + 1} {name}: {walls[name][-1]:.2f} s", file=sys.stderr)
            worker_files = sorted(p.name for p in (work / "this").glob("w-*.csv"))
            _, differ, missing = filecmp.cmpfiles(work / "this", work / "against", worker_files,
                                                  shallow=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    this, against = (statistics.median(walls[n]) for n in ("this", "against"))
    pairs = [a / b for a, b in zip(walls["this"], walls["against"], strict=True)]
    print(f"median: this {this:.2f} s, against {against:.2f} s ({this / against:.2f}x); "
          f"per round {min(pairs):.2f}x to {max(pairs):.2f}x; worker CSV files: "
          f"{len(worker_files) - len(differ) - len(missing)} identical, {len(differ)} differ, "
          f"{len(missing)} missing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
