"""A range longer than a chunk is exported a chunk at a time (collector/query/pieces.py): its
files must be those of the range exported whole. The data: benchmarks/fleet_data.py's
fleet (every series the exporter and the scheduler preload write, the DAGs' own start and
end times among them), served by a real Prometheus, scraped every 15 s and every 60 s;
chunks of 60 s put piece edges on samples, chunks of 47 s between them (at 60 s, most
chunks hold one sample or none), both inside DAGs and across the prefixes' changes."""

from __future__ import annotations

import csv
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dask_metrics.collector.sources.summaries import read_gpu_by_prefix
from dask_metrics.collector.store.client import ConnectionSettings, PrometheusClient
from dask_metrics.contract import ACTIVITIES_CSV, GPU_BY_PREFIX_CSV, JOBS_CSV
from tests.helpers import csv_numbers
from tests.prometheus_helpers import (
    PrometheusServer,
    blocks_of_file,
    requires_prometheus,
    run_prometheus,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import fleet_data  # a script beside the benchmarks, not a package

pytestmark = [requires_prometheus, pytest.mark.integration]

WORKERS, GPUS, SECONDS = 3, 2, 1800
INTERVALS = (15, 60)  # the chart's scrape interval and Prometheus' default
WHOLE = 86400.0  # a chunk longer than the range: one piece


@pytest.fixture(scope="module", params=INTERVALS, ids=[f"{i}s" for i in INTERVALS])
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[PrometheusServer, int]]:
    folder = tmp_path_factory.mktemp("fleet")
    t0 = int(time.time()) - SECONDS - 3600
    source = folder / "fleet.om"
    fleet_data.write_fleet(source, WORKERS, GPUS, t0, SECONDS, request.param)
    with run_prometheus(tmp_path_factory.mktemp("fleet-prom"),
                        blocks=blocks_of_file(source, folder)) as server:
        yield server, t0


def exported(server: PrometheusServer, since: float, until: float, out: Path,
             **options: Any) -> dict[str, Any]:
    from dask_metrics.collector.output.export import export

    with PrometheusClient(ConnectionSettings(server.url)) as client:  # its own warnings
        export(client, since, until, out, cluster=fleet_data.CLUSTER, **options)
    return json.loads((out / "export.json").read_text())


@pytest.mark.parametrize("step", [None, 30.0])
def test_an_export_in_pieces_is_the_export_whole(fleet: tuple[PrometheusServer, int],
                                                 tmp_path: Path, step: float | None) -> None:
    server, t0 = fleet
    # the data's first and last samples: data_span (whose resolution follows the chunk, and
    # jobs.csv's edges with it) finds the range itself whatever the chunk
    since, until = t0, t0 + SECONDS
    whole = exported(server, since, until, tmp_path / "whole", chunk=WHOLE, step=step)
    assert whole["rows"] > 0 and len(whole["files"]) == WORKERS
    prefixes = csv_numbers(tmp_path / "whole" / GPU_BY_PREFIX_CSV)
    with open(tmp_path / "whole" / GPU_BY_PREFIX_CSV, newline="", encoding="utf-8") as fh:
        dags = {row["dag"] for row in csv.DictReader(fh)}
    assert len(prefixes) > 10 and dags == {"0", "1", "2"}
    for chunk in (60.0, 47.0):
        out = tmp_path / str(chunk)
        mine = exported(server, since, until, out, chunk=chunk, step=step)
        for key in ("rows", "warnings", "files", "workers"):
            assert mine[key] == whole[key], (chunk, key)
        for name in [*whole["files"], "workers.csv", JOBS_CSV, ACTIVITIES_CSV]:
            assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), (
                chunk, name)
        assert csv_numbers(out / GPU_BY_PREFIX_CSV) == prefixes, chunk


def test_the_monitors_gpu_time_per_prefix_in_pieces_is_the_whole_ranges(
        fleet: tuple[PrometheusServer, int]) -> None:
    server, t0 = fleet
    since, until = t0 + 300.0, t0 + 1500.0

    def rows(chunk: float) -> list[dict[str, Any]]:
        with PrometheusClient(ConnectionSettings(server.url)) as client:
            return read_gpu_by_prefix(client, since, until, cluster=fleet_data.CLUSTER,
                                      chunk=chunk)

    whole = rows(WHOLE)
    assert len(whole) > 10
    for chunk in (60.0, 47.0):
        mine = rows(chunk)
        assert [{k: v if isinstance(v, str) or v is None else pytest.approx(v, rel=1e-12)
                 for k, v in r.items()} for r in whole] == mine, chunk


