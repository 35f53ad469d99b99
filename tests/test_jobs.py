"""Job rows and phase names (collector/model/jobs.py): pure logic, no server."""

from __future__ import annotations

from dask_metrics.collector.model.jobs import (
    JobNames,
    JobRow,
    job_rows,
    jobs_csv_rows,
    status_word,
    unscraped_note,
)
from dask_metrics.collector.model.lifetimes import job_order, life, life_at, plain, restarts
from dask_metrics.collector.model.series import Series

S = 1000  # ms


def info(job: str, dag: str, name: str, client: str = "c", instance: str = "sched:8787"
         ) -> dict[str, str]:
    """A label set of dask_job_dag_info, as fetch_label_sets gives it."""
    return {"__name__": "dask_job_dag_info", "job_id": job, "dag_id": dag, "job_name": name,
            "client": client, "instance": instance}


def status(job: str, dag: str, points: list[tuple[int, float]], instance: str = "sched:8787"
           ) -> Series:
    return Series({"__name__": "dask_job_dag_status", "job_id": job, "dag_id": dag,
                   "instance": instance}, [t * S for t, _ in points], [v for _, v in points])


def test_a_dag_lives_from_its_first_scrape_to_the_first_that_shows_its_outcome() -> None:
    rows = job_rows([info("0", "0", "etl")],
                    [status("0", "0", [(t, 0.0 if t < 30 else 1.0 if t < 60 else 2.0)
                                       for t in range(10, 100, 10)])], 0, 100 * S)
    assert rows == [JobRow("0", "etl", "0", "c", "finished", 10 * S, 60 * S)]


def test_an_unfinished_dag_ends_at_its_last_scrape_in_the_range() -> None:
    rows = job_rows([info("3", "1", "train")],
                    [status("3", "1", [(10, 1.0), (20, 1.0), (30, 1.0), (40, 2.0)])],
                    0, 30 * S)
    assert rows == [JobRow("3", "train", "1", "c", "running", 10 * S, 30 * S)]


def test_a_dag_over_before_the_range_is_no_row_one_running_into_it_is() -> None:
    """The look-back samples before ``start`` tell an earlier session's kept DAG (finished
    at 0) from one that was running at the start (erred at 40, first seen at the start)."""
    rows = job_rows([info("0", "0", "old"), info("1", "0", "etl")],
                    [status("0", "0", [(0, 2.0), (10, 2.0), (20, 2.0), (30, 2.0)]),
                     status("1", "0", [(0, 1.0), (10, 1.0), (20, 1.0), (30, 1.0),
                                       (40, 3.0), (50, 3.0)])], 15 * S, 60 * S)
    assert rows == [JobRow("1", "etl", "0", "c", "erred", 20 * S, 40 * S)]


def stamp(metric: str, job: str, dag: str, at: float, scrapes: list[int]) -> Series:
    """A DAG timestamp gauge (unix seconds ``at``) as scraped at ``scrapes`` (seconds)."""
    return Series({"__name__": metric, "job_id": job, "dag_id": dag, "instance": "s:1"},
                  [t * S for t in scrapes], [at] * len(scrapes))


def test_the_schedulers_own_times_place_a_dag_shorter_than_a_scrape() -> None:
    """15 s scrapes: DAG 0 ran from 31 to 36 s, between two scrapes; no scrape inside the
    range [20, 40] s showed it finished (the one at 45 s did). Its edges are the
    scheduler's, its outcome the first scrape's after it ended."""
    times = {"dask_job_dag_submitted_timestamp_seconds":
             [stamp("dask_job_dag_submitted_timestamp_seconds", "0", "0", 31.0, [45, 60])],
             "dask_job_dag_finished_timestamp_seconds":
             [stamp("dask_job_dag_finished_timestamp_seconds", "0", "0", 36.0, [45, 60])]}
    statuses = [status("0", "0", [(45, 2.0), (60, 2.0)])]
    rows = job_rows([info("0", "0", "etl")], statuses, 20 * S, 40 * S, times)
    assert rows == [JobRow("0", "etl", "0", "c", "finished", 31 * S, 36 * S)]
    assert job_rows([], statuses, 0, 30 * S, times) == []  # submitted after the range
    assert job_rows([], statuses, 37 * S, 90 * S, times) == []  # over before the range
    # still running at the range's end: what the last scrape before it said
    running = {k: v for k, v in times.items() if "finished" not in k}
    rows = job_rows([], [status("0", "0", [(30, 1.0), (45, 1.0)])], 0, 40 * S, running)
    assert (rows[0].status, rows[0].first_seen, rows[0].last_seen) == ("running", 31 * S,
                                                                        40 * S)


