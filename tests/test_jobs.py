"""Job rows and phase names (collector/jobs.py): pure logic, no server."""

from __future__ import annotations

from dask_metrics.collector.jobs import JobNames, JobRow, job_rows, jobs_csv_rows, status_word
from dask_metrics.collector.series import Series

S = 1000  # ms


def info(job: str, dag: str, name: str, times: list[int], client: str = "c",
         instance: str = "sched:8787") -> Series:
    labels = {"__name__": "dask_job_dag_info", "job_id": job, "dag_id": dag,
              "job_name": name, "client": client, "instance": instance}
    return Series(labels, [t * S for t in times], [1.0] * len(times))


def status(job: str, dag: str, points: list[tuple[int, float]]) -> Series:
    return Series({"__name__": "dask_job_dag_status", "job_id": job, "dag_id": dag},
                  [t * S for t, _ in points], [v for _, v in points])


def test_a_dag_lives_from_its_first_scrape_to_the_first_that_shows_its_outcome() -> None:
    rows = job_rows([info("0", "0", "etl", list(range(10, 100, 10)))],
                    [status("0", "0", [(t, 0.0 if t < 30 else 1.0 if t < 60 else 2.0)
                                       for t in range(10, 100, 10)])], 0, 100 * S)
    assert rows == [JobRow("0", "etl", "0", "c", "finished", 10 * S, 60 * S)]


def test_an_unfinished_dag_ends_at_its_last_scrape_in_the_range() -> None:
    rows = job_rows([info("3", "1", "train", [10, 20, 30, 40])],
                    [status("3", "1", [(10, 1.0), (20, 1.0), (30, 1.0), (40, 1.0)])],
                    0, 30 * S)
    assert rows == [JobRow("3", "train", "1", "c", "running", 10 * S, 30 * S)]


def test_a_dag_over_before_the_range_is_no_row_one_running_into_it_is() -> None:
    """The look-back samples before ``start`` tell an earlier session's kept DAG (finished at
    5) from one that was running at the start (ends at 40, first seen at the start)."""
    old = info("0", "0", "old", [0, 10, 20, 30])
    running = info("1", "0", "etl", [0, 10, 20, 30, 40, 50])
    rows = job_rows([old, running],
                    [status("0", "0", [(0, 2.0), (10, 2.0), (20, 2.0), (30, 2.0)]),
                     status("1", "0", [(0, 1.0), (10, 1.0), (20, 1.0), (30, 1.0),
                                       (40, 3.0), (50, 3.0)])], 15 * S, 60 * S)
    assert rows == [JobRow("1", "etl", "0", "c", "erred", 20 * S, 40 * S)]


def test_series_of_one_dag_from_two_scheduler_addresses_are_one_row() -> None:
    rows = job_rows([info("0", "0", "etl", [10, 20], instance="a:8787"),
                     info("0", "0", "etl", [30, 40], instance="b:8787")],
                    [status("0", "0", [(10, 1.0), (20, 1.0)]),
                     status("0", "0", [(30, 1.0), (40, 2.0)])], 0, 50 * S)
    assert rows == [JobRow("0", "etl", "0", "c", "finished", 10 * S, 40 * S)]


def test_rows_come_by_job_then_dag_numerically_and_without_status_stay_empty() -> None:
    rows = job_rows([info("10", "0", "b", [10]), info("2", "10", "a", [10]),
                     info("2", "9", "a", [20])], [], 0, 50 * S)
    assert [(r.job, r.dag, r.status) for r in rows] == [("2", "9", ""), ("2", "10", ""),
                                                        ("10", "0", "")]


def test_no_series_no_rows() -> None:
    assert job_rows([], [], 0, 10 * S) == []


def test_status_words_follow_the_contract_and_keep_unknown_numbers() -> None:
    assert [status_word(v) for v in (0.0, 1.0, 2.0, 3.0, 7.0)] == [
        "waiting", "running", "finished", "erred", "7"]


def test_csv_rows_give_seconds_since_the_start_and_rfc3339() -> None:
    row = JobRow("0", "etl, v2", "1", "c", "finished", 1_700_000_010_500, 1_700_000_020_000)
    assert jobs_csv_rows([row], 1_700_000_000_000) == [[
        "0", "etl, v2", "1", "c", "finished", "10.500", "20.000",
        "2023-11-14T22:13:30.500Z", "2023-11-14T22:13:40.000Z"]]


def test_phases_are_named_by_job_with_dags_and_ids_where_needed() -> None:
    names = JobNames.of([("0", "etl", "0"), ("0", "etl", "1"), ("1", "train", "0"),
                         ("2", "etl", "0"), ("3", "", "0")])
    assert names.phase("1", "0") == "train"  # one DAG: the name alone
    assert names.phase("0", "1") == "etl (job 0) · DAG 1"  # "etl" twice: the id too
    assert names.phase("2", "0") == "etl (job 2)"
    assert names.phase("3", "0") == "job 3"  # no name
    assert names.phase("9", "4") == "job 9 · DAG 4"  # unknown job: ids
    assert names.phase("", "") == ""  # idle
    assert JobNames.of([("0", "etl", "0"), ("0", "etl", "2")]).phase("0", "2") == "etl · DAG 2"