@pytest.mark.parametrize("by", ["gpu", "job"])
def test_peaks_folded_a_chunk_at_a_time_are_the_peaks_read_whole(
        fleet: tuple[PrometheusServer, int], by: str) -> None:
    """peaks over a range of many peak windows, read and folded a piece at a time
    (peaks.PeakFold): the same peaks, bounds, times and jobs as the range read whole, with
    each piece's activity read around it alone. The fleet's stamps all say its first second,
    so every bound is asked of the windows, across the pieces' edges."""
    from dask_metrics.collector.peaks.command import peaks

    server, t0 = fleet
    since, until = t0 + 101.3, t0 + 1497.9
    with PrometheusClient(ConnectionSettings(server.url)) as client:
        whole = peaks(client, since, until, by=by, chunk=WHOLE, cluster=fleet_data.CLUSTER)
        assert len({p.job for p in whole}) == (3 if by == "job" else 1)
        assert any(p.upper_bytes is not None for p in whole)
        # a piece is as many chunks as one worker's answer holds (at most 24): pieces of
        # 96 s and 216 s, their edges between samples
        for chunk in (4.0, 9.0):
            assert peaks(client, since, until, by=by, chunk=chunk,
                         cluster=fleet_data.CLUSTER) == whole, chunk


def _difference(a: Any, b: Any, at: str = "") -> str | None:
    """Where ``a`` and ``b`` differ (None: nowhere), floats within the last bits of a sum
    taken in parts."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{at}: keys {sorted(a.keys() ^ b.keys())}"
        return next((d for k in a if (d := _difference(a[k], b[k], f"{at}.{k}"))), None)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{at}: {len(a)} items, {len(b)}"
        return next((d for k, (x, y) in enumerate(zip(a, b, strict=True))
                     if (d := _difference(x, y, f"{at}[{k}]"))), None)
    if isinstance(a, str) and isinstance(b, str) and a != b:  # the export's CSV numbers
        try:
            a, b = float(a), float(b)
        except ValueError:
            return f"{at}: {a!r} != {b!r}"
    if isinstance(a, int | float) and isinstance(b, int | float) and (
            a == pytest.approx(b, rel=1e-12, abs=1e-9) or abs(a - b) <= _last_digit(a, b)):
        return None
    return None if a == b else f"{at}: {a!r} != {b!r}"


def _last_digit(*rounded: float) -> float:
    """One unit of the last decimal the numbers are written with: a rounded figure whose
    unrounded value lay on a tie (67.275) may fall either way."""
    places = max(len(repr(float(x)).partition(".")[2].rstrip("0")) for x in rounded)
    return 1.000001 * 10.0 ** -places if places < 12 else 0.0


def _charts(page: str) -> list[str]:
    return re.findall(r"<svg .*?</svg>", page, flags=re.S)


def test_a_report_folded_a_piece_at_a_time_is_the_report_read_whole(
        fleet: tuple[PrometheusServer, int], tmp_path: Path) -> None:
    """The session report over a range read in pieces (each worker's use summed with its
    GPUs' last rows carried, its peaks folded, its chart's rows thinned a piece at a time,
    in this process or the pool's): every number and word of report.json and the page's
    charts are those of the range read whole."""
    from dask_metrics.collector.report.build import make_report

    server, t0 = fleet
    since, until = t0 + 101.3, t0 + 1497.9

    def report(chunk: float, out: Path, processes: int = 0) -> tuple[dict[str, Any], str]:
        with PrometheusClient(ConnectionSettings(server.url)) as client:
            made = make_report(client, since, until, out, cluster=fleet_data.CLUSTER,
                               chunk=chunk, plots=WORKERS, processes=processes)
        assert made.page is not None
        body = made.report
        body["session"]["asked"] = body["session"]["asked"] | {"chunk": None}
        return body, made.page

    whole, page = report(WHOLE, tmp_path / "whole")
    jobs = {j["job"] for j in whole["jobs"]}
    assert len(jobs) == 3 and len(whole["plots"]) == WORKERS
    assert all(j["energy_joules"] for j in whole["jobs"]), whole["jobs"]
    # pieces of 96 s and 216 s, folded here and in a process of the pool
    for chunk, processes in ((4.0, 0), (9.0, 1), (4.0, 2)):
        mine, drawn = report(chunk, tmp_path / f"{chunk}-{processes}", processes)
        assert _difference(mine, whole) is None, (chunk, _difference(mine, whole))
        # 120 samples per GPU at 15 s: no row to thin, the very charts of the whole
        assert _charts(drawn) == _charts(page) and len(_charts(page)) >= WORKERS, chunk
