"""The collector's pure logic: WHEN parsing, chunk plans, edge deduplication, the as-of join,
rows and CSV layouts, connection settings. No server: these rules are checked exactly."""

from __future__ import annotations

import csv
import io
import math
import random
from datetime import datetime, timezone
from pathlib import Path

import pytest

from dask_metrics.collector.cli.options import Terminal, cli_option
from dask_metrics.collector.errors import (
    ArgumentError,
    CollectorError,
    PrometheusError,
    UsageError,
    setting,
)
from dask_metrics.collector.model.columns import (
    COLUMNS,
    NAMES,
    PEAK_METRIC,
    USED_METRIC,
    WHEN_PRESENT,
    Column,
    is_default,
    select,
    source_metrics,
)
from dask_metrics.collector.model.jobs import JobNames
from dask_metrics.collector.model.series import (
    NOTHING_RAN,
    Series,
    Timeline,
    WorkerInfo,
    clip,
    cluster_timeline,
    grid_halver,
    halve_range,
    merge,
    natural_key,
    plan_chunks,
    plan_step_chunks,
    select_workers,
    worker_inventory,
)
from dask_metrics.collector.model.tables import worker_table
from dask_metrics.collector.model.timeline import span_timeline, worker_timeline
from dask_metrics.collector.model.timespec import (
    MONITOR,
    format_duration,
    format_rfc3339,
    parse_duration,
    parse_when,
)
from dask_metrics.collector.output.csv_lines import (
    format_value,
    safe_file_names,
    seed_header,
    seed_lines,
    tidy_columns,
    tidy_header,
    tidy_lines,
    workers_rows,
)
from dask_metrics.collector.peaks.fold import gpu_peaks
from dask_metrics.collector.peaks.peak import Peak
from dask_metrics.collector.peaks.table import caveats, format_table
from dask_metrics.collector.query.batches import (
    SAMPLES_PER_QUERY,
    WIDEST_CHUNKS,
    batch_chunk,
    range_batches,
    worker_batches,
)
from dask_metrics.collector.query.pieces import Piece, pieces
from dask_metrics.collector.query.presence import read_span
from dask_metrics.collector.query.ranges import check_step
from dask_metrics.collector.query.scope import worker_matchers
from dask_metrics.collector.store.answer import decode
from dask_metrics.collector.store.connection import (
    load_config,
    parse_header,
    parse_timeout,
    resolve,
)
from dask_metrics.collector.store.redaction import Scrubber, redact_url, split_credentials
from dask_metrics.collector.store.transport import Answer, Transport

NOW = 1_700_000_000.0


# ---- timespec ------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=timezone.utc).timestamp()),
    ("2024-05-01T14:00:00.250+02:00",
     datetime(2024, 5, 1, 12, tzinfo=timezone.utc).timestamp() + 0.25),
    ("2024-05-01 12:00:00z", datetime(2024, 5, 1, 12, tzinfo=timezone.utc).timestamp()),
    ("1700000000", 1_700_000_000.0),
    ("1700000000.5", 1_700_000_000.5),
    ("90s", NOW - 90),
    ("15m", NOW - 900),
    ("2h", NOW - 7200),
    ("1h30m", NOW - 5400),
    ("500ms", NOW - 0.5),
    ("now", NOW),
    ("monitor", MONITOR),
])
def test_when_forms(text: str, expected: float | str) -> None:
    assert parse_when(text, NOW) == expected


@pytest.mark.parametrize(("text", "hint"), [
    ("90", "add a unit"),                       # a duration without its unit
    ("yesterday", "RFC 3339"),
    ("2024-05-01T12:00:00", "RFC 3339"),        # no offset: ambiguous
    ("2024-13-01T12:00:00Z", "not a valid time"),
    ("-2h", "RFC 3339"),
    ("2h30", "RFC 3339"),
])
def test_bad_when_says_what_is_accepted(text: str, hint: str) -> None:
    with pytest.raises(ValueError, match=hint):
        parse_when(text, NOW)


def test_durations() -> None:
    assert parse_duration("15") == 15
    assert parse_duration("1d") == 86400
    assert format_duration(120) == "2m"
    assert format_duration(3600) == "1h"
    assert format_duration(90) == "90s"
    assert format_duration(0.5) == "500ms"
    with pytest.raises(ValueError):
        parse_duration("15 minutes")


def test_rfc3339_output_is_utc_with_milliseconds() -> None:
    assert format_rfc3339(1_700_000_000_250) == "2023-11-14T22:13:20.250Z"
    assert format_rfc3339(1_700_000_000_000) == "2023-11-14T22:13:20.000Z"


# ---- chunks and edges ----------------------------------------------------------------------


def test_pieces_tile_the_data_and_share_their_windows_edges() -> None:
    # rows [lo, hi] in consecutive pieces; windows from the range's start to its end, each
    # edge shared; a piece reads what ran up to reach past its window, the last to hi
    assert pieces(100, 9_699, 0, 12_000, 3_000, 500) == [
        Piece(100, 3_099, 3_600, (0, 3_100)), Piece(3_100, 6_099, 6_600, (3_100, 6_100)),
        Piece(6_100, 9_699, 9_699, (6_100, 12_000))]  # a last 600 ms rode along
    assert pieces(100, 10_099, 0, 12_000, 3_000, 500)[-1] == Piece(9_100, 10_099, 10_099,
                                                                   (9_100, 12_000))
    assert pieces(0, 2_000, 0, 2_000, 3_000, 500) == [Piece(0, 2_000, 2_000, (0, 2_000))]
    # on a step grid from lo, every piece starts on it
    grid = pieces(1_000, 100_000, 1_000, 100_000, 25_000, 500, step=7_000)
    assert all((p.lo - 1_000) % 7_000 == 0 for p in grid) and len(grid) == 5  # 21 s each
    for found in (grid, pieces(5, 99_999, 0, 100_000, 1_000, 10)):
        assert [(a.hi + 1, a.window[1]) for a in found[:-1]] == [(b.lo, b.lo)
                                                                 for b in found[1:]]


