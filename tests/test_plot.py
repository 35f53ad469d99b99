"""`collector plot`: what the pictures show (pure logic) and the command on export folders.

Plotting from Prometheus (`--since`) runs in tests/test_docs.py against a real Prometheus;
here the input is a tidy export written the way `collector export` writes it.
"""

from __future__ import annotations

import csv
import itertools
import math
import random
import re
from pathlib import Path

import pytest

from dask_metrics.collector.charts.layout import break_gaps, envelope, place_labels, time_unit
from dask_metrics.collector.errors import CollectorError
from dask_metrics.collector.model.tables import WorkerTable, joined
from dask_metrics.collector.output.provenance import UNKNOWN, read_provenance
from dask_metrics.collector.output.traces import (
    FIXED,
    Phase,
    open_worker_file,
    phases,
    read_export,
    read_worker_file,
    worker_capacity,
)
from dask_metrics.collector.plot.overviews import OverviewFold, combine
from dask_metrics.contract import JOBS_COLUMNS, JOBS_CSV
from tests.helpers import collector_process, png_size

GiB = 2**30
HEADER = [*FIXED, "total-mem", "mem-util", "compute-util", "peak-mem"]


def write_export(folder: Path, workers: dict[str, list[list[object]]],
                 jobs: list[list[str]] | None = None, simulated: tuple[str, ...] = ()) -> Path:
    """Worker files as `collector export` writes them; with ``jobs``, jobs.csv rows (job,
    job_name, dag), and workers.csv marking the ``simulated`` workers."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in workers.items():
        with open(folder / f"{name}.csv", "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(HEADER)
            writer.writerows(rows)
    (folder / "workers.csv").write_text("worker,address,host,gpus,uuids,simulated\n" + "".join(
        f"{w},,,1,,{'true' if w in simulated else 'false'}\n" for w in workers))
    if jobs is not None:
        with open(folder / JOBS_CSV, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(JOBS_COLUMNS)
            writer.writerows([job, name, dag, "c", "finished", "0", "1", "", ""]
                             for job, name, dag in jobs)
    return folder


def row(t: float, worker: str, gpu: int, job: str = "", dag: str = "", mine: bool = True,
        used: float = GiB, util: object = 50) -> list[object]:
    return [t, f"2026-01-01T00:00:{int(t):02d}Z", worker, gpu, f"GPU-{worker}-{gpu}", job, dag,
            job if mine else "", dag if mine else "", used, used / (16 * GiB) * 100, util,
            used * 1.5]


@pytest.fixture
def export_dir(tmp_path):
    a = [row(t, "a", g, *(("0", str(t // 4)) if 2 <= t < 10 else ("", "")), used=(t + 1) * GiB)
         for t in range(14) for g in (0, 1)]
    b = [row(t, "b", 0, *(("0", str(t // 4)) if 2 <= t < 10 else ("", "")), mine=False,
             util="" if t == 5 else 20) for t in range(14) if not 6 <= t < 9]
    return write_export(tmp_path / "export", {"a": a, "b": b})


def test_phases_end_where_the_next_state_shows():
    samples = [(0, "", ""), (1, "0", "0"), (2, "0", "0"), (3, "0", "1"), (4, "", ""),
               (5, "1", "0")]
    assert phases(samples) == [Phase(1, 3, "0", "0"), Phase(3, 4, "0", "1"),
                               Phase(5, 5, "1", "0")]
    assert phases(reversed(samples)) == phases(samples)  # order of rows does not matter
    assert phases([(0, "", ""), (1, "", "")]) == []


def test_break_gaps_inserts_a_hole_only_for_a_long_stop():
    t, v = break_gaps([0, 1, 2, 3, 10, 11], [1.0, 2, 3, 4, 5, 6])
    assert t[:4] == [0, 1, 2, 3] and t[5:] == [10, 11] and math.isnan(v[4])
    assert break_gaps([0, 1, 2.5, 3], [1.0, 1, 1, 1]) == ([0, 1, 2.5, 3], [1.0, 1, 1, 1])
    assert break_gaps([5], [1.0]) == ([5], [1.0])


def test_envelope_keeps_the_min_and_max_of_every_bucket():
    """At most two points per bucket, and they are the bucket's lowest and highest samples at
    their own times: a one-sample spike either way survives, no line crosses a hole."""
    rng = random.Random(14)
    times = list(range(6000))
    values = [rng.uniform(0, 100) for _ in times]
    values[1234], values[4321] = 1e6, -1e6  # one-sample spikes
    for i in (*range(2000, 2010), 2500):  # holes: missing values
        values[i] = math.nan
    width = 20  # 300 buckets over [0, 6000)
    t, v = envelope(times, values, 0, 6000, 6000 // width)
    assert list(t) == sorted(t) and len(t) < len(times) / 4
    drawn = [(a, b) for a, b in zip(t.tolist(), v.tolist(), strict=True) if not math.isnan(b)]
    buckets: dict[tuple[int, int], list[tuple[int, float]]] = {}
    run = 0
    for a, b in zip(times, values, strict=True):
        if math.isnan(b):
            run += 1
        else:
            buckets.setdefault((run, a // width), []).append((a, b))
    for key, samples in buckets.items():
        mine = [p for p in drawn if p in set(samples)]
        assert len(mine) <= 2, key
        assert min(samples, key=lambda p: p[1]) in mine and max(samples, key=lambda p: p[1]) in mine
    assert (1234, 1e6) in drawn and (4321, -1e6) in drawn
    missing = [a for a, b in zip(times, values, strict=True) if math.isnan(b)]
    points = list(zip(t.tolist(), v.tolist(), strict=True))
    for (a, x), (b, y) in itertools.pairwise(points):  # no segment drawn spans a hole
        assert math.isnan(x) or math.isnan(y) or not any(a < m < b for m in missing)
    assert sum(math.isnan(y) for _, y in points) == 2  # one break per hole
    assert [x.tolist() for x in envelope([], [], 0, 1, 10)] == [[], []]
    assert [x.tolist() for x in envelope([3], [7.0], 3, 3, 10)] == [[3], [7.0]]


def test_read_worker_file(export_dir):
    a = read_worker_file(export_dir / "a.csv")
    assert (a.worker, a.stem, a.start) == ("a", "a", "2026-01-01T00:00:00.000Z")
    assert [g.gpu for g in a.gpus] == ["0", "1"] and a.gpus[0].uuid == "GPU-a-0"
    assert a.gpus[0].times == list(range(14))
    assert a.gpus[0].capacity() == pytest.approx(16 * GiB)
    assert a.phases == [Phase(2, 4, "0", "0"), Phase(4, 8, "0", "1"), Phase(8, 10, "0", "2")]
    times, total = combine(whole(export_dir / "a.csv"), HEADER.index("total-mem") - len(FIXED),
                           average=False)
    assert times[3] == 3000 and total[3] == 8 * GiB  # two GPUs of 4 GiB each
    b = read_worker_file(export_dir / "b.csv")
    assert b.phases == [] and b.cluster_phases[0] == Phase(2, 4, "0", "0")
    times, mean = combine(whole(export_dir / "b.csv"), HEADER.index("compute-util") - len(FIXED),
                          average=True)
    assert mean[times.index(5000)] is None and mean[0] == 20


def whole(path: Path) -> WorkerTable:
    return joined(open_worker_file(path).pieces())


def test_a_file_of_bytes_that_are_no_utf_8_is_no_tidy_file(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"\xb7\xff" * 100)
    with pytest.raises(CollectorError, match=re.escape("a.csv is not a tidy CSV file")):
        read_worker_file(tmp_path / "a.csv")
    with pytest.raises(CollectorError, match=r"cannot read .*gone\.csv: No such file"):
        read_worker_file(tmp_path / "gone.csv")


def test_blank_lines_in_a_worker_file_are_no_rows(tmp_path, export_dir):
    text = (export_dir / "a.csv").read_text()
    header, body = text.split("\n", 1)
    (tmp_path / "a.csv").write_text(f"{header}\n\n{body}\n\n\n")
    assert repr(read_worker_file(tmp_path / "a.csv")) == repr(
        read_worker_file(export_dir / "a.csv")).replace(str(export_dir), str(tmp_path))


@pytest.mark.parametrize(("rows", "needle"), [
    ([row(2, "a", 0), row(1, "a", 0)], "line 3: the rows go back in time"),
    ([row(1, "a", 0)[:-1]], "its first row: not a row of a tidy CSV file (12 fields where "
                            "the header has 13)"),
    ([row(1, "a", 0), row(2, "a", 0, util="busy"), row(3, "a", 0)],
     "line 3: not a row of a tidy CSV file"),
    ([row(1, "a", 0), ["x"]], "its last line: not a row of a tidy CSV file"),
    ([row(1, "a", 0), ["inf", *row(2, "a", 0)[1:]], row(3, "a", 0)],
     "line 3: not a row of a tidy CSV file (cannot convert float infinity to integer)"),
])
def test_a_worker_file_that_is_not_tidy_says_where(tmp_path, rows, needle):
    folder = write_export(tmp_path / "bad", {"a": rows})
    with pytest.raises(CollectorError, match=re.escape(needle)):
        read_worker_file(folder / "a.csv")


def test_a_worker_that_joined_late_counts_from_the_exports_start(tmp_path):
    """Its first row is 7 s into the export: the axis says the export's start, as every
    timestamp counts from it, not the worker's first sample."""
    late = write_export(tmp_path / "late", {"c": [row(t, "c", 0) for t in (7, 8, 9)]})
    c = read_worker_file(late / "c.csv")
    assert c.start == "2026-01-01T00:00:00.000Z" and c.gpus[0].times == [7, 8, 9]


