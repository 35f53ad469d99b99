"""Files written so that readers see the old content or the new one, never half of it, and
files that belong together are replaced together or not at all."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from dask_metrics.atomicfile import atomic_write_text, atomic_write_texts
from dask_metrics.collector.output.staging import staged
from dask_metrics.collector.report.build import make_report


def test_a_pair_that_fails_halfway_leaves_both_old_files_and_no_temporary(tmp_path: Path):
    page, numbers = tmp_path / "report.html", tmp_path / "report.json"
    atomic_write_texts({numbers: "old numbers", page: "old page"})
    # the page's folder is missing: its temporary cannot be made after the numbers were written
    with pytest.raises(FileNotFoundError):
        atomic_write_texts({numbers: "new numbers", tmp_path / "gone" / "report.html": "x"})
    assert numbers.read_text() == "old numbers" and page.read_text() == "old page"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.json"]


def test_one_file_is_replaced_whole(tmp_path: Path):
    target = tmp_path / "a.txt"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two")
    assert target.read_text() == "two" and list(tmp_path.iterdir()) == [target]


@pytest.mark.parametrize("headroom", [math.inf, 1e308, 0.5, math.nan, "2", None])
def test_a_report_refuses_a_headroom_that_is_no_factor_before_asking_anything(headroom):
    with pytest.raises(ValueError, match=r"headroom .*: must be a number from 1 to 100"):
        make_report(None, 0.0, 60.0, None, fmt="text", headroom=headroom)  # type: ignore[arg-type]



def test_an_output_whose_new_folder_another_collector_published_first(tmp_path: Path,
                                                                       monkeypatch):
    """Another collector publishes the same new folder between the check that it is new and
    the rename: this output joins it file by file, its files are the ones in place, and
    the other's files it does not replace stay (nothing is lost, no staging folder left)."""
    out = tmp_path / "out"
    rename = os.rename

    def other_collector_first(src, dst):
        if Path(dst) == out and not out.exists():
            out.mkdir()
            (out / "w0.csv").write_text("other")
            (out / "w1.csv").write_text("other")
            (out / "export.json").write_text(json.dumps({"files": ["w0.csv", "w1.csv"]}))
        rename(src, dst)

    monkeypatch.setattr(os, "rename", other_collector_first)
    with staged(out) as stage:
        (stage / "w0.csv").write_text("mine")
        (stage / "export.json").write_text(json.dumps({"files": ["w0.csv"], "by": "me"}))
    assert (out / "w0.csv").read_text() == "mine"
    assert json.loads((out / "export.json").read_text())["by"] == "me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # w1.csv was the other export's, listed by its export.json, which this one replaced
    assert sorted(p.name for p in out.iterdir()) == ["export.json", "w0.csv"]