def test_series_of_one_dag_from_two_scheduler_addresses_are_one_row() -> None:
    rows = job_rows([info("0", "0", "etl", instance="a:8787"),
                     info("0", "0", "etl", instance="b:8787")],
                    [status("0", "0", [(10, 1.0), (20, 1.0)], instance="a:8787"),
                     status("0", "0", [(30, 1.0), (40, 2.0)], instance="b:8787")], 0, 50 * S)
    assert rows == [JobRow("0", "etl", "0", "c", "finished", 10 * S, 40 * S)]


def test_ids_reused_by_a_restarted_scheduler_without_lives_keep_both_names() -> None:
    """A preload older than the scheduler_start label: the two jobs cannot be told apart,
    and the row says so by naming both."""
    rows = job_rows([info("0", "0", "etl", "c1"), info("0", "0", "train", "c2")],
                    [status("0", "0", [(10, 2.0), (20, 1.0)])], 0, 50 * S)
    assert [(r.job_name, r.client) for r in rows] == [("etl / train", "c1 / c2")]


def of_life(labels: dict[str, str], started: str) -> dict[str, str]:
    return {**labels, "scheduler_start": started}


def test_two_lives_of_a_scheduler_reusing_ids_are_two_rows_with_their_names() -> None:
    """A scheduler restarted at 30 s numbers its first job 0 again: job 0 'etl' (finished
    before the restart) and job 0 'train' (erred after it) are two rows, each with its own
    name, client and outcome, the older life first."""
    old, new = "1000.000", "1030.000"
    etl = status("0", "0", [(10, 1.0), (20, 2.0)])
    train = status("0", "0", [(40, 1.0), (50, 3.0)])
    rows = job_rows([of_life(info("0", "0", "etl", "c1"), old),
                     of_life(info("0", "0", "train", "c2"), new)],
                    [Series(of_life(etl.labels, old), etl.times, etl.values),
                     Series(of_life(train.labels, new), train.times, train.values)], 0, 60 * S)
    assert [(r.job, r.job_name, r.client, r.status, r.first_seen, r.last_seen)
            for r in rows] == [(f"0@{old}", "etl", "c1", "finished", 10 * S, 20 * S),
                               (f"0@{new}", "train", "c2", "erred", 40 * S, 50 * S)]
    assert restarts(r.job for r in rows).startswith("the range spans 2 lives of the scheduler")
    assert restarts(["0", "1"]) == restarts([f"0@{old}", f"1@{old}"]) == ""
    names = JobNames.from_rows(rows)
    assert names.job(f"0@{old}") == "etl" and names.job(f"0@{new}") == "train"
    twins = JobNames.of([(f"0@{old}", "etl", "0"), (f"0@{new}", "etl", "0")])
    assert twins.job(f"0@{old}") == "etl (job 0, scheduler of 00:16:40)"
    assert twins.job(f"0@{new}") == "etl (job 0, scheduler of 00:17:10)"


def test_a_plain_id_is_of_the_life_in_effect_at_its_time() -> None:
    lives = ["1000.000", "1030.000"]
    assert [life_at(lives, t * S) for t in (999, 1000, 1029, 1030, 5000)] == [
        "", "1000.000", "1000.000", "1030.000", "1030.000"]
    assert [plain("3@1000.000"), life("3@1000.000"), plain("3"), life("3")] == [
        "3", "1000.000", "3", ""]
    assert life_at(["not-a-time", *lives], 5000 * S) == "1030.000"  # a stranger's label
    assert restarts(["0@not-a-time", "1@1000.000"]) == ""
    assert sorted(["10@1030.000", "2@1030.000", "10@1000.000", "7"], key=job_order) == [
        "7", "10@1000.000", "2@1030.000", "10@1030.000"]


