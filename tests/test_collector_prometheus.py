"""The collector against a real Prometheus holding a backfilled, deterministic dataset
(tests/collector_dataset.py): every CSV value is compared with the value the dataset says,
including the job/DAG as-of join at its edges, gaps, restarts, NaN, ranges over the
11,000-point limit, query splitting, 50 workers, peaks, and the failures a real Prometheus
gives (wrong credentials, a wrong path prefix, a bad query)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from dask_metrics.collector import ConnectionSettings, PrometheusClient, export
from dask_metrics.collector.model.columns import select, source_metrics
from dask_metrics.collector.model.series import Series, WorkerInfo
from dask_metrics.collector.model.timespec import format_rfc3339
from dask_metrics.collector.output.export import SUMMARIES
from dask_metrics.collector.output.export_reads import Visiting
from dask_metrics.collector.peaks import peaks
from dask_metrics.collector.query.batches import samples_per_gpu, worker_batches
from dask_metrics.collector.query.reads import fetch_raw, fetch_steps
from dask_metrics.collector.query.scope import selector
from dask_metrics.collector.sources.cluster import executing_workers, fetch_cluster
from dask_metrics.collector.sources.discovery import find_workers
from dask_metrics.collector.sources.worker_fetch import fetch_workers
from dask_metrics.collector.store.client import PrometheusError
from dask_metrics.collector.store.connection import ENV_URL
from dask_metrics.contract import INFO, JOBS_COLUMNS, REPLICA_LABELS
from tests.collector_dataset import (
    COLUMNS,
    CORE_DAGS,
    LONG_END,
    MANY_WORKERS,
    METRICS,
    RESTART,
    TOTAL,
    Dataset,
    GiB,
    a_times,
    b_times,
    column_value,
    core_value,
    expected_cluster,
    expected_jobs,
    expected_worker,
    long_value,
    make_dataset,
    many_used,
)
from tests.helpers import Run, collector, collector_process, read_csv
from tests.prometheus_helpers import (
    OpenMetrics,
    PrometheusServer,
    VictoriaMetricsServer,
    create_blocks,
    make_tls_files,
    requires_prometheus,
    run_prometheus,
    run_victoria_metrics,
)

pytestmark = [requires_prometheus, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[1]
USER, PASSWORD = "alice", "s3cret-Pa55"
TOO_MANY = r"too many samples|error when exporting data|cannot select more than"
MAX_SAMPLES = 100_000  # below the LONG worker's 108k samples: one 4 h chunk must be split


def header(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()[0].split(",")


def check(cell: str, expected: float | None, where: str) -> None:
    if expected is None:
        assert cell == "", where
    elif math.isnan(expected):
        assert cell == "NaN", where
    else:
        assert cell != "" and float(cell) == pytest.approx(expected, rel=1e-9, abs=1e-6), where


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    return make_dataset()


@pytest.fixture(scope="module")
def blocks(dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return create_blocks(dataset.openmetrics(), tmp_path_factory.mktemp("blocks"))


@pytest.fixture(scope="module", params=["prometheus", "victoriametrics"])
def prom(request: pytest.FixtureRequest, blocks: Path, dataset: Dataset,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """Basic auth and a path prefix, as behind a reverse proxy; a low sample limit. The same
    suite runs on VictoriaMetrics, the dataset imported through its import API."""
    if request.param == "victoriametrics":
        with run_victoria_metrics(tmp_path_factory.mktemp("vm"), data=dataset.openmetrics(),
                                  users={USER: PASSWORD}, prefix="/prom",
                                  extra_args=[f"-search.maxSamplesPerQuery={MAX_SAMPLES}"]
                                  ) as server:
            yield server
        return
    with run_prometheus(tmp_path_factory.mktemp("prom"), blocks=blocks, users={USER: PASSWORD},
                        prefix="/prom", extra_args=[f"--query.max-samples={MAX_SAMPLES}"]
                        ) as server:
        yield server


@pytest.fixture(scope="module")
def password_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "password"
    path.write_text(PASSWORD + "\n")
    return path


def auth(prom: PrometheusServer, password_file: Path) -> list[str]:
    return ["--prometheus", prom.url, "--user", USER, "--password-file", str(password_file)]


@pytest.fixture(scope="module")
def core_export(prom: PrometheusServer, dataset: Dataset,
                tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Run]:
    """The CORE window, tidy, all metrics; credentials in the URL."""
    out = tmp_path_factory.mktemp("core") / "export"
    run = collector("export", "--since", format_rfc3339(dataset.core * 1000),
                    "--until", str(dataset.core + 600), "--out", str(out),
                    "--prometheus", prom.url_with(USER, PASSWORD))
    assert run.code == 0, run.err
    return out, run


def expected_core(worker: str) -> list[tuple[float, int, dict[str, float | None]]]:
    gpus, times = (2, a_times()) if worker == "w-a" else (1, b_times())
    return [(t, g, {c: column_value(c, core_value(worker, METRICS[c], g, t), TOTAL)
                    for c in COLUMNS}) for t in times for g in range(gpus)]


# ---- export: tidy --------------------------------------------------------------------------


def test_tidy_export_matches_the_dataset_value_by_value(core_export: tuple[Path, Run],
                                                        dataset: Dataset,
                                                        prom: PrometheusServer) -> None:
    out, _ = core_export
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["export.json", "jobs.csv", "w-a.csv", "w-b.csv", "workers.csv", *SUMMARIES])
    for worker in ("w-a", "w-b"):
        path = out / f"{worker}.csv"
        assert header(path) == ["timestamp", "time", "worker", "gpu", "uuid", "job", "dag",
                                "worker_job", "worker_dag", *COLUMNS]
        rows = read_csv(path)
        expected = expected_core(worker)
        assert len(rows) == len(expected)
        for row, (t, gpu, values) in zip(rows, expected, strict=True):
            where = f"{worker} t={t} gpu={gpu}"
            assert row["timestamp"] == f"{t:.3f}", where
            assert row["time"] == format_rfc3339(round((dataset.core + t) * 1000)), where
            assert (row["worker"], row["gpu"], row["uuid"]) == (
                worker, str(gpu), f"GPU-{worker[-1]}{gpu}"), where
            assert (row["job"], row["dag"]) == expected_cluster(t), where
            assert (row["worker_job"], row["worker_dag"]) == expected_worker(worker, t), where
            for column, value in values.items():
                if value is not None and math.isnan(value) and not keeps_nan(prom):
                    value = None
                check(row[column], value, f"{where} {column}")


def test_parquet_export_is_the_tidy_rows_as_one_dataset_by_worker(
        prom: PrometheusServer, dataset: Dataset, tmp_path: Path) -> None:
    """``--format parquet``: one dataset partitioned by worker that pyarrow, pandas, Dask and
    DuckDB read as one table, value for value the tidy CSV's rows (typed: times as UTC
    timestamps, no job as null, each metric's unit in its field's metadata)."""
    import dask.dataframe as dd
    import duckdb
    import pandas as pd
    import pyarrow.dataset as ds

    base = ("export", "--since", str(dataset.core), "--until", str(dataset.core + 600),
            "--prometheus", prom.url_with(USER, PASSWORD), "--quiet")
    out, csv_out = tmp_path / "pq", tmp_path / "csv"
    assert collector(*base, "--out", str(csv_out)).code == 0
    run = collector(*base, "--out", str(out), "--format", "parquet")
    assert run.code == 0 and "error" not in run.err, run.err  # a gap's warning, as the CSV's
    record = json.loads((out / "export.json").read_text())
    assert record["format"] == "parquet"
    assert record["files"] == ["samples/worker=w-a/part-0.parquet",
                               "samples/worker=w-b/part-0.parquet"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["export.json", "jobs.csv", "samples", "workers.csv", *SUMMARIES])
    table = ds.dataset(out / "samples", partitioning="hive").to_table()
    assert str(table.schema.field("time").type) == "timestamp[ms, tz=UTC]"
    assert all(table.schema.field(c).metadata == {b"unit": unit.encode()}
               for c, unit in record["units"].items())  # export.json's units
    frame = pd.read_parquet(out / "samples")
    assert len(frame) == table.num_rows == sum(len(expected_core(w)) for w in ("w-a", "w-b"))
    assert len(dd.read_parquet(out / "samples").compute()) == len(frame)
    assert duckdb.sql(f"select count(*), count(distinct worker) from read_parquet("
                      f"'{out}/samples/*/*.parquet', hive_partitioning = true)"
                      ).fetchall() == [(len(frame), 2)]
    got_rows = table.to_pylist()  # None: null, apart from NaN (pandas would make both NaN)
    for worker in ("w-a", "w-b"):
        rows = read_csv(csv_out / f"{worker}.csv")
        mine = [r for r in got_rows if r["worker"] == worker]
        assert len(mine) == len(rows)
        for row, got in zip(rows, mine, strict=True):
            where = f"{worker} {row['timestamp']} gpu {row['gpu']}"
            assert f"{got['timestamp']:.3f}" == row["timestamp"], where
            assert format_rfc3339(int(got["time"].timestamp() * 1000)) == row["time"], where
            for key in ("gpu", "uuid", "job", "dag", "worker_job", "worker_dag"):
                assert (got[key] if got[key] is not None else "") == row[key], where
            for column in COLUMNS:
                check(row[column], got[column], f"{where} {column}")


def test_parquet_needs_the_tidy_layout_and_plot_says_it_reads_csv(
        prom: PrometheusServer, dataset: Dataset, tmp_path: Path) -> None:
    base = ("export", "--since", str(dataset.core), "--until", str(dataset.core + 60),
            "--prometheus", prom.url_with(USER, PASSWORD), "--quiet", "--format", "parquet")
    line = one_error_line(collector(*base, "--layout", "seed", "--out", str(tmp_path / "s")), 2)
    assert "--format parquet writes the tidy layout" in line
    assert not (tmp_path / "s").exists()
    assert collector(*base, "--out", str(tmp_path / "p")).code == 0
    line = one_error_line(collector("plot", "--csv", str(tmp_path / "p"), "--out",
                                    str(tmp_path / "pics")), 1)
    assert "holds a parquet export" in line


def vm_sample_limit_is_one_line(prom: PrometheusServer, dataset: Dataset,
                                password_file: Path, tmp_path: Path) -> None:
    """VictoriaMetrics counts its sample limit differently (docs/collector.md, Stores): it
    also counts what it reads to evaluate the range, which depends on how it has merged its
    parts so far, so the same range may fit or not. Either the export is whole and exact, or
    it stops with the 422 in one line and nothing is written."""
    out = tmp_path / "vm"
    run = collector("export", "--since", str(dataset.t0), "--until",
                    str(dataset.t0 + LONG_END), "--workers", "w-long", "--chunk", "4h",
                    "--out", str(out), *auth(prom, password_file))
    if run.code == 0:
        rows = read_csv(out / "w-long.csv")
        assert [r["timestamp"] for r in rows] == [f"{t:.3f}" for t in range(LONG_END + 1)]
        for row, t in zip(rows, range(LONG_END + 1), strict=True):
            check(row["total-mem"], long_value(METRICS["total-mem"], t), str(t))
        return
    line = one_error_line(run, 1)
    assert "422" in line and "Prometheus rejected" in line, line
    assert not out.exists()


def keeps_nan(prom: PrometheusServer) -> bool:
    """VictoriaMetrics drops a NaN sample at ingestion (it reads it as a staleness marker):
    its CSV cell is empty where Prometheus gives NaN."""
    return not isinstance(prom, VictoriaMetricsServer)


def _row(out: Path, worker: str, t: float, gpu: int = 0) -> dict[str, str]:
    return next(r for r in read_csv(out / f"{worker}.csv")
                if r["timestamp"] == f"{t:.3f}" and r["gpu"] == str(gpu))


def test_job_and_dag_come_from_the_last_scrape_at_or_before(core_export: tuple[Path, Run]
                                                              ) -> None:
    out, _ = core_export
    at = {t: _row(out, "w-a", t) for t in (95, 100, 245, 250, 295, 420, 500)}
    assert (at[95]["job"], at[95]["dag"]) == ("", "")      # scrape 90: idle
    assert (at[100]["job"], at[100]["dag"]) == ("0", "0")  # exactly at scrape 100
    assert (at[245]["job"], at[245]["dag"]) == ("0", "0")  # just before the scrape of dag 1
    assert (at[250]["job"], at[250]["dag"]) == ("0", "1")
    # Two DAGs on w-a at scrape 250: the oldest is taken.
    assert (at[250]["worker_job"], at[250]["worker_dag"]) == ("0", "0")
    assert (at[420]["worker_job"], at[420]["worker_dag"]) == ("1", "0")
    assert (at[500]["job"], at[500]["worker_job"]) == ("", "")  # -1, and no tasks series
    # w-b is scraped 2.5 s after the scheduler: never a later scheduler scrape.
    assert _row(out, "w-b", 97.5)["job"] == ""
    assert _row(out, "w-b", 102.5)["job"] == "0"
    assert _row(out, "w-b", 252.5)["worker_dag"] == "1"


def test_a_restart_stays_a_gap_and_a_counter_reset_is_not_smoothed(
        core_export: tuple[Path, Run], prom: PrometheusServer) -> None:
    out, run = core_export
    times = sorted({float(r["timestamp"]) for r in read_csv(out / "w-a.csv")})
    assert not [t for t in times if RESTART[0] < t < RESTART[1]]
    assert _row(out, "w-a", RESTART[0])["energy"] == str(RESTART[0] * 150)
    assert _row(out, "w-a", RESTART[1])["energy"] == "5"
    assert _row(out, "w-a", 50)["power"] == ("NaN" if keeps_nan(prom) else "")  # as stored
    assert _row(out, "w-a", 55, gpu=1)["power"] == ""       # unsupported: empty, not 0
    # the 125 s without w-a's samples, longer than --max-age (120 s), is said, once, and only
    # that: on stderr and in export.json
    (said,) = [w for w in json.loads((out / "export.json").read_text())["warnings"]
               if "no GPU sample" in w]
    assert said.startswith(f"no GPU sample of 1 worker(s) (w-a) for up to "
                           f"{RESTART[1] - RESTART[0]} s between")
    assert said in run.err


@pytest.mark.parametrize("chunk", [150.0, 160.0])
def test_in_pieces_a_restart_is_one_gap_and_every_file_the_whole_ranges(
        core_export: tuple[Path, Run], prom: PrometheusServer, dataset: Dataset,
        tmp_path: Path, chunk: float) -> None:
    """The CORE window written a chunk at a time (edges on samples at 150 and 300 s, between
    them at 160 and 320 s, inside w-a's restart gap either way): the same files, and the gap
    across the chunks one warning."""
    whole, _ = core_export
    with PrometheusClient(ConnectionSettings(prom.url_with(USER, PASSWORD))) as client:
        found = export(client, dataset.core, dataset.core + 600, tmp_path, chunk=chunk)
    assert found.files == ["w-a.csv", "w-b.csv"]
    for name in [*found.files, "workers.csv", "jobs.csv", *SUMMARIES]:
        assert (tmp_path / name).read_bytes() == (whole / name).read_bytes(), name
    mine, theirs = (json.loads((out / "export.json").read_text()) for out in (tmp_path, whole))
    assert (mine["rows"], mine["warnings"]) == (theirs["rows"], theirs["warnings"])
    assert len([w for w in mine["warnings"] if "no GPU sample" in w]) == 1


def test_workers_csv_and_export_json_without_credentials(core_export: tuple[Path, Run],
                                                         dataset: Dataset,
                                                         prom: PrometheusServer) -> None:
    out, run = core_export
    assert read_csv(out / "workers.csv") == [
        {"worker": "w-a", "address": "tcp://10.0.0.1:40000 tcp://10.0.0.1:40001",
         "host": "host-a", "gpus": "2", "uuids": "GPU-a0 GPU-a1", "simulated": "false"},
        {"worker": "w-b", "address": "tcp://10.0.0.2:40000", "host": "host-b", "gpus": "1",
         "uuids": "GPU-b0", "simulated": "true"}]
    text = (out / "export.json").read_text()
    record = json.loads(text)
    assert record["prometheus"] == prom.url
    assert (record["since_unix"], record["until_unix"]) == (dataset.core, dataset.core + 600)
    assert record["metrics"] == COLUMNS
    assert record["units"]["sm-clock"] == "MHz"
    assert record["files"] == ["w-a.csv", "w-b.csv"]
    assert (record["simulated"], record["simulated_workers"]) == (True, ["w-b"])
    if keeps_nan(prom):  # Debian's VictoriaMetrics reports no version in status/buildinfo
        assert record["versions"]["prometheus"].startswith("2.")
    assert record["asked"]["since"] == format_rfc3339(dataset.core * 1000)
    for output in (text, run.out, run.err):
        assert PASSWORD not in output and f"{USER}:" not in output


def test_jobs_csv_names_each_dag_with_its_outcome_and_times(core_export: tuple[Path, Run],
                                                           dataset: Dataset) -> None:
    """Every DAG of the window by job name and client, its final status, and when it was
    first seen and last seen unfinished, in seconds since the start and in RFC 3339."""
    out, _ = core_export
    assert header(out / "jobs.csv") == list(JOBS_COLUMNS)
    rows = read_csv(out / "jobs.csv")
    times = [{k: r.pop(k) for k in ("first_seen_time", "last_seen_time")} for r in rows]
    assert rows == expected_jobs()
    for row, stamps in zip(rows, times, strict=True):
        for key in ("first_seen", "last_seen"):
            seconds = dataset.core + float(row[key])
            assert stamps[f"{key}_time"] == format_rfc3339(round(seconds * 1000))


def test_jobs_csv_leaves_out_dags_that_ended_before_the_range(prom: PrometheusServer,
                                                             dataset: Dataset,
                                                             password_file: Path,
                                                             tmp_path: Path) -> None:
    """From C+450: etl's DAGs had finished (still exported, scraped as finished before), so
    only train (erred at 500) and the waiting etl of client-2 are rows; train is first seen
    at the range's first scrape."""
    out = tmp_path / "late"
    run = collector("export", "--since", str(dataset.core + 450), "--until",
                    str(dataset.core + 600), "--out", str(out), *auth(prom, password_file))
    assert run.code == 0, run.err
    rows = read_csv(out / "jobs.csv")
    assert [(r["job"], r["job_name"], r["dag"], r["status"], r["first_seen"], r["last_seen"])
            for r in rows] == [("1", "train", "0", "erred", "0.000", "50.000"),
                               ("2", "etl", "0", "waiting", "70.000", "150.000")]


# ---- export: seed, step, long ranges, many workers -----------------------------------------


def test_seed_layout_is_the_original_files(prom: PrometheusServer, dataset: Dataset,
                                           password_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "seed"
    run = collector("export", "--since", str(dataset.core), "--until", str(dataset.core + 600),
                    "--layout", "seed", "--out", str(out), *auth(prom, password_file))
    assert run.code == 0, run.err
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["export.json", "jobs.csv", "worker_0.csv", "worker_1.csv", "workers.csv", *SUMMARIES])
    assert [r["worker"] for r in read_csv(out / "workers.csv")] == ["w-a", "w-b"]
    for index, worker in enumerate(("w-a", "w-b")):
        path = out / f"worker_{index}.csv"
        assert header(path) == ["job", "dag", "timestamp", *COLUMNS]
        rows = read_csv(path)
        expected = expected_core(worker)
        times = sorted({t for t, _, _ in expected})
        assert [r["timestamp"] for r in rows] == [f"{t:.3f}" for t in times]
        for row in rows:
            t = float(row["timestamp"])
            assert (row["job"], row["dag"]) == expected_cluster(t)
            for column in COLUMNS:
                cells = row[column].split(", ")
                values = [v[column] for tt, _, v in expected if tt == t]
                assert len(cells) == len(values), (worker, t, column)
                for cell, value in zip(cells, values, strict=True):
                    check(cell, math.nan if value is None else value, f"{worker} {t} {column}")


def test_step_grid_takes_no_sample_older_than_max_age(prom: PrometheusServer, dataset: Dataset,
                                                      password_file: Path,
                                                      tmp_path: Path) -> None:
    out = tmp_path / "step"
    run = collector("export", "--since", str(dataset.core), "--until", str(dataset.core + 600),
                    "--step", "10s", "--max-age", "30s", "--workers", "w-a",
                    "--metrics", "total-mem,energy", "--out", str(out),
                    *auth(prom, password_file))
    assert run.code == 0, run.err
    rows = read_csv(out / "w-a.csv")
    assert header(out / "w-a.csv")[9:] == ["total-mem", "energy"]
    expected = []
    for grid in range(0, 601, 10):
        last = max(t for t in a_times() if t <= grid)
        if grid - last <= 30:  # the restart gap (295, 420) stays a gap past 30 s
            expected += [(grid, g, last) for g in range(2)]
    assert [(float(r["timestamp"]), int(r["gpu"])) for r in rows] == [
        (g, gpu) for g, gpu, _ in expected]
    for row, (grid, gpu, last) in zip(rows, expected, strict=True):
        check(row["total-mem"], core_value("w-a", METRICS["total-mem"], gpu, last), str(grid))
        check(row["energy"], core_value("w-a", METRICS["energy"], gpu, last), str(grid))
        assert (row["job"], row["dag"]) == expected_cluster(grid)
    assert {float(r["timestamp"]) for r in rows} >= {300, 310, 320, 420}
    assert not {float(r["timestamp"]) for r in rows} & {330, 400, 410}


def test_long_range_raw_chunks_are_deduplicated_and_split(prom: PrometheusServer,
                                                          dataset: Dataset,
                                                          password_file: Path,
                                                          tmp_path: Path) -> None:
    """12,001 samples per series: 1 h chunks share edge samples; one 4 h chunk is more than
    --query.max-samples, so Prometheus refuses it (422) and the collector halves it."""
    if not keeps_nan(prom):
        vm_sample_limit_is_one_line(prom, dataset, password_file, tmp_path)
        return
    with (PrometheusClient(ConnectionSettings(prom.url_with(USER, PASSWORD))) as client,
          pytest.raises(PrometheusError, match=TOO_MANY) as refused):
        sel = selector(source_metrics(select(None)), "w-long")  # what the export asks
        client.query(f"{sel}[{LONG_END + 1}s]", dataset.t0 + LONG_END)
    assert refused.value.status == 422 and refused.value.splittable
    files = {}
    for chunk in ("1h", "4h"):
        out = tmp_path / chunk
        run = collector("export", "--since", str(dataset.t0), "--until",
                        str(dataset.t0 + LONG_END), "--workers", "w-long", "--chunk", chunk,
                        "--out", str(out), *auth(prom, password_file))
        assert run.code == 0, run.err
        files[chunk] = (out / "w-long.csv").read_text()
    assert files["1h"] == files["4h"]
    rows = read_csv(tmp_path / "1h" / "w-long.csv")
    assert [r["timestamp"] for r in rows] == [f"{t:.3f}" for t in range(LONG_END + 1)]
    for row, t in zip(rows, range(LONG_END + 1), strict=True):
        for column in COLUMNS:
            raw = long_value(METRICS[column], t)
            check(row[column], column_value(column, raw, TOTAL), f"t={t} {column}")


def test_a_step_range_over_11000_points_is_chunked(prom: PrometheusServer, dataset: Dataset,
                                                   password_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "step-long"
    run = collector("export", "--since", str(dataset.t0), "--until", str(dataset.t0 + LONG_END),
                    "--workers", "w-long", "--step", "1s", "--max-age", "5s",
                    "--metrics", "total-mem", "--out", str(out), *auth(prom, password_file))
    assert run.code == 0, run.err
    rows = read_csv(out / "w-long.csv")
    assert len(rows) == LONG_END + 1
    for row, t in zip(rows, range(LONG_END + 1), strict=True):
        assert row["timestamp"] == f"{t:.3f}"
        check(row["total-mem"], long_value(METRICS["total-mem"], t), str(t))


def test_a_step_chunk_over_the_sample_limit_is_split(prom: PrometheusServer,
                                                     dataset: Dataset, password_file: Path,
                                                     tmp_path: Path) -> None:
    """Ten series (nine metrics and dask_gpu_info) of 11,000 points are more than
    --query.max-samples: Prometheus answers 422 and the chunk is asked again in two halves
    that share no grid point."""
    if not keeps_nan(prom):
        vm_sample_limit_is_one_line(prom, dataset, password_file, tmp_path)
        return
    expr = '{__name__=~"dask_gpu_.+",worker="w-long"}'
    start, end = dataset.t0 * 1000, (dataset.t0 + LONG_END) * 1000
    with PrometheusClient(ConnectionSettings(prom.url_with(USER, PASSWORD))) as client:
        with pytest.raises(PrometheusError, match=TOO_MANY) as refused:
            client.query_range(expr, dataset.t0, dataset.t0 + 10_999, 1)
        assert refused.value.splittable
        series = fetch_steps(client, expr, start, end, 1000)
    assert len(series) == 10
    for s in series:
        metric = s.labels["__name__"]
        expected = [1.0 if metric == "dask_gpu_info" else long_value(metric, t)
                    for t in range(LONG_END + 1)]
        assert s.times == list(range(start, end + 1, 1000))
        assert s.values == expected


def test_fifty_workers_one_file_each_in_name_order(prom: PrometheusServer, dataset: Dataset,
                                                   password_file: Path, tmp_path: Path) -> None:
    for layout in ("tidy", "seed"):
        out = tmp_path / layout
        run = collector("export", "--since", str(dataset.many), "--until",
                        str(dataset.many + 60), "--metrics", "total-mem", "--layout", layout,
                        "--out", str(out), "--quiet", *auth(prom, password_file))
        assert run.code == 0, run.err
        assert run.err == ""
        names = [r["worker"] for r in read_csv(out / "workers.csv")]
        assert names == [f"m-{i}" for i in range(MANY_WORKERS)]  # m-2 before m-10
        for i in range(MANY_WORKERS):
            if layout == "tidy":
                rows = read_csv(out / f"m-{i}.csv")
                assert len(rows) == 10
                for row in rows:
                    check(row["total-mem"], many_used(i, int(row["gpu"]),
                                                      float(row["timestamp"])), f"m-{i}")
            else:
                rows = read_csv(out / f"worker_{i}.csv")
                assert [r["total-mem"] for r in rows] == [
                    f"{many_used(i, 0, t):.0f}, {many_used(i, 1, t):.0f}" for t in range(0, 61, 15)]


class CountingClient(PrometheusClient):
    """The real client, counting the queries it sends."""

    queries = 0

    def query(self, expr: str, at: float) -> list[Series]:
        self.queries += 1
        return super().query(expr, at)


def canonical(found: object) -> str:
    """``found``'s text with every list of series in label order (a store may answer in any
    order; Prometheus sorts, VictoriaMetrics does not); NaN samples compare by their text."""
    def walk(x: object) -> object:
        if isinstance(x, dict):
            return {k: walk(v) for k, v in sorted(x.items())}
        if isinstance(x, tuple) and hasattr(x, "_fields"):  # WorkerData
            return {f: walk(getattr(x, f)) for f in x._fields}
        if isinstance(x, list) and x and isinstance(x[0], Series):
            return sorted(map(repr, x))
        return repr(x)
    return repr(walk(found))


@pytest.mark.parametrize("window", ["many", "core"])
def test_a_batch_of_workers_is_each_worker_alone_in_fewer_queries(
        prom: PrometheusServer, dataset: Dataset, window: str) -> None:
    """One query for a batch of workers (``worker=~"a|b"``) hands each worker exactly what a
    query of its own would: series, activity, resources, prefix tasks, counters outside the
    range, and peaks; and a fleet takes fewer queries than it has workers."""
    start = (dataset.many if window == "many" else dataset.core) * 1000
    end, age, chunk = start + 600_000, 120_000, 3_600_000
    settings = ConnectionSettings(prom.url_with(USER, PASSWORD))
    with CountingClient(settings) as client:
        scope, chosen = find_workers(client, start, end, chunk, None, None, REPLICA_LABELS,
                                     False)
        names = [w.name for w in chosen]
        timeline = fetch_cluster(client, start - age, end + age, chunk, scope)
        executed = executing_workers(client, start, end, chunk, age, names, scope)
        columns = select(None)
        before = client.queries
        together = fetch_workers(client, names, columns, timeline, start, end, chunk, None,
                                 age, scope, executed)
        batched = client.queries - before
        alone = {w: fetch_workers(client, [w], columns, timeline, start, end, chunk, None, age,
                                  scope, executed)[w] for w in names}
        assert canonical(together) == canonical(alone)
        assert any(data.gpu for data in alone.values())
        if window == "many":
            assert len(names) == MANY_WORKERS and batched < len(names)
            scraped = max(len(s.times) for s in fetch_raw(client, scope.of(INFO.name), start,
                                                           end, chunk))
            per_gpu = samples_per_gpu(client, start, end, chunk, 6, None, scope)
            assert per_gpu == pytest.approx(6 * scraped, rel=0.01)  # learnt from the data
            assert worker_batches(chosen, per_gpu) == [chosen]
            assert len(worker_batches(chosen, per_gpu, limit=round(per_gpu * 2 * 10))) == 5
    for by in ("gpu", "job"):
        with PrometheusClient(settings) as client:
            whole = peaks(client, start / 1000, end / 1000, by=by)
            assert whole == [p for w in names for p in peaks(client, start / 1000, end / 1000,
                                                             by=by, workers=[w])]
            # 37 s chunks: batches sized by all 17 of them, a query spanning several
            assert peaks(client, start / 1000, end / 1000, by=by, chunk=37.0) == whole


def test_worker_names_a_regular_expression_would_misread_are_matched_literally(
        tmp_path: Path) -> None:
    """Batched queries match names such as addresses (``.``), ``a|b`` or ``w+`` literally:
    ``w.1`` does not also read ``wx1``, ``w+`` not ``ww``; each export file holds its own
    worker's values only."""
    names = ["tcp://10.0.0.1:4000", "w.1", "wx1", "a|b", "a", "w+", "ww", "(x)", "x"]
    start = 1_795_000_000
    om = OpenMetrics()
    for i, name in enumerate(names):
        labels = {"worker": name, "gpu": "0", "uuid": f"GPU-{i}", "dask_cluster": "c"}
        times = range(start, start + 60, 15)
        om.add(INFO.name, {**labels, "name": "fake", "simulated": "false"},
               [(t, 1.0) for t in times])
        om.add("dask_gpu_memory_used_bytes", labels, [(t, float(i)) for t in times])
    with run_prometheus(tmp_path / "prom", blocks=create_blocks(om, tmp_path / "b")) as server:
        run = collector("export", "--since", str(start), "--until", str(start + 60),
                        "--metrics", "total-mem", "--out", str(tmp_path / "out"), "--quiet",
                        "--prometheus", server.url)
        assert run.code == 0, run.err
        record = json.loads((tmp_path / "out" / "export.json").read_text())
        assert sorted(record["workers"]) == sorted(names)
        for name, file in zip(record["workers"], record["files"], strict=True):
            rows = read_csv(tmp_path / "out" / file)
            assert [r["worker"] for r in rows] == [name] * 4, name
            assert {r["total-mem"] for r in rows} == {str(names.index(name))}, name


def test_since_monitor_is_the_last_session(prom: PrometheusServer, dataset: Dataset,
                                           password_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "monitor"
    run = collector("export", "--since", "monitor", "--workers", "w-a", "--out", str(out),
                    *auth(prom, password_file))
    assert run.code == 0, run.err
    record = json.loads((out / "export.json").read_text())
    assert (record["since_unix"], record["until_unix"]) == (dataset.core + 50,
                                                            dataset.core + 550)
    rows = read_csv(out / "w-a.csv")
    assert (rows[0]["timestamp"], rows[-1]["timestamp"]) == ("0.000", "500.000")


def test_durations_back_from_now(prom: PrometheusServer, password_file: Path,
                                 tmp_path: Path) -> None:
    out = tmp_path / "recent"
    run = collector("export", "--since", "8h", "--until", "1m", "--workers", "w-b",
                    "--metrics", "total-mem", "--out", str(out), *auth(prom, password_file))
    assert run.code == 0, run.err
    assert len(read_csv(out / "w-b.csv")) == len(b_times())


def test_export_into_an_existing_folder_replaces_its_files(prom: PrometheusServer,
                                                           dataset: Dataset,
                                                           password_file: Path,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "again"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "w-b.csv").write_text("old")
    run = collector("export", "--since", str(dataset.core), "--until", str(dataset.core + 60),
                    "--workers", "w-b", "--out", str(out), *auth(prom, password_file))
    assert run.code == 0, run.err
    assert (out / "notes.txt").read_text() == "mine"
    assert len(read_csv(out / "w-b.csv")) == 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again"]  # no staging folder left


def test_a_sessions_tables_go_to_their_subfolder_and_a_second_export_replaces_them(
        prom: PrometheusServer, dataset: Dataset, tmp_path: Path) -> None:
    """``tables="tables"`` (what Monitor.to_csv writes): the folder's CSV files are the
    workers' alone; exported again into it, with one worker fewer, every file of the first
    export is replaced or removed, and a file of the user's is left."""
    out = tmp_path / "session"
    with PrometheusClient(ConnectionSettings(prom.url_with(USER, PASSWORD))) as client:
        export(client, dataset.core, dataset.core + 60, out, tables="tables")
        assert sorted(p.name for p in out.glob("*.csv")) == ["w-a.csv", "w-b.csv"]
        assert sorted(p.name for p in (out / "tables").iterdir()) == sorted(
            ["workers.csv", "jobs.csv", *SUMMARIES])
        (out / "tables" / "mine.txt").write_text("mine")
        export(client, dataset.core, dataset.core + 60, out, tables="tables", workers=["w-b"])
    assert sorted(p.name for p in out.iterdir()) == ["export.json", "tables", "w-b.csv"]
    assert [r["worker"] for r in read_csv(out / "tables" / "workers.csv")] == ["w-b"]
    assert (out / "tables" / "mine.txt").read_text() == "mine"
    assert json.loads((out / "export.json").read_text())["tables"] == "tables"
    with pytest.raises(ValueError, match="plain folder name"):
        export(PrometheusClient(ConnectionSettings(prom.url)), dataset.core,
               dataset.core + 60, out, tables="../elsewhere")


# ---- peaks ---------------------------------------------------------------------------------


def expected_peaks(by_job: bool) -> list[dict[str, object]]:
    """Brute force over the dataset: w-a from the peak gauge, w-b from used memory."""
    found = []
    for worker, gpus, times, metric in (("w-a", 2, a_times(), "dask_gpu_memory_peak_bytes"),
                                        ("w-b", 1, b_times(), "dask_gpu_memory_used_bytes")):
        for gpu in range(gpus):
            groups: dict[str, list[tuple[float, float]]] = {}
            for t in times:
                job = expected_worker(worker, t)[0]
                if job or not by_job:
                    groups.setdefault(job if by_job else "", []).append(
                        (t, core_value(worker, metric, gpu, t)))
            for job in sorted(groups, key=int if by_job else str):
                t, value = max(groups[job], key=lambda s: (s[1], -s[0]))
                job_id, dag_id = expected_worker(worker, t)
                found.append({"worker": worker, "gpu": gpu, "uuid": f"GPU-{worker[-1]}{gpu}",
                              "peak_bytes": value, "total_bytes": TOTAL,
                              "peak_percent": round(value / TOTAL * 100, 2), "t": t,
                              "job": int(job_id) if job_id else None,
                              "dag": int(dag_id) if dag_id else None,
                              "job_name": CORE_DAGS[job_id, dag_id][0] if job_id else None,
                              "scheduler_start": None,  # an older preload's series
                              "exact": None, "upper_bound_bytes": None})  # undated peaks
    return found


@pytest.mark.parametrize("by", ["gpu", "job"])
def test_peaks_json(prom: PrometheusServer, dataset: Dataset, password_file: Path,
                    by: str) -> None:
    run = collector("peaks", "--since", str(dataset.core), "--until", str(dataset.core + 600),
                    "--json", "--by", by, *auth(prom, password_file))
    assert run.code == 0, run.err
    got = json.loads(run.out)
    expected = expected_peaks(by_job=by == "job")
    for item in expected:
        item["time"] = format_rfc3339(round((dataset.core + item.pop("t")) * 1000))
    assert got == expected
    if by == "gpu":
        assert [(p["peak_bytes"], p["job"], p["dag"]) for p in got[:2]] == [
            (12 * GiB, 0, 0), (10 * GiB, 1, 0)]  # spikes between scrapes, from the gauge


def test_peaks_table(prom: PrometheusServer, dataset: Dataset, password_file: Path) -> None:
    run = collector("peaks", "--since", str(dataset.core), "--until", str(dataset.core + 600),
                    "--workers", "w-a", *auth(prom, password_file))
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0].split() == ["worker", "gpu", "uuid", "peak", "total", "peak", "%", "time",
                                "during"]
    # job 0 is one of two jobs called etl (the other is job 2), and has two DAGs
    assert lines[1].split() == ["w-a", "0", "GPU-a0", "12.00", "GiB", "16.00", "GiB", "75.00",
                                format_rfc3339((dataset.core + 260) * 1000), "etl", "(job",
                                "0)", "·", "DAG", "0"]
    assert lines[2].split()[-1] == "train"  # job 1: a name of its own, one DAG
    assert len(lines) == 3


# ---- failures a real Prometheus gives ------------------------------------------------------


def one_error_line(run: Run, code: int) -> str:
    assert run.code == code, run.err
    lines = run.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("collector: error: "), run.err
    assert "Traceback" not in run.err
    return lines[0]


def test_wrong_credentials(prom: PrometheusServer, dataset: Dataset, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password")
    out = tmp_path / "out"
    for args in (["--prometheus", prom.url, "--user", USER, "--password-file", str(wrong)],
                 ["--prometheus", prom.url_with(USER, "guess")],
                 ["--prometheus", prom.url]):
        run = collector("export", "--since", str(dataset.core), "--out", str(out), *args)
        line = one_error_line(run, 1)
        assert "401" in line and "--password-file" in line
        assert "not-the-password" not in line and "guess" not in line
    assert list(tmp_path.iterdir()) == [wrong]


def test_a_missing_path_prefix_is_explained(prom: PrometheusServer, dataset: Dataset,
                                            password_file: Path) -> None:
    run = collector("peaks", "--since", str(dataset.core), "--prometheus",
                    f"http://127.0.0.1:{prom.port}", "--user", USER,
                    "--password-file", str(password_file))
    line = one_error_line(run, 1)
    # Prometheus: 404; VictoriaMetrics: 400 "missing -http.pathPrefix"; the advice is one
    assert ("404" if keeps_nan(prom) else "400") in line and "path prefix" in line


def test_prometheus_error_text_is_passed_on(prom: PrometheusServer) -> None:
    with (PrometheusClient(ConnectionSettings(prom.url_with(USER, PASSWORD))) as client,
          pytest.raises(PrometheusError, match=r"bad_data: .*parse error|unparsed data") as err):
        client.query("sum(", 0)
    assert err.value.status in (400, 422) and not err.value.splittable
    assert PASSWORD not in str(err.value)


def test_no_data_and_unknown_workers(prom: PrometheusServer, dataset: Dataset,
                                     password_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = collector("export", "--since", str(dataset.t0 - 3600), "--until",
                    str(dataset.t0 - 60), "--out", str(out), *auth(prom, password_file))
    assert "no GPU series" in one_error_line(run, 1)
    run = collector("export", "--since", str(dataset.core), "--until", str(dataset.core + 60),
                    "--workers", "w-a", "w-zz", "--out", str(out), *auth(prom, password_file))
    assert "'w-zz'" in one_error_line(run, 1)
    run = collector("export", "--since", str(dataset.core + 60), "--until",
                    str(dataset.core), "--out", str(out), *auth(prom, password_file))
    assert "before the end" in one_error_line(run, 2)
    assert not out.exists()


def test_a_worker_scraped_just_before_and_after_a_short_range_is_exported(
        prom: PrometheusServer, dataset: Dataset, password_file: Path, tmp_path: Path) -> None:
    """[C+101, C+104]: w-b is sampled inside (102.5), w-a at 100 and 105 only: its interval
    across the range still holds its share, so it is a worker of the range, its file
    without rows, and a warning says so; a range that holds both is quiet about it."""
    out = tmp_path / "short"
    run = collector("export", "--since", str(dataset.core + 101), "--until",
                    str(dataset.core + 104), "--out", str(out), *auth(prom, password_file))
    assert run.code == 0, run.err
    assert [r["worker"] for r in read_csv(out / "workers.csv")] == ["w-a", "w-b"]
    assert read_csv(out / "w-a.csv") == [] and len(read_csv(out / "w-b.csv")) == 1
    assert "1 worker(s) have no GPU sample inside the range (scraped just before and after " \
           "it: w-a)" in run.err, run.err
    run = collector("export", "--since", str(dataset.core + 101), "--until",
                    str(dataset.core + 106), "--out", str(tmp_path / "both"),
                    *auth(prom, password_file))
    assert run.code == 0 and "no GPU sample inside" not in run.err, run.err
    # past the data's end (w-a's last sample at 600, w-b's at 597.5): scraped before it,
    # never after, so no interval lies across it: nothing measured it
    run = collector("export", "--since", str(dataset.core + 600.5), "--until",
                    str(dataset.core + 601), "--out", str(tmp_path / "after"),
                    *auth(prom, password_file))
    assert "no GPU series" in one_error_line(run, 1)
    assert not (tmp_path / "after").exists()


def queries_served(prom: PrometheusServer) -> float:
    """Instant and range queries the store has answered, from its own /metrics."""
    status, text = prom.get("/metrics")
    assert status == 200, text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(("prometheus_http_requests_total{", "vm_http_requests_total{")) \
                and re.search(r'(handler|path)="[^"]*/api/v1/query(_range)?"', line):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize("command", ["export", "peaks", "report"])
def test_a_long_range_without_data_costs_a_few_queries_not_one_per_chunk(
        prom: PrometheusServer, dataset: Dataset, password_file: Path, tmp_path: Path,
        command: str) -> None:
    """Ten thousand years before the data, or the right years for a cluster that is not
    there: the one-line error after a handful of queries (chunk by chunk, a year alone was
    8,760 queries and a minute)."""
    out = ["--out", str(tmp_path / "out")] if command != "peaks" else []
    before = queries_served(prom)
    run = collector(command, "--since", "10000y", "--until", str(dataset.t0 - 60), *out,
                    *auth(prom, password_file))
    assert "no GPU series (dask_gpu_info)" in one_error_line(run, 1)
    run = collector(command, "--since", "1y", "--cluster", "nosuch", *out,
                    *auth(prom, password_file))
    assert "no GPU series of Dask cluster 'nosuch'" in one_error_line(run, 1)
    assert queries_served(prom) - before <= 12
    # a short range, read for the cluster named alone: what is there says why not
    run = collector(command, "--since", str(dataset.t0), "--until", str(dataset.t0 + 600),
                    "--cluster", "nosuch", *out, *auth(prom, password_file))
    assert re.search(r"no GPU series of Dask cluster 'nosuch' .* \(clusters: '",
                     one_error_line(run, 1))


def test_tls_with_a_private_ca_and_a_client_certificate(blocks: Path, dataset: Dataset,
                                                       tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path / "tls")
    with run_prometheus(tmp_path / "prom", blocks=blocks, tls=tls) as server:
        base = ["peaks", "--since", str(dataset.core), "--until", str(dataset.core + 600),
                "--workers", "w-b", "--json", "--prometheus", server.url, "--retries", "0"]
        client = ["--cert", str(tls.client_cert), "--key", str(tls.client_key)]
        run = collector(*base, "--ca-file", str(tls.ca), *client)
        assert run.code == 0, run.err
        assert [p["worker"] for p in json.loads(run.out)] == ["w-b"]
        line = one_error_line(collector(*base, *client), 1)         # the CA is unknown
        assert "certificate verify failed" in line and "--ca-file" in line
        one_error_line(collector(*base, "--ca-file", str(tls.ca)), 1)  # no client certificate


def test_a_failure_in_the_middle_leaves_no_file(blocks: Path, dataset: Dataset,
                                                tmp_path: Path) -> None:
    """Prometheus goes away after two of fifty workers were written: no CSV, no staging
    folder."""
    with run_prometheus(tmp_path / "prom", blocks=blocks) as server:
        seen: list[str] = []

        def stop_at_third(info: WorkerInfo, *_: object) -> None:
            seen.append(info.name)
            if len(seen) == 3:
                server.stop()

        out = tmp_path / "out"
        with (PrometheusClient(ConnectionSettings(server.url, retries=0)) as client,
              pytest.raises(PrometheusError, match="cannot reach Prometheus")):
            export(client, dataset.many, dataset.many + 60, out,
                   visiting=Visiting(stop_at_third))
    assert len(seen) >= 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prom"]


def test_the_command_runs_as_a_program(prom: PrometheusServer, dataset: Dataset,
                                       tmp_path: Path) -> None:
    """``python -m dask_metrics.collector``, the URL (with credentials) from the environment;
    stderr is
    not a terminal, so no progress; --quiet, so no summary."""
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", ENV_URL: prom.url_with(USER, PASSWORD)}
    result = collector_process("export", "--since", str(dataset.core), "--until",
                               str(dataset.core + 60), "--workers", "w-b", "--out", str(out),
                               "--quiet", env=env)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert len(read_csv(out / "w-b.csv")) == 12
    result = collector_process("export", "--since", "soon", env=env)
    assert result.returncode == 2
    assert result.stderr.startswith("collector: error: --since: 'soon' is not a time")
    assert len(result.stderr.splitlines()) == 1
