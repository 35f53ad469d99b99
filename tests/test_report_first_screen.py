"""The report's first screen (pure): headline figures, the title in words, this run against
a baseline, words kept whole on the page, and what Jupyter shows."""

from __future__ import annotations

import html
import json
import re
from dataclasses import replace
from typing import Any

import pytest

from dask_metrics.collector.attribution.usage import Usage
from dask_metrics.collector.model.series import WorkerInfo
from dask_metrics.collector.peaks.peak import Peak
from dask_metrics.collector.report.advice import load_models
from dask_metrics.collector.report.compare import BaselineError, check_baseline, compare
from dask_metrics.collector.report.headline import duration_words, headline, title_words
from dask_metrics.collector.report.model import WorkerFacts, build
from dask_metrics.collector.report.notebook import framed, monitor_html
from dask_metrics.collector.report.render import CSP, _words, render_html, render_text
from tests.test_report import session_of

GIB = 2**30
START = 1795669200.0  # 2026-11-26T05:00:00Z


def job(name: str | None, ident: str, wall: float | None = 100.0, gpu_seconds: float = 360.0,
        peak: float | None = 10 * GIB, energy: float | None = 1000.0) -> dict[str, Any]:
    return {"job": ident, "job_label": ident, "job_name": name, "status": "finished",
            "wall_seconds": wall, "gpu_seconds": gpu_seconds, "energy_joules": energy,
            "peak": None if peak is None else {"peak_bytes": peak}}


def report_of(jobs: list[dict[str, Any]], cluster: str = "c", seconds: float = 600,
              **usage: Any) -> dict[str, Any]:
    return {"report_version": 3, "jobs": jobs, "session": {
        "cluster": cluster, "since": "2026-11-26T05:00:00.000Z",
        "until": "2026-11-26T05:10:00.000Z", "since_unix": START,
        "until_unix": START + seconds, "duration_seconds": seconds,
        "usage": {"gpu_seconds": 3600.0, "busy_seconds": 1800.0, "idle_gpu_seconds": 300.0,
                  "mean_utilization_percent": 50.0, "energy_joules": None,
                  "energy_kwh": None, "energy_note": "not reported", **usage}}}


# ---- headline and title ------------------------------------------------------------------------


def test_idle_gpu_time_is_idle_in_jobs_plus_held_with_no_job() -> None:
    found = headline(report_of([job("a", "0", gpu_seconds=1800.0),
                                job("b", "1", gpu_seconds=900.0)]))
    # 3,600 GPU-s held, 2,700 of them in jobs: 900 with no job, plus 300 idle in jobs
    assert found["idle_gpu_hours"] == pytest.approx(1200 / 3600, abs=1e-4)
    assert found["without_job_gpu_hours"] == pytest.approx(0.25)
    assert (found["gpu_hours_held"], found["gpu_hours_busy"]) == (1.0, 0.5)
    assert found["energy_joules"] is None and found["energy_note"] == "not reported"


@pytest.mark.parametrize(("names", "seconds", "title"), [
    (["etl"], 24, "etl on c, 26 Nov 2026 05:00-05:00 UTC, 24 s"),
    (["etl", "train"], 600, "etl and train on c, 26 Nov 2026 05:00-05:10 UTC, 10 min"),
    (["a", "b", "c"], 600, "a, b and c on c, 26 Nov 2026 05:00-05:10 UTC, 10 min"),
    (["a", "b", "c", "d", "e"], 7200,
     "a, b, c and 2 more jobs on c, 26 Nov 2026 05:00-07:00 UTC, 2 h"),
    ([None], 86400 + 3660,
     "job 0 on c, 26 Nov 2026 05:00 UTC to 27 Nov 2026 06:01 UTC, 25 h 1 min"),
    ([], 60, "No jobs on c, 26 Nov 2026 05:00-05:01 UTC, 60 s"),
])
def test_the_title_says_what_ran_where_when_and_how_long(names: list[str | None], seconds: float,
                                                          title: str) -> None:
    jobs = [job(n, str(i)) for i, n in enumerate(names)]
    assert title_words(report_of(jobs, seconds=seconds)) == title


def test_a_job_name_repeated_is_named_once_and_no_cluster_no_on() -> None:
    assert title_words(report_of([job("etl", "0"), job("etl", "1")], cluster="")) == \
        "etl, 26 Nov 2026 05:00-05:10 UTC, 10 min"
    assert [duration_words(s) for s in (0.4, 119, 120, 7199, 7200, 7260)] == \
        ["0 s", "119 s", "2 min", "120 min", "2 h", "2 h 1 min"]