def test_rows_come_by_job_then_dag_numerically_names_from_info_only() -> None:
    rows = job_rows([info("10", "0", "b"), info("2", "10", "a"), info("7", "0", "no-status")],
                    [status("10", "0", [(10, 0.0)]), status("2", "10", [(10, 0.0)]),
                     status("2", "9", [(20, 1.0)])], 0, 50 * S)
    assert [(r.job, r.dag, r.job_name, r.status) for r in rows] == [
        ("2", "9", "", "running"), ("2", "10", "a", "waiting"), ("10", "0", "b", "waiting")]


def test_no_series_no_rows() -> None:
    assert job_rows([], [], 0, 10 * S) == []


def test_status_words_follow_the_contract_and_keep_unknown_numbers() -> None:
    assert [status_word(v) for v in (0.0, 1.0, 2.0, 3.0, 7.0)] == [
        "waiting", "running", "finished", "erred", "7"]


def test_csv_rows_give_seconds_since_the_start_and_rfc3339() -> None:
    row = JobRow("0", "etl, v2", "1", "c", "finished", 1_700_000_010_500, 1_700_000_020_000)
    assert jobs_csv_rows([row], 1_700_000_000_000) == [[
        "0", "etl, v2", "1", "c", "finished", "10.500", "20.000",
        "2023-11-14T22:13:30.500Z", "2023-11-14T22:13:40.000Z", ""]]
    of_a_life = JobRow("0@1700000000.250", "etl", "1", "c", "finished", 1_700_000_010_500,
                       1_700_000_020_000)
    assert jobs_csv_rows([of_a_life], 1_700_000_000_000)[0][::9] == ["0", "1700000000.250"]


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


def test_dags_forgotten_unscraped_in_the_range_are_counted_across_a_reset() -> None:
    """dask_job_dags_unscraped_total: 2 before the range (not counted), +3 inside, a restart
    resets it and it counts 4 more by the first scrape after the end; later growth is not
    this range's."""
    counter = Series({"__name__": "dask_job_dags_unscraped_total"},
                     [t * S for t in (0, 10, 20, 30, 40, 50, 60)],
                     [2.0, 2.0, 5.0, 1.0, 4.0, 4.0, 9.0])
    assert unscraped_note([counter], 5 * S, 40 * S).startswith("7 DAG(s) finished and were "
                                                               "forgotten")
    assert unscraped_note([counter], 5 * S, 12 * S).startswith("3 DAG(s)")
    assert unscraped_note([counter], 40 * S, 50 * S) == ""
    assert unscraped_note([], 0, 60 * S) == ""


def test_a_dag_whose_scheduler_went_away_before_its_outcome_is_unknown_not_running() -> None:
    """Scrapes every 10 s; DAG 0 was running at 20 and 30 s, then its scheduler restarted:
    the scrapes at 40 and 50 s (the new life's) no longer show it. Its outcome is unknown
    and it was last seen at 30 s, not running to the range's end."""
    statuses = [status("0", "0", [(20, 1.0), (30, 1.0)])]
    scrapes = [t * S for t in range(0, 60, 10)]
    rows = job_rows([info("0", "0", "etl")], statuses, 0, 55 * S, scrapes=scrapes)
    assert rows == [JobRow("0", "etl", "0", "c", "unknown", 20 * S, 30 * S)]
    # a later scrape past the range's end tells it too (as an outcome is told)
    rows = job_rows([info("0", "0", "etl")], statuses, 0, 35 * S, scrapes=scrapes)
    assert (rows[0].status, rows[0].last_seen) == ("unknown", 30 * S)
    # no later scrape at all: it may still be running at the end
    rows = job_rows([info("0", "0", "etl")], statuses, 0, 35 * S, scrapes=scrapes[:4])
    assert rows[0].status == "running" and rows[0].last_seen == 30 * S
    # last seen before the range and gone by a scrape inside it: not the range's
    assert job_rows([info("0", "0", "etl")], statuses, 35 * S, 55 * S, scrapes=scrapes) == []
