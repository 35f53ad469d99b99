"""`collector plot`: what the pictures show (pure logic) and the command on export folders.

Plotting from Prometheus (`--since`) runs in tests/test_docs.py against a real Prometheus;
here the input is a tidy export written the way `collector export` writes it.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from dask_metrics.collector.errors import CollectorError
from dask_metrics.collector.plotdata import (
    FIXED,
    Phase,
    break_gaps,
    phases,
    read_export,
    read_worker_file,
)
from tests.helpers import collector_process, png_size

GiB = 2**30
HEADER = [*FIXED, "total-mem", "mem-util", "compute-util", "peak-mem"]


def write_export(folder: Path, workers: dict[str, list[list[object]]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in workers.items():
        with open(folder / f"{name}.csv", "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(HEADER)
            writer.writerows(rows)
    (folder / "workers.csv").write_text("worker,address,host,gpus,uuids\n")
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


def test_read_worker_file(export_dir):
    a = read_worker_file(export_dir / "a.csv")
    assert (a.worker, a.stem, a.start) == ("a", "a", "2026-01-01T00:00:00Z")
    assert [g.gpu for g in a.gpus] == ["0", "1"] and a.gpus[0].uuid == "GPU-a-0"
    assert a.gpus[0].times == list(range(14))
    assert a.gpus[0].capacity() == pytest.approx(16 * GiB)
    assert a.phases == [Phase(2, 4, "0", "0"), Phase(4, 8, "0", "1"), Phase(8, 10, "0", "2")]
    times, total = a.total("total-mem")
    assert times[3] == 3 and total[3] == 8 * GiB  # two GPUs of 4 GiB each
    b = read_worker_file(export_dir / "b.csv")
    assert b.phases == [] and b.cluster_phases[0] == Phase(2, 4, "0", "0")
    times, mean = b.mean("compute-util")
    assert mean[times.index(5)] is None and mean[0] == 20


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