# ---- this run against the last -----------------------------------------------------------------


def test_jobs_are_compared_by_name_each_run_with_its_counterpart() -> None:
    before = report_of([job("etl", "0", wall=100.0, peak=10 * GIB, energy=1000.0),
                        job("train", "1"), job("etl", "2", wall=50.0), job(None, "3")])
    now = report_of([job("etl", "7", wall=120.0, peak=12 * GIB, energy=None),
                     job("etl", "8", wall=50.0, gpu_seconds=0.0), job("score", "9"),
                     job(None, "10", wall=None)])
    found = compare(now, before, "earlier")
    assert [(j["job_name"], j["job_label"], j["baseline_job_label"]) for j in found["jobs"]] == \
        [("etl", "7", "0"), ("etl", "8", "2"), (None, "10", "3")]
    first = found["jobs"][0]
    assert first["wall_seconds"] == {"now": 120.0, "before": 100.0, "change": 20.0,
                                     "change_percent": 20.0}
    assert first["peak_bytes"]["change_percent"] == 20.0
    assert first["energy_joules"] == {"now": None, "before": 1000.0, "change": None,
                                      "change_percent": None}  # not measured now: no change
    assert found["jobs"][1]["gpu_hours"]["change_percent"] == -100.0
    assert found["jobs"][2]["wall_seconds"]["change"] is None
    assert found["only_now"] == [{"job_name": "score", "job_label": "9"}]
    assert found["only_before"] == [{"job_name": "train", "job_label": "1"}]
    assert (found["source"], found["cluster"]) == ("earlier", "c")


def test_a_change_from_zero_has_a_difference_and_no_percentage() -> None:
    found = compare(report_of([job("a", "0", energy=50.0)]),
                    report_of([job("a", "0", energy=0.0)]), "x")
    assert found["jobs"][0]["energy_joules"] == {"now": 50.0, "before": 0.0, "change": 50.0,
                                                 "change_percent": None}


@pytest.mark.parametrize("body", [
    [], "report", {"session": {}, "jobs": []}, {"report_version": 3, "session": [], "jobs": []},
    {"report_version": 3, "session": {}, "jobs": {}},
    {"report_version": 3, "session": {}, "jobs": ["etl"]}])
def test_what_is_not_a_report_is_refused_as_a_value_error(body: Any) -> None:
    with pytest.raises(BaselineError, match=r"old\.json is not a dask-metrics report\.json"):
        check_baseline(body, "old.json")
    assert issubclass(BaselineError, ValueError)


def test_a_hand_edited_baseline_compares_what_has_numbers() -> None:
    odd = report_of([{"job": "0", "job_name": ["etl"], "wall_seconds": "long",
                      "gpu_seconds": True, "peak": {"peak_bytes": float("nan")},
                      "energy_joules": 5}])
    found = compare(report_of([{**job("['etl']", "0")}]), check_baseline(odd, "odd"), "odd")
    (entry,) = found["jobs"]
    assert entry["wall_seconds"]["before"] is None and entry["gpu_hours"]["before"] is None
    assert entry["peak_bytes"]["before"] is None and entry["energy_joules"]["before"] == 5
    json.dumps(found, allow_nan=False)  # report.json stays JSON: no NaN from a NaN baseline


# ---- the page ----------------------------------------------------------------------------------


def test_hyphenated_tokens_are_kept_whole_and_escaped() -> None:
    assert _words("at 2026-11-26T05:00:00Z on <w-0>") == \
        'at <span class=w>2026-11-26T05:00:00Z</span> on <span class=w>&lt;w-0&gt;</span>'
    assert _words("plain & simple") == "plain &amp; simple"


def one_job_report() -> dict[str, Any]:
    """build's report of job 0 "etl": 100 s on one 80 GiB GPU, 40 % busy, 12 GiB peak."""
    info = WorkerInfo("w-0", gpus=[("0", "GPU-m")])
    use = Usage(seconds=100.0, busy=40.0, first=0, last=100_000)
    peak = Peak("w-0", "0", "GPU-m", 12 * GIB, 80 * GIB, 50_000, "0", "0")
    rows = [{"job": "0", "dag": "0", "job_name": "etl", "status": "finished",
             "first_seen_time": "2026-11-26T05:00:00Z", "last_seen_time": "2026-11-26T05:01:40Z"}]
    return build(session_of(100, warnings=[], dask_metrics="0"),
                 [WorkerFacts(info, {("0", "0", "0", "GPU-m"): use}, [peak],
                              [replace(peak, job="0/0")], [peak])],
                 {("w-0", "0", "GPU-m"): {"name": "M", "simulated": "false"}}, rows,
                 load_models(), 1.2)