def test_raw_chunks_cover_the_range_once() -> None:
    assert plan_chunks(0, 10_000, 3_000) == [(0, 3000), (3000, 6000), (6000, 9000),
                                             (9000, 10_000)]
    assert plan_chunks(5, 5, 3_000) == [(5, 5)]
    # a last piece of up to a quarter chunk (the minutes read around a range) rides along
    assert plan_chunks(0, 9_750, 3_000) == [(0, 3000), (3000, 6000), (6000, 9750)]
    assert plan_chunks(0, 9_751, 3_000) == [(0, 3000), (3000, 6000), (6000, 9000),
                                            (9000, 9751)]
    assert plan_chunks(0, 3_100, 3_000) == [(0, 3100)]
    assert halve_range(0, 10_000) == ((0, 5000), (5000, 10_000))
    assert halve_range(0, 1000) is None


def test_step_chunks_stay_under_the_point_limit_and_share_no_point() -> None:
    chunks = plan_step_chunks(0, 12_000_000, 1000, 11_000)
    assert chunks == [(0, 10_999_000), (11_000_000, 12_000_000)]
    points = [p for lo, hi in chunks for p in range(lo, hi + 1, 1000)]
    assert points == list(range(0, 12_000_001, 1000))
    assert all((hi - lo) // 1000 + 1 <= 11_000 for lo, hi in chunks)
    assert plan_step_chunks(0, 2500, 1000, 11_000) == [(0, 2000)]  # the grid stops at 2000
    halves = grid_halver(1000)(0, 4000)
    assert halves == ((0, 1000), (2000, 4000))
    assert grid_halver(1000)(3000, 3000) is None


def test_data_is_read_a_margin_around_it_within_the_range_on_its_grid() -> None:
    """The scheduler's scrapes around a narrowed range's first and last samples are read,
    as a range read whole would have them."""
    assert read_span(500_000, 900_000, 0, 10**6, 60_000) == (440_000, 960_000)
    assert read_span(30_000, 990_000, 0, 10**6, 60_000) == (0, 10**6)  # within the range
    assert read_span(500_000, 900_000, 1_000, 10**6, 60_000, step=15_000) == (436_000, 960_000)
    assert read_span(500_000, 900_000, 1_000, 10**6, 0, step=15_000) == (496_000, 900_000)


def test_samples_on_chunk_edges_are_kept_once() -> None:
    # A closed range selector returns the edge sample in both chunks (Prometheus 2).
    first = [Series({"a": "1"}, [0, 1000, 2000], [1.0, 2.0, 3.0])]
    second = [Series({"a": "1"}, [2000, 3000], [3.0, 4.0])]
    pieces = clip(first, 0, 2000, include_lo=True) + clip(second, 2000, 4000, include_lo=False)
    assert merge(pieces) == [Series({"a": "1"}, [0, 1000, 2000, 3000], [1.0, 2.0, 3.0, 4.0])]
    # The 1 ms added to the first window (for left-open ranges) never leaks a sample.
    assert clip([Series({}, [-1, 0], [0.0, 1.0])], 0, 10, include_lo=True) == [
        Series({}, [0], [1.0])]
    assert clip([Series({}, [-1], [0.0])], 0, 10, include_lo=True) == []


def test_overlapping_pieces_merge_in_time_order_and_the_first_piece_wins() -> None:
    pieces = [Series({"a": "1"}, [1000, 3000], [1.0, 3.0]),
              Series({"a": "1"}, [0, 1000, 2000], [0.0, 9.0, 2.0])]
    assert merge(pieces) == [Series({"a": "1"}, [0, 1000, 2000, 3000], [0.0, 1.0, 2.0, 3.0])]


# ---- the as-of join ------------------------------------------------------------------------


def _series(points: dict[int, float], **labels: str) -> Series:
    times = sorted(points)
    return Series(labels, times, [points[t] for t in times])


def test_cluster_state_is_the_last_scrape_at_or_before() -> None:
    job = _series({1000: -1, 2000: 0, 3000: 0})
    dag = _series({1000: -1, 2000: 0, 3000: 1})
    timeline = cluster_timeline([job], [dag])
    age = 60_000
    assert timeline.at(999, age) == NOTHING_RAN            # before the first scrape
    assert timeline.at(1000, age) == NOTHING_RAN           # -1 is idle
    assert timeline.at(1999, age) == NOTHING_RAN           # just before the scrape that says job 0
    assert timeline.at(2000, age) == ("0", "0")     # exactly at it
    assert timeline.at(2999, age) == ("0", "0")
    assert timeline.at(3000, age) == ("0", "1")
    assert timeline.at(3000 + age, age) == ("0", "1")
    assert timeline.at(3001 + age, age) == NOTHING_RAN     # the scheduler was not scraped since


def test_worker_state_is_absent_when_idle_and_the_oldest_dag_when_several() -> None:
    scrapes = [1000, 2000, 3000, 4000]
    tasks = [_series({2000: 3, 3000: 1}, job_id="9", dag_id="2"),
             _series({3000: 2}, job_id="10", dag_id="0"),
             _series({3000: 5}, job_id="9", dag_id="10")]
    timeline = worker_timeline(scrapes, tasks)
    assert timeline.at(1500, 10_000) == NOTHING_RAN
    assert timeline.at(2000, 10_000) == ("9", "2")
    assert timeline.at(3500, 10_000) == ("9", "2")  # 9 < 10 numerically; dag 2 < dag 10
    assert timeline.at(4000, 10_000) == NOTHING_RAN         # series absent from that scrape


def test_gpu_tables_keep_gaps_and_join_restarted_series() -> None:
    used = [_series({0: 10.0, 5000: 20.0}, gpu="0", uuid="U0", instance="a:1"),
            _series({60_000: 30.0}, gpu="0", uuid="U0", instance="a:2")]  # after a restart
    total = [_series({0: 100.0, 5000: 100.0, 60_000: 100.0}, gpu="0", uuid="U0")]
    power = [_series({0: math.nan, 5000: 7.0}, gpu="0", uuid="U0")]
    columns = select(["total-mem", "mem-util", "power"])
    empty = cluster_timeline([], [])
    table = worker_table({"dask_gpu_memory_used_bytes": used, "dask_gpu_memory_total_bytes": total,
                          "dask_gpu_power_watts": power}, columns, empty, empty, 1000)
    [gpu] = table.gpus
    assert table.times == gpu.times == [0, 5000, 60_000]
    assert gpu.columns[:2] == [[10.0, 20.0, 30.0], [10.0, 20.0, 30.0]]
    assert math.isnan(gpu.columns[2][0])
    assert gpu.columns[2][2] is None                 # no power sample after the restart
    assert table.rows == 3


# ---- columns, layouts ----------------------------------------------------------------------


def by_name_of(name: str) -> Column:
    return next(c for c in COLUMNS if c.name == name)


def test_columns() -> None:
    assert NAMES == ("total-mem", "mem-util", "compute-util", "peak-mem", "mem-bw-util",
                     "power", "temperature", "sm-clock", "energy", "sm-active", "sm-occupancy",
                     "tensor-active", "dram-active", "fp64-active", "fp32-active",
                     "fp16-active", "busy-seconds", "sm-active-seconds",
                     "tensor-active-seconds", "worker-mem", "worker-spilled", "worker-cpu",
                     "worker-tasks", "rmm-used", "rmm-pool")
    # the activity, counter and worker columns by name (or, some, where present)
    assert [c.name for c in select(None)] == list(NAMES[:9])
    assert [c.name for c in WHEN_PRESENT] == [*NAMES[9:16], "rmm-used", "rmm-pool"]
    assert is_default(None) and is_default(list(reversed(NAMES[:9])))
    assert not is_default(NAMES[:8]) and not is_default([*NAMES[:9], "rmm-used"])
    assert by_name_of("tensor-active").values([0.6], [None]) == [60]
    assert [c.name for c in select(["energy", "mem-util"])] == ["mem-util", "energy"]
    assert source_metrics(select(["mem-util"])) == ["dask_gpu_memory_used_bytes",
                                                     "dask_gpu_memory_total_bytes"]
    with pytest.raises(ValueError, match=r"unknown metric 'gpu-util'.*known: total-mem"):
        select(["gpu-util"])
    by_name = {c.name: c for c in COLUMNS}
    assert by_name["compute-util"].values([0.29, None], [None, None]) == [29, None]
    assert by_name["sm-clock"].values([1_410_000_000], [None]) == [1410]
    assert by_name["mem-util"].values([4.0, 4.0, 4.0, None], [16.0, None, 0.0, 16.0]) == [
        25, None, None, None]


def test_value_format() -> None:
    assert [format_value(v) for v in (None, math.nan, math.inf, -math.inf, 2.0**40, 12.5,
                                      0.1)] == ["", "NaN", "+Inf", "-Inf", "1099511627776",
                                                "12.5", "0.1"]


def test_file_names_are_safe_and_distinct() -> None:
    names = safe_file_names(["tcp://10.0.0.1:4000", "workers", "Workers", "a/b", "a_b", ".x"],
                            "tidy")
    assert names == {"tcp://10.0.0.1:4000": "tcp___10.0.0.1_4000.csv", "workers": "workers_2.csv",
                     "Workers": "Workers_3.csv", "a/b": "a_b.csv", "a_b": "a_b_2.csv",
                     ".x": "x.csv"}
    assert safe_file_names(["b", "a"], "seed") == {"b": "worker_0.csv", "a": "worker_1.csv"}


def test_long_worker_names_give_short_distinct_file_names() -> None:
    """A 300-character name made every export fail (File name too long)."""
    long_a, long_b = "L" * 300, "L" * 299 + "M"
    names = safe_file_names([long_a, long_b, "é" * 200], "tidy")
    assert len(set(names.values())) == 3
    assert all(len(n.encode()) <= 130 for n in names.values()), names
    assert names[long_a].startswith("L" * 100) and names[long_a].endswith(".csv")
    assert safe_file_names([long_a], "tidy") == {long_a: names[long_a]}  # the same every time


def test_natural_order() -> None:
    assert sorted(["w-10", "w-2", "w-1", "v"], key=natural_key) == ["v", "w-1", "w-2", "w-10"]


def test_tidy_and_seed_lines() -> None:
    columns = select(["total-mem", "power"])
    used = [_series({1000: 5.0, 2000: 6.0}, gpu="0", uuid="U0"),
            _series({1000: 7.0}, gpu="1", uuid="U1")]
    power = [_series({1000: 50.0}, gpu="0", uuid="U0")]
    cluster = cluster_timeline([_series({0: 3})], [_series({0: 1})])
    worker = worker_timeline([0], [_series({0: 1}, job_id="3", dag_id="0")])
    table = worker_table({"dask_gpu_memory_used_bytes": used, "dask_gpu_power_watts": power},
                         columns, cluster, worker, 10_000)
    assert tidy_header(columns)[:9] == ["timestamp", "time", "worker", "gpu", "uuid", "job",
                                        "dag", "worker_job", "worker_dag"]
    assert list(tidy_lines("w", table, 0)) == [
        "1.000,1970-01-01T00:00:01.000Z,w,0,U0,3,1,3,0,5,50",
        "1.000,1970-01-01T00:00:01.000Z,w,1,U1,3,1,3,0,7,",
        "2.000,1970-01-01T00:00:02.000Z,w,0,U0,3,1,3,0,6,"]
    assert seed_header(columns) == ["job", "dag", "timestamp", "total-mem", "power"]
    assert list(seed_lines(table, 1000)) == ['3,1,0.000,"5, 7","50, NaN"',
                                             '3,1,1.000,"6, NaN","NaN, NaN"']


def test_tidy_columns_are_the_tidy_rows_column_wise() -> None:
    """Parquet's columns hold the tidy lines' rows in their order (GPUs with different sample
    times merged by time, GPU order at equal times), no job as None, no sample as None."""
    columns = select(["total-mem", "power"])
    used = [_series({2000: 6.0, 1000: 5.0, 3000: math.nan}, gpu="0", uuid="U0"),
            _series({1000: 7.0, 2500: 8.0}, gpu="1", uuid="U1")]
    power = [_series({1000: 50.0}, gpu="0", uuid="U0")]
    cluster = cluster_timeline([_series({0: 3})], [_series({0: 1})])
    worker = worker_timeline([0], [_series({2000: 1}, job_id="3", dag_id="0")])
    table = worker_table({"dask_gpu_memory_used_bytes": used, "dask_gpu_power_watts": power},
                         columns, cluster, worker, 10_000)
    keys, values = tidy_columns(table)
    lines = [line.split(",") for line in tidy_lines("w", table, 0)]
    assert keys["time"] == [round(float(f[0]) * 1000) for f in lines] == [1000, 1000, 2000,
                                                                          2500, 3000]
    for i, name in enumerate(("gpu", "uuid", "job", "dag", "worker_job", "worker_dag"), 3):
        assert [v or "" for v in keys[name]] == [f[i] for f in lines]
    assert keys["worker_job"][:2] == [None, None]
    assert [[format_value(v) for v in column] for column in values] == [
        [f[9 + c] for f in lines] for c in range(2)]
    assert values[1][1] is None and math.isnan(values[0][4])


def test_lines_are_what_csv_writes_row_by_row() -> None:
    """Lines are joined from columns; the fields that may need quoting go through csv."""
    columns = select(["total-mem"])
    used = [_series({1000: 5.0}, gpu="0", uuid='U,"0"'), _series({2000: 6.0}, gpu="1", uuid="U1")]
    worker = worker_timeline([1000], [_series({1000: 1}, job_id="3,4", dag_id="0")])
    table = worker_table({"dask_gpu_memory_used_bytes": used}, columns,
                         cluster_timeline([], []), worker, 10_000)
    rows = [["1.000", "1970-01-01T00:00:01.000Z", "a,b", "0", 'U,"0"', "", "", "3,4", "0", "5"],
            ["2.000", "1970-01-01T00:00:02.000Z", "a,b", "1", "U1", "", "", "3,4", "0", "6"]]
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    assert "".join(f"{line}\n" for line in tidy_lines("a,b", table, 0)) == text.getvalue()
    assert list(seed_lines(table, 0)) == [',,1.000,"5, NaN"', ',,2.000,"NaN, 6"']


def test_workers_inventory_and_selection() -> None:
    gpu_info = [{"worker": "w-10", "gpu": "1", "uuid": "B", "hostname": "h2"},
                {"worker": "w-10", "gpu": "0", "uuid": "A", "hostname": "h1"},
                {"worker": "w-2", "gpu": "0", "uuid": "C", "hostname": "h1", "simulated": "true"}]
    sched = [{"worker": "w-10", "address": "tcp://x:1"}, {"worker": "w-10", "address": "tcp://x:2"},
             {"worker": "gone", "address": "tcp://y:1"}]
    found = worker_inventory(gpu_info, sched)
    assert found == [WorkerInfo("w-2", [], ["h1"], [("0", "C")], simulated=True),
                     WorkerInfo("w-10", ["tcp://x:1", "tcp://x:2"], ["h2", "h1"],
                                [("0", "A"), ("1", "B")])]
    assert [row[-1] for row in workers_rows(found)] == ["true", "false"]
    assert [w.name for w in select_workers(found, ["w-1*"])] == ["w-10"]
    assert select_workers(found, None) == found
    with pytest.raises(LookupError, match="w-3"):
        select_workers(found, ["w-2", "w-3"])


# ---- connection settings -------------------------------------------------------------------


def test_url_credentials_are_split_off_and_redacted() -> None:
    assert split_credentials("http://al%40ice:p%3Ass@host:9090/prom/") == (
        "http://host:9090/prom", "al@ice", "p:ss")
    assert split_credentials("localhost:9090") == ("http://localhost:9090", None, None)
    assert redact_url("see https://u:secret@host/x") == "see https://host/x"
    with pytest.raises(ValueError, match="without"):
        split_credentials("http://host/?x=1")


def test_resolve_precedence_and_secrets(tmp_path: Path) -> None:
    password = tmp_path / "pw"
    password.write_text("hunter2\n")
    token = tmp_path / "token"
    token.write_text("tok")
    env = {"DASK_METRICS_PROMETHEUS_URL": "http://env:9090"}
    settings = resolve({"user": "bob", "password_file": str(password),
                        "header": ["X-Scope-OrgID: t1"], "timeout": "3,30"}, env)
    assert (settings.url, settings.user, settings.password) == ("http://env:9090", "bob",
                                                                "hunter2")
    assert settings.headers == (("X-Scope-OrgID", "t1"),)
    assert (settings.connect_timeout, settings.read_timeout) == (3, 30)
    assert "hunter2" not in repr(settings)
    from_url = resolve({"prometheus": "http://u:pw@cli:1"}, env)
    assert (from_url.url, from_url.user, from_url.password) == ("http://cli:1", "u", "pw")
    assert resolve({"bearer_token_file": str(token)}, env).bearer_token == "tok"
    for bad, message in (({}, "no Prometheus URL"),
                         ({"prometheus": "h", "user": "bob"}, "needs --password-file"),
                         ({"prometheus": "h", "password_file": str(password)}, "needs --user"),
                         ({"prometheus": "http://u:p@h", "bearer_token_file": str(token)},
                          "not both"),
                         ({"prometheus": "h", "retries": "x"}, "--retries"),
                         ({"prometheus": "h", "ca_file": str(tmp_path / "none")}, "no such"),
                         ({"prometheus": "ftp://h"}, "http")):
        with pytest.raises(UsageError, match=message):
            resolve(bad, {})


def test_config_file(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret")
    config = tmp_path / "collector.yaml"
    config.write_text("prometheus: https://mimir.example/prometheus\nuser: bob\n"
                      "password-file: pw\nheaders:\n  X-Scope-OrgID: team-a\ntimeout: 10\n")
    settings = resolve({}, {}, load_config(str(config)))
    assert settings.password == "s3cret"          # relative to the config file's folder
    assert settings.headers == (("X-Scope-OrgID", "team-a"),)
    assert settings.read_timeout == 10
    assert resolve({"prometheus": "http://cli:1"}, {}, load_config(str(config))).url == (
        "http://cli:1")
    config.write_text("prometheus: x\npasword-file: pw\n")
    with pytest.raises(UsageError, match="unknown key 'pasword-file'"):
        load_config(str(config))
    with pytest.raises(UsageError, match="No such file"):
        load_config(str(tmp_path / "missing.yaml"))


def test_compression_option(tmp_path: Path) -> None:
    assert resolve({"prometheus": "h"}, {}).compression == "gzip"
    assert resolve({"prometheus": "h", "compression": "none"}, {}).compression == "none"
    config = tmp_path / "collector.yaml"
    config.write_text("prometheus: h\ncompression: none\n")
    assert resolve({}, {}, load_config(str(config))).compression == "none"
    assert resolve({"compression": "gzip"}, {}, load_config(str(config))).compression == "gzip"
    with pytest.raises(UsageError, match="--compression expects gzip or none"):
        resolve({"prometheus": "h", "compression": "br"}, {})
    plain = Transport(resolve({"prometheus": "h", "compression": "none"}, {}), str)
    assert plain.session.headers["Accept-Encoding"] == "identity"
    assert "gzip" in Transport(resolve({"prometheus": "h"}, {}), str).session.headers[
        "Accept-Encoding"]


def test_read_api_option(tmp_path: Path) -> None:
    assert resolve({"prometheus": "h"}, {}).read_api == "query"
    assert resolve({"prometheus": "h", "read_api": "export"}, {}).read_api == "export"
    config = tmp_path / "collector.yaml"
    config.write_text("prometheus: h\nread-api: Remote-Read\n")
    assert resolve({}, {}, load_config(str(config))).read_api == "remote-read"
    assert resolve({"read_api": "query"}, {}, load_config(str(config))).read_api == "query"
    with pytest.raises(UsageError, match="--read-api expects query, remote-read, export"):
        resolve({"prometheus": "h", "read_api": "grpc"}, {})


def test_header_and_timeout_syntax() -> None:
    assert parse_header("X-Scope-OrgID:t1") == ("X-Scope-OrgID", "t1")
    assert parse_timeout("20") == (5, 20)
    for bad in ("no-colon", ": value", "Bad Name: x"):
        with pytest.raises(UsageError, match="NAME:VALUE"):
            parse_header(bad)
    with pytest.raises(UsageError):
        parse_timeout("0")


# ---- progress ------------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal_and_not_quiet() -> None:
    tty = _Tty()
    now = [100.0]
    ui = Terminal(quiet=False, stream=tty, clock=lambda: now[0])
    ui.progress(0, 2, "w-1")
    ui.warning("careful")
    now[0] += 30  # the first worker took 30 s: the second should too
    ui.progress(1, 2, "w-2")
    ui.progress(2, 2, "")
    assert "worker 1/2: w-1\033[K" in tty.getvalue()
    assert "worker 2/2: w-2, about 30 s left" in tty.getvalue()
    assert "\rcollector: warning: careful\n" in tty.getvalue().replace("\033[K", "")
    now[0] = 200.0
    ui.progress(0, 4, "w-1", 0)
    now[0] += 20
    ui.progress(1, 4, "w-2", 1_500_000)  # what the export has written so far, and its pace
    assert "worker 2/4: w-2, 1.5 M rows, 75 k rows/s, about 60 s left" in tty.getvalue()
    now[0] = 300.0  # a long range: the first batch of 2 workers three quarters done
    ui.progress(0, 4, "w-1", 0)
    now[0] += 60
    ui.progress(1.5, 4, "w-1", 60_000)
    assert "worker 2/4: w-1, 60 k rows, 1 k rows/s, about 2 min left" in tty.getvalue()
    for quiet, stream in ((True, _Tty()), (False, io.StringIO())):
        ui = Terminal(quiet=quiet, stream=stream)
        ui.progress(0, 2, "w-1")
        ui.info("done")
        assert "worker" not in stream.getvalue()


# ---- HA replicas ---------------------------------------------------------------------------


def test_replica_copies_merge_into_one_series_the_first_replica_winning() -> None:
    a = Series({"m": "x", "prometheus_replica": "a"}, [0, 5000, 10000, 30000], [1.0, 2.0, 3.0, 4.0])
    b = Series({"m": "x", "prometheus_replica": "b"}, [400, 5400, 15400, 20400, 30000],
               [9.0, 9.0, 9.5, 9.6, 9.9])
    # b's samples near a's are dropped (a scraper 0.4 s later), those in a's gap are kept,
    # and where both have a time a's value wins
    assert merge([b, a], ("prometheus_replica",)) == [
        Series({"m": "x"}, [0, 5000, 10000, 15400, 20400, 30000], [1.0, 2.0, 3.0, 9.5, 9.6, 4.0])]
    # without the replica label they are two series
    assert len(merge([a, b])) == 2


def test_series_without_replica_labels_merge_as_before() -> None:
    pieces = [Series({"a": "1"}, [0, 1000], [1.0, 2.0]), Series({"a": "1"}, [2000], [3.0])]
    assert merge(pieces, ("prometheus_replica", "replica")) == [
        Series({"a": "1"}, [0, 1000, 2000], [1.0, 2.0, 3.0])]


# ---- peaks: the first peak window after --since --------------------------------------------


def _gpu(metric: str, times: list[int], values: list[float]) -> Series:
    return Series({"__name__": metric, "gpu": "0", "uuid": "GPU-0"}, times, values)


def test_a_peak_carried_from_before_the_start_is_not_the_sessions():
    """The gauge's first sample holds 10 GiB from before the start (its window reaches back);
    used memory never goes above 1 GiB. Without an in-session spike the peak is 1 GiB; a later
    gauge value above the carried one (a spike no scrape saw) is the session's own."""
    gib, since = 2**30, 1_000_000
    times = [since + 1000 * k for k in range(1, 11)]  # ten scrapes in the first window
    used = _gpu(USED_METRIC, times, [1 * gib] * 10)
    idle = Timeline([], [])
    carried = _gpu(PEAK_METRIC, times, [10 * gib] * 10)  # 10 GiB until the window moves on
    (peak,) = gpu_peaks("w", {USED_METRIC: [used], PEAK_METRIC: [carried]}, idle, 0,
                        since=since, peak_window=30_000)
    assert peak.peak_bytes == 1 * gib
    (unfiltered,) = gpu_peaks("w", {USED_METRIC: [used], PEAK_METRIC: [carried]}, idle, 0)
    assert unfiltered.peak_bytes == 10 * gib  # what the gauge alone would say
    spiked = _gpu(PEAK_METRIC, times, [10 * gib] * 4 + [12 * gib] * 6)
    (peak,) = gpu_peaks("w", {USED_METRIC: [used], PEAK_METRIC: [spiked]}, idle, 0,
                        since=since, peak_window=30_000)
    assert peak.peak_bytes == 12 * gib and peak.time == times[4]


def test_peaks_are_named_by_the_job_that_ran_and_the_table_shows_the_name():
    gib = 2**30
    used = _gpu(USED_METRIC, [1000, 2000, 3000], [1.0 * gib, 5.0 * gib, 2.0 * gib])
    ran = Timeline([1000, 2000, 3000], [("", ""), ("4", "1"), ("", "")])
    names = JobNames.of([("4", "etl", "0"), ("4", "etl", "1")])
    (peak,) = gpu_peaks("w", {USED_METRIC: [used]}, ran, 10_000, names=names)
    assert (peak.job, peak.dag, peak.job_name, peak.phase) == ("4", "1", "etl", "etl · DAG 1")
    assert peak.to_json()["job_name"] == "etl"
    header, line = format_table([peak]).splitlines()
    assert header.split()[-1] == "during" and line.endswith("etl · DAG 1")
    (unnamed,) = gpu_peaks("w", {USED_METRIC: [used]}, ran, 10_000)
    assert unnamed.phase == "job 4 · DAG 1" and unnamed.to_json()["job_name"] is None


def test_a_gpu_several_workers_see_is_named_once_with_its_workers():
    """Each worker's row of a shared GPU holds the device's peak (whoever held the memory):
    one line says so, per device, naming each worker once (``--by job`` lists several rows
    per worker); GPUs of one worker each say nothing."""
    def peak(worker: str, uuid: str, job: str = "") -> Peak:
        return Peak(worker, "0", uuid, 9 * 2**30, 80 * 2**30, 1000, job, "")

    found = [peak("w0", "GPU-s", "1"), peak("w0", "GPU-s", "2"), peak("w1", "GPU-s"),
             peak("w2", "GPU-own"), peak("w3", "")]
    assert caveats(found) == ["GPU-s is seen by w0, w1: its peak is the whole device's "
                              "(every process on it, whichever worker held the memory), "
                              "listed under each"]
    assert caveats(found[3:]) == []


def test_join_lays_following_and_touching_pieces_end_to_end_as_a_merge_would() -> None:
    """join's fast path (pieces that follow one another or share one edge sample, as a
    range and the samples fetched just before and after it do) gives what the plain merge
    gives: every time once, in order, the first piece given winning a shared time."""
    import random

    from dask_metrics.collector.model.series import Series, join

    def merged(pieces: list[Series]) -> tuple[list[int], list[float]]:
        unique: dict[int, float] = {}
        for p in pieces:
            for t, v in zip(p.times, p.values, strict=True):
                unique.setdefault(t, v)
        return sorted(unique), [unique[t] for t in sorted(unique)]

    rng = random.Random(7)
    for case in range(3000):
        cuts = sorted(rng.sample(range(1, 60), rng.randint(1, 5)))
        pieces = []
        for k, (a, b) in enumerate(zip([0, *cuts], [*cuts, 60], strict=True)):
            lo = a - 1 if a and rng.random() < 0.5 else a  # touch the piece before
            times = list(range(lo, b)) if rng.random() < 0.8 else [lo]
            pieces.append(Series({"piece": str(k)}, times, [k * 100.0 + t for t in times]))
        if case % 3 == 0:  # overlapping for real: the plain merge
            pieces.append(Series({}, list(range(10, 30)), [-1.0] * 20))
        rng.shuffle(pieces)
        pieces.insert(rng.randrange(len(pieces) + 1), Series({}, [], []))
        assert join(pieces) == merged(pieces), pieces


def test_a_span_timeline_gives_the_oldest_dag_holding_the_worker_at_any_time():
    """Random overlapping spans against a brute force at every millisecond."""
    rng = random.Random(11)
    for _ in range(200):
        spans = []
        for job in range(rng.randint(1, 6)):
            begin = rng.randint(0, 400)
            spans.append((begin, begin + rng.randint(1, 300), (str(job), str(rng.randint(0, 2)))))
        max_age = rng.choice([10, 50, 1000])
        timeline = span_timeline(spans, max_age)
        for t in range(-5, 720, 3):
            held = [s for b, e, s in spans if b <= t < e]
            want = min(held, key=lambda s: (int(s[0]), int(s[1]))) if held else ("", "")
            assert timeline.at(t, max_age) == want, (spans, max_age, t)


def test_a_bad_argument_is_a_value_error_naming_the_keyword_and_the_cli_says_its_option():
    with pytest.raises(ValueError) as err:
        check_step(0, 300, 3600)
    assert isinstance(err.value, ArgumentError) and err.value.name == "step"
    assert str(err.value) == ("step 1h is longer than the range (5m): give a shorter step, or "
                              "none for raw samples")
    assert err.value.worded(cli_option).startswith("--step 1h is longer than the range (5m)")
    found = CollectorError(f"check {setting('url')}, raise {setting('read_timeout')} or "
                           f"{setting('password')}; {{job=\"x\"}} stays")
    assert str(found) == 'check url, raise read_timeout or password; {job="x"} stays'
    assert found.worded(cli_option) == ('check --prometheus, raise --timeout or '
                                        '--password-file; {job="x"} stays')


ANSWERS = [  # (status, content type, body) -> (data, or the error's words, splittable)
    (200, "application/json", b'{"status":"success","data":{"resultType":"vector","result":[]}}',
     {"resultType": "vector", "result": []}, None),
    (422, "application/json", b'{"status":"error","errorType":"execution","error":"query '
     b'processing would load too many samples into memory"}', "too many samples", True),
    (503, "application/json", b'{"status":"error","errorType":"timeout","error":"query timed '
     b'out"}', "timeout: query timed out", True),
    (400, "application/json", b'{"status":"error","errorType":"bad_data","error":"parse '
     b'error"}', "bad_data: parse error", False),
    (401, "text/plain", b"no", "refused the credentials (HTTP 401", False),
    (404, "text/plain", b"404 page not found", "not found (HTTP 404", False),
    (400, "text/plain", b"unsupported path requested", "not found (HTTP 400", False),
    (502, "text/html", b"<html>bad gateway</html>", "502 Reason after 3 retries",
     False),
    (200, "text/html", b"<!doctype html>", "not the API's JSON", False),
    (200, "application/json", b'{"status":"weird"}', "answered status 'weird'", False),
]


def snip(text: str, limit: int = 200, ends: bool = False) -> str:
    return text[:limit]


@pytest.mark.parametrize(("status", "kind", "body", "want", "splittable"), ANSWERS)
def test_an_answer_is_its_data_or_one_typed_error(status, kind, body, want, splittable):
    answer = Answer(status, "Reason", {"Content-Type": kind}, body)
    if splittable is None:
        assert decode(answer, "http://p", "the query up", 3, snip) == (want, [])
        return
    with pytest.raises(PrometheusError) as err:
        decode(answer, "http://p", "the query up", 3, snip)
    assert want in str(err.value) and err.value.status == status
    assert err.value.splittable is splittable


def test_a_long_engine_error_keeps_its_cause_and_masks_what_it_echoes():
    """VictoriaMetrics echoes the query (twice) before the limit it met: the message keeps
    the start and the cause at the end; a secret echoed in it is masked before the cut."""
    echoed = "s3cret-token " + "{__name__=~\\\"dask_gpu_memory_used_bytes\\\"} " * 12
    body = ('{"status":"error","errorType":"422","error":"error when executing query=\\"'
            + echoed + '\\": the number of matching timeseries exceeds 100; either narrow '
            'down the search or increase -search.max* command-line flag values at vmselect"}')
    answer = Answer(422, "Unprocessable", {"Content-Type": "application/json"}, body.encode())
    with pytest.raises(PrometheusError) as err:
        decode(answer, "http://p", "the query up", 3, Scrubber(["s3cret-token"]).snippet)
    text = str(err.value)
    assert "matching timeseries exceeds 100" in text and "error when executing" in text
    assert "s3cret" not in text and " … " in text and err.value.splittable
    assert len(text) < 400


def test_an_answers_warnings_come_back_with_its_data():
    body = b'{"status":"success","data":1,"warnings":["partial response"],"infos":["i"]}'
    data, notes = decode(Answer(200, "OK", {}, body), "http://p", "the query up", 3, snip)
    assert data == 1 and notes == ["Prometheus: partial response (in the query up)",
                                   "Prometheus: i (in the query up)"]


def test_workers_are_batched_in_order_within_the_sample_budget() -> None:
    """Consecutive workers, each batch's GPUs' samples within the limit and the batch within
    the most workers; a worker larger than the limit is a batch alone, none is left out."""
    fleet = [WorkerInfo(f"w-{i}", [], [], [(str(g), f"GPU-{i}-{g}") for g in range(gpus)])
             for i, gpus in enumerate([8, 8, 8, 1, 2, 8, 0, 4])]
    batches = worker_batches(fleet, 1000.0, limit=17_000, most=3)
    assert [w for b in batches for w in b] == fleet
    assert [[w.name for w in b] for b in batches] == [
        ["w-0", "w-1"], ["w-2", "w-3", "w-4"], ["w-5", "w-6", "w-7"]]
    assert worker_batches(fleet, 10**6, limit=17_000) == [[w] for w in fleet]
    assert worker_batches([], 1.0) == []


def test_a_range_held_whole_is_held_a_few_workers_at_a_time_and_read_in_few_queries():
    """peaks and the report hold a batch's whole range: its batches are sized by all of the
    range's chunks (a day is 24 hours' samples), and each batch's queries take as many
    chunks as its answers allow."""
    hour, day = 3_600_000, 86_400_000
    fleet = [WorkerInfo(f"w-{i}", [], [], [(str(g), f"GPU-{i}-{g}") for g in range(8)])
             for i in range(20)]
    per_gpu = 8 * 240.0  # 8 series scraped every 15 s, in an hour's chunk
    assert range_batches(fleet, per_gpu, 0, hour, hour) == worker_batches(fleet, per_gpu)
    assert len(worker_batches(fleet, per_gpu)) == 2  # 16 workers' hour in one answer
    alone = range_batches(fleet, per_gpu, 0, day, hour)
    assert alone == [[w] for w in fleet]  # a worker's day is more than an answer
    wide = batch_chunk(alone[0], per_gpu, hour)
    assert wide == 16 * hour and 8 * per_gpu * wide / hour <= SAMPLES_PER_QUERY
    assert batch_chunk(fleet, per_gpu, hour) == hour  # never below the chunk
    assert batch_chunk([WorkerInfo("w", [], [], [])], 1.0, hour) == WIDEST_CHUNKS * hour


@pytest.mark.parametrize("names, matcher", [
    (["w.1", "tcp://10.0.0.1:8786", 'a"b'],
     r'worker=~"w\\.1|tcp://10\\.0\\.0\\.1:8786|a\"b"'),
    (["(x)|[y]*+?{2}^$\\", "w-2"],
     r'worker=~"\\(x\\)\\|\\[y\\]\\*\\+\\?\\{2\\}\\^\\$\\\\|w-2"'),
])
def test_a_batch_matches_each_worker_name_literally(names: list[str], matcher: str) -> None:
    """Several names are a regular expression in which every character that means something
    to RE2 is escaped, inside a PromQL string literal; one name an equality matcher."""
    assert worker_matchers(names) == [matcher]
    assert worker_matchers(["w-1"]) == worker_matchers("w-1") == ['worker="w-1"']
    assert worker_matchers(None) == []