def test_read_export_refuses_what_is_not_a_tidy_export(tmp_path, export_dir):
    assert [t.worker for t in read_export(export_dir)] == ["a", "b"]
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "worker_0.csv").write_text("job,dag,timestamp,total-mem\n")
    with pytest.raises(CollectorError, match="not a tidy CSV file"):
        read_export(tmp_path / "seed")
    with pytest.raises(CollectorError, match="no worker CSV files"):
        read_export(write_export(tmp_path / "empty", {}))
    with pytest.raises(CollectorError, match="not a folder"):
        read_export(tmp_path / "missing")


def test_time_axis_unit_follows_the_length_of_the_range():
    assert time_unit(0) == time_unit(900) == (1.0, "seconds")
    assert time_unit(901) == time_unit(10 * 3600) == (60.0, "minutes")
    assert time_unit(10 * 3600 + 1) == time_unit(30 * 86400) == (3600.0, "hours")


def test_narrow_phase_labels_are_staggered_shortened_never_dropped():
    wide = [(5, [10]), (25, [10]), (45, [10])]
    assert place_labels(wide) == [(0, 0), (0, 0), (0, 0)]  # room for all on the first row
    narrow = [(5, [10, 2]), (7, [10, 2]), (9, [10, 2]), (11, [10, 2]), (35, [10, 2])]
    assert place_labels(narrow) == [
        (0, 0), (1, 0), (2, 0),  # stacked while the full labels overlap
        (0, 1),  # no row free for the full label: the short one, which fits on row 0
        (0, 0)]  # room again
    crowded = [(0, [4, 2])] * 5  # nothing fits: the shortest form where a row frees first
    assert [form for _, form in place_labels(crowded)] == [0, 0, 0, 1, 1]
    assert len(place_labels(crowded)) == 5