def test_the_first_screen_comes_first_with_the_baseline_changes() -> None:
    report = one_job_report()
    report["baseline"] = compare(report, report_of([job("etl", "0", peak=10 * GIB)]),
                                 "the report of yesterday")
    text = render_text(report)
    first = text[:text.index("Against the baseline")]
    assert first.index("At a glance") < first.index("\nJobs\n") < first.index(
        "What to ask for next time")
    assert "Peak memory       12.00 GiB  (15.0 % of 80.00 GiB on w-0 GPU 0)" in first
    assert re.search(r"etl\s+finished\s+100\.0 s\s+12\.00 GiB\s+15\.0 %\s+40\.0 %\s+"
                     r"\+0\.0 %\s+-72\.2 %\s+\+20\.0 %\s+n/a", first), first
    assert "Baseline: the report of yesterday." in first
    page = render_html(report, {})
    assert '<td class="n up">+20.0 %</td>' in page and '<td class="n down">-72.2 %</td>' in page
    assert page.index("id=glance") < page.index("id=jobs") < page.index("id=advice") < \
        page.index(">Against the baseline<")


# ---- Jupyter ------------------------------------------------------------------------------------


def test_the_notebook_frame_holds_the_same_page_under_its_policy() -> None:
    page = '<!DOCTYPE html><meta http-equiv="Content-Security-Policy" content="' + CSP + \
        '"><p title="a&quot;b">x & "y"</p>'
    frame = framed(page)
    assert frame.startswith("<iframe sandbox srcdoc=\"") and frame.endswith("</iframe>")
    srcdoc = re.fullmatch(r'<iframe sandbox srcdoc="([^"]*)".*', frame, re.S).group(1)
    assert html.unescape(srcdoc) == page


def test_the_monitor_view_says_the_session_and_whose_it_is() -> None:
    session = {"id": 3, "start": START, "stop": None, "owner": "ana@h"}
    status = {"running": True, "session": session, "current_job": 2, "current_dag": 0,
              "unfinished_dags": 1, "dask_cluster": "prod"}
    mine = monitor_html("tcp://s:8786", "ana@h", ["total-mem"], dict(session), status)
    assert "3 running since 2026-11-26T05:00:00.000Z (started by this Monitor)" in mine
    assert "job 2, DAG 0, 1 DAG(s) unfinished" in mine and "prod" in mine
    other = monitor_html("tcp://s:8786", "bo@h", ["total-mem"], None,
                         {**status, "running": False, "current_job": None,
                          "session": {**session, "stop": START + 60}})
    assert "stopped 2026-11-26T05:01:00.000Z (owner ana@h)" in other and "no job" in other
    gone = monitor_html("tcp://s:8786", "bo@h", ["a<b>"], None, {"error": "OSError: gone"})
    assert "unknown: the scheduler did not answer (OSError: gone)" in gone
    assert "a&lt;b&gt;" in gone


def test_where_the_time_went_leaves_zero_rows_out_and_folds_the_long_tail() -> None:
    report = one_job_report()
    row = {"job": "0", "job_name": "etl", "dag": "0", "activity": "thread-cpu",
           "unit": "seconds"}
    report["where_the_time_went"] = {
        "activities": [{**row, "prefix": f"p{i}", "value": str(i % 3 and i)} for i in range(30)],
        "gpu_by_prefix": []}
    text = render_text(report)
    part = text[text.index("Where the time went"):text.index("GPU time per task prefix")]
    assert "10 row(s) of 0 left out (in report.json)." in part
    values = re.findall(r"thread-cpu\s+seconds\s+([\d.]+) s", part)
    assert [float(v) for v in values] == sorted((i for i in range(30) if i % 3), reverse=True)
    page = render_html(report, {})
    where = page[page.index(">Where the time went"):page.index(">GPU time per task prefix")]
    assert where.count("<tr>") == 10 + 1 + 10 + 1  # 10 shown, then 10 folded, with headers
    assert "<details><summary>10 more row(s)</summary>" in where
