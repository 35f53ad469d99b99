"""What an export's worker files do not say, read from its other files: the jobs' names
(jobs.csv) and which workers' GPUs are simulated (workers.csv), so that plots and reports
name jobs and mark simulated GPUs.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from dask_metrics.collector.errors import CollectorError
from dask_metrics.collector.model.jobs import NO_NAMES, JobNames
from dask_metrics.collector.model.lifetimes import life_at, qualify
from dask_metrics.collector.model.timespec import parse_rfc3339
from dask_metrics.collector.output.traces import Phase, WorkerTrace
from dask_metrics.contract import JOBS_CSV


@dataclass(frozen=True)
class Provenance:
    """What the worker files do not say: the jobs' names (jobs.csv) and which workers' GPUs
    are simulated (workers.csv). An export without those files (an older one, CSV files from
    elsewhere) gives ids only and no simulated marks."""

    names: JobNames = NO_NAMES
    simulated: frozenset[str] = frozenset()
    lives: tuple[str, ...] = ()  # the scheduler lives of jobs.csv (its scheduler_start)

    def own(self, trace: WorkerTrace) -> WorkerTrace:
        """``trace`` read from a worker file, its jobs keyed as ``names`` keys them: a row's
        plain job id is of the scheduler life in effect at its time."""
        if not self.lives or not trace.start:
            return trace
        origin = parse_rfc3339(trace.start) * 1000

        def keyed(found: list[Phase]) -> list[Phase]:
            return [replace(p, job=qualify(p.job, life_at(self.lives, round(origin
                                                                              + p.start * 1000))))
                    for p in found]

        return replace(trace, phases=keyed(trace.phases),
                       cluster_phases=keyed(trace.cluster_phases))


UNKNOWN = Provenance()


def _rows(path: Path) -> list[dict[str, str]]:
    """A CSV file's rows as dicts; none when it is missing. CollectorError when unreadable."""
    if not path.exists():
        return []
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise CollectorError(f"{path} cannot be read ({type(exc).__name__}: {exc})") from None


def tables_folder(folder: Path) -> Path:
    """Where an export folder keeps workers.csv and jobs.csv: its export.json's ``tables``
    subfolder (a Monitor's export), else the folder itself."""
    try:
        tables = json.loads((folder / "export.json").read_text(encoding="utf-8")).get("tables")
    except (OSError, ValueError, AttributeError):
        return folder
    return folder / tables if isinstance(tables, str) and tables and \
        Path(tables).name == tables else folder


def read_provenance(folder: str | os.PathLike[str]) -> Provenance:
    """The job names and simulated workers of an export folder."""
    folder = tables_folder(Path(folder))
    jobs = _rows(folder / JOBS_CSV)
    names = JobNames.of((qualify(r.get("job") or "", r.get("scheduler_start") or ""),
                         r.get("job_name") or "", r.get("dag") or "")
                        for r in jobs) if jobs else NO_NAMES
    simulated = frozenset(r.get("worker") or "" for r in _rows(folder / "workers.csv")
                          if r.get("simulated") == "true")
    lives = tuple({r["scheduler_start"]: None for r in jobs if r.get("scheduler_start")})
    return Provenance(names, simulated, lives)