def test_provenance_names_jobs_and_marks_simulated_workers(tmp_path, export_dir):
    plain = read_provenance(export_dir)
    assert plain.simulated == frozenset() and plain.names.phase("0", "1") == "job 0 · DAG 1"
    named = read_provenance(write_export(tmp_path / "named", {"a": [], "b": []},
                                         jobs=[["0", "etl", "0"], ["0", "etl", "1"],
                                               ["1", "train", "0"]], simulated=("b",)))
    assert named.simulated == {"b"}
    assert (named.names.phase("0", "1"), named.names.phase("1", "0")) == ("etl · DAG 1",
                                                                          "train")
    assert read_provenance(tmp_path / "nothing-here") == UNKNOWN


def test_the_cluster_page_draws_each_workers_overview_as_its_samples_say(export_dir):
    """`collector plot` reads a worker a piece at a time and keeps of each only what the
    cluster page draws: its GPUs' mean utilisation and total memory per sample time (NaN
    where no GPU has one) as a line no finer than a pixel column, its capacity, phases,
    last sample and sample count."""
    for name in ("a", "b"):
        found = open_worker_file(export_dir / f"{name}.csv")
        fold = OverviewFold(13.0, 1200)
        for piece in found.pieces(rows=3):
            fold.add(piece, found.metrics)
        trace = read_worker_file(export_dir / f"{name}.csv")
        overview = fold.overview(trace)
        for kept, metric, average in ((overview.util, "compute-util", True),
                                      (overview.memory, "total-mem", False)):
            times, values = combine(whole(found.path), found.metrics.index(metric), average)
            drawn = envelope(*break_gaps([t / 1000 for t in times],
                                         [math.nan if v is None else v for v in values]),
                             0.0, 13.0, 1200)  # the page's line of the whole file
            assert kept is not None and kept[0].tolist() == drawn[0].tolist()
            assert str(kept[1].tolist()) == str(drawn[1].tolist())  # nan == nan
        assert (overview.worker, overview.start, overview.devices, overview.capacity) == (
            trace.worker, trace.start, tuple(g.uuid for g in trace.gpus),
            worker_capacity(trace))
        assert (overview.phases, overview.cluster_phases) == (trace.phases, trace.cluster_phases)
        assert overview.samples == sum(len(g.times) for g in trace.gpus) and overview.last == 13
        assert fold.overview(trace, lines=False).util is None
    b = fold.overview(read_worker_file(export_dir / "b.csv"))  # no value at 5, none 6-8
    assert b.util is not None and b.util[0].tolist()[4:7] == [4.0, 6.5, 9.0]
    assert math.isnan(b.util[1][5])


def test_worker_capacity_sums_its_gpus(export_dir):
    assert worker_capacity(read_worker_file(export_dir / "a.csv")) == pytest.approx(32 * GiB)
    assert worker_capacity(read_worker_file(export_dir / "b.csv")) == pytest.approx(16 * GiB)


@pytest.mark.integration
def test_plots_name_the_jobs_mark_simulated_gpus_and_show_capacity(export_dir, tmp_path):
    """Phases labelled by job name (every DAG, narrow or not), what ran on each worker on the
    cluster page, a capacity line on every memory panel, simulated workers marked; a long
    range is drawn in hours."""
    folder = write_export(tmp_path / "named", {
        "a": [row(t, "a", g, *(("0", str(t // 4)) if 2 <= t < 10 else ("1", "0") if t == 11
                                else ("", "")), used=(t + 1) * GiB)
              for t in range(14) for g in (0, 1)],
        "b": [row(t, "b", 0, *(("0", "1") if 4 <= t < 8 else ("", ""))) for t in range(14)]},
        jobs=[["0", "etl", "0"], ["0", "etl", "1"], ["0", "etl", "2"], ["1", "train", "0"]],
        simulated=("b",))
    out = tmp_path / "plots"
    done = collector_process("plot", "--csv", str(folder), "--out", str(out), "--format", "png",
                             "svg")
    assert done.returncode == 0, done.stderr
    a, b, cluster = ((out / f"{n}.svg").read_text() for n in ("a", "b", "cluster"))
    for label in ("etl · DAG 0", "etl · DAG 1", "etl · DAG 2", "train"):  # train: 1 sample
        assert label in a, label
    assert "job 0" not in a  # names, not ids
    assert "capacity (16 GiB)" in a and "capacity (16 GiB)" in b
    assert "capacity of a worker (dashed)" in cluster  # a: 32 GiB, b: 16 GiB
    assert "SIMULATED GPUs" in b and "SIMULATED GPUs" not in a
    assert "SIMULATED GPUs on 1 of 2 worker(s)" in cluster
    assert "cluster: 2 worker(s), 3 GPU(s)" in cluster
    pinned = write_export(tmp_path / "pinned", {  # b sees a's GPU 0: one GPU, not two
        "a": [row(t, "a", g) for t in range(4) for g in (0, 1)],
        "b": [[*row(t, "b", 0)[:4], "GPU-a-0", *row(t, "b", 0)[5:]] for t in range(4)]})
    done = collector_process("plot", "--csv", str(pinned), "--out", str(tmp_path / "pp"),
                             "--format", "svg")
    assert done.returncode == 0, done.stderr
    assert "cluster: 2 worker(s), 2 GPU(s)" in (tmp_path / "pp" / "cluster.svg").read_text()
    assert "ran on" in cluster and "seconds since the start" in cluster
    assert png_size(out / "a.png") == png_size(out / "cluster.png") == (1200, 650)
    long = write_export(tmp_path / "long", {"a": [row(t, "a", 0, "0", "0") for t in
                                                  range(0, 40_000, 600)]}, jobs=[["0", "etl", "0"]])
    done = collector_process("plot", "--csv", str(long), "--out", str(tmp_path / "lp"),
                             "--format", "svg")
    assert done.returncode == 0, done.stderr
    assert "hours since the start" in (tmp_path / "lp" / "a.svg").read_text()


@pytest.mark.integration
def test_plot_command_on_an_export_folder(export_dir, tmp_path):
    out = tmp_path / "plots"
    done = collector_process("plot", "--csv", str(export_dir), "--out", str(out), "--format", "png",
                     "svg")
    assert done.returncode == 0, done.stderr
    assert "wrote 6 picture(s)" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["a.png", "a.svg", "b.png", "b.svg",
                                                     "cluster.png", "cluster.svg"]
    assert png_size(out / "a.png") == png_size(out / "cluster.png") == (1200, 650)
    svg = (out / "a.svg").read_text()
    assert "<svg" in svg and "job 0" in svg and "GPU 1 used" in svg  # labels are text in SVG
    only = collector_process("plot", "--csv", str(export_dir), "--out", str(tmp_path / "b"),
                     "--workers", "b*", "--quiet")
    assert only.returncode == 0 and only.stderr == ""
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["b.png", "cluster.png"]


@pytest.mark.parametrize(("args", "code", "needle"), [
    (["--out", "x"], 2, "--since WHEN or --csv DIR is required"),
    (["--csv", "EXPORT", "--out", "x", "--format", "gif"], 2, "--format: gif (known: png, svg)"),
    (["--csv", "nowhere", "--out", "x"], 1, "nowhere is not a folder"),
    (["--csv", "EXPORT", "--out", "x", "--workers", "zz"], 1, "no worker in"),
    (["--csv", "EXPORT", "--out", "FILE/sub"], 1, "cannot write the output"),
])
@pytest.mark.integration
def test_plot_errors_are_one_line(export_dir, tmp_path, args, code, needle):
    (tmp_path / "file").write_text("")
    args = [a.replace("EXPORT", str(export_dir)).replace("FILE", str(tmp_path / "file"))
            for a in args]
    done = collector_process("plot", *args)
    assert done.returncode == code and needle in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_plot_export_draws_the_pictures_and_overview_asked_for(export_dir, tmp_path):
    from dask_metrics.collector.plot.pages import plot_export

    written = plot_export(export_dir, tmp_path / "one", pictures=["b"])
    assert sorted(p.name for p in written) == ["b.png", "cluster.png"]
    told: list[tuple[float, int, str, int | None]] = []
    written = plot_export(export_dir, tmp_path / "two", overview=False,
                          progress=lambda *said: told.append(said))
    assert sorted(p.name for p in written) == ["a.png", "b.png"]
    assert told == [(0, 2, "a", None), (1, 2, "b", None), (2, 2, "", None)]  # a line a worker


def test_a_fleets_cluster_page_shows_the_workers_spread_not_a_line_each(tmp_path):
    """More workers than lines can tell apart: the page draws their lowest, mean and highest
    per pixel column and one capacity line per capacity, and names them in its legend."""
    from dask_metrics.collector.plot.figures import MAX_LINES
    from dask_metrics.collector.plot.pages import plot_export

    count = MAX_LINES + 1
    folder = write_export(tmp_path / "fleet", {
        f"w{i:02d}": [row(t, f"w{i:02d}", 0, util=i) for t in range(6)] for i in range(count)})
    plot_export(folder, tmp_path / "out", ["svg"], pictures=())
    page = (tmp_path / "out" / "cluster.svg").read_text()
    assert f"lowest to highest of {count} workers" in page and "mean of the workers" in page
    assert "the workers' lowest to highest and mean" in page
    assert "capacity of a worker (16 GiB)" in page and "w07" not in page.split("ran on")[-1]
    def sized(r: list[object], capacity: float) -> list[object]:  # mem-util of that capacity
        return [*r[:10], float(r[9]) / capacity * 100, *r[11:]]  # type: ignore[arg-type]

    mixed = write_export(tmp_path / "mixed", {  # capacities of 16 and 32 GiB, 1e-9 apart
        f"w{i:02d}": [sized(row(t, f"w{i:02d}", 0), 16 * GiB * (1 + i % 2) * (1 + 1e-12 * i))
                      for t in range(6)] for i in range(count)})
    plot_export(mixed, tmp_path / "mixed-out", ["svg"], pictures=())
    page = (tmp_path / "mixed-out" / "cluster.svg").read_text()
    assert page.count("stroke-dasharray") == 3  # two capacities and the legend's sample
    assert "capacity of a worker (dashed)" in page
    few = write_export(tmp_path / "few", {f"w{i}": [row(t, f"w{i}", 0) for t in range(6)]
                                          for i in range(3)})
    plot_export(few, tmp_path / "few-out", ["svg"], pictures=())
    assert "mean of the workers" not in (tmp_path / "few-out" / "cluster.svg").read_text()


def test_a_worker_of_many_jobs_names_what_its_legend_holds_and_counts_the_rest(tmp_path):
    """Eight GPUs' lines and a week's jobs would push the panels off the picture: the legend
    names as many jobs as it has rows left and counts the others."""
    import warnings

    from dask_metrics.collector.plot.pages import plot_export

    folder = write_export(tmp_path / "many", {
        "a": [row(t, "a", g, str(t // 2), "0") for t in range(60) for g in range(8)]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "constrained_layout not applied"
        plot_export(folder, tmp_path / "out", ["svg"], overview=False)
    page = (tmp_path / "out" / "a.svg").read_text()
    assert "<!-- job 10 -->" in page and "<!-- job 11 -->" not in page  # 8 GPU lines, 11 jobs
    assert "and 19 more jobs" in page


@pytest.mark.parametrize("count", [5, 41], ids=["lines", "spread"])
def test_pictures_drawn_in_a_pool_are_those_drawn_here(tmp_path, count):
    """plot_export's processes read and draw the workers (the page's lines, or its spread
    beyond MAX_LINES): the same pictures, byte for byte, as one process draws; a file that
    is no tidy file stops it there with the same one-line error, and no picture is left."""
    from dask_metrics.collector.plot.pages import plot_export

    folder = write_export(tmp_path / "fleet", {
        f"w{i:02d}": [row(t, f"w{i:02d}", g, str(t // 8), "0", util=(i * 7 + t) % 100,
                          used=(1 + (i + t) % 5) * GiB) for t in range(30) for g in (0, 1)]
        for i in range(count)})
    drawn = None if count < 10 else ["w03", "w40"]  # the spread's page, two workers' own
    made = {n: sorted(plot_export(folder, tmp_path / f"out{n}", pictures=drawn, processes=n))
            for n in (0, 2)}
    assert [p.name for p in made[0]] == [p.name for p in made[2]]
    assert len(made[0]) == (count if drawn is None else len(drawn)) + 1
    for here, pooled in zip(made[0], made[2], strict=True):
        assert here.read_bytes() == pooled.read_bytes(), here.name
    lines = (folder / "w02.csv").read_text().splitlines(keepends=True)
    (folder / "w02.csv").write_text("".join([*lines[:29], "not,a,row\n", *lines[29:]]))
    for n in (0, 2):
        with pytest.raises(CollectorError, match=r"w02\.csv, line 30: not a row"):
            plot_export(folder, tmp_path / f"bad{n}", pictures=(), processes=n)
        assert not (tmp_path / f"bad{n}").exists()
