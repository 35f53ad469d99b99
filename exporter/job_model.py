"""The records the job tracker keeps: jobs, the DAGs they group, the workers it knows,
and the job modes that decide what a job is. Plain data, so the activity ledger and the
scheduler's exporters can hold and read them without the tracker's logic."""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass, field

from dask_metrics.contract import DagStatus


class JobMode(str, enum.Enum):
    CLIENT = "client"  # each client is a job
    SPAN = "span"  # each top-level Dask span is a job
    MANUAL = "manual"  # new_job() starts the next job


@dataclass(eq=False, slots=True)
class Job:
    id: int
    key: Hashable
    name: str
    next_dag: int = 0
    held: int = 0  # DAGs of this job still in memory (unfinished or retained)
    pinned: bool = False  # never evicted while pinned: its client is connected, or current


@dataclass(eq=False, slots=True)
class Dag:
    job: Job
    id: int
    client: str
    submitted: float
    pending: int = 0  # wanted tasks not over yet
    status: DagStatus = DagStatus.WAITING
    erred: bool = False
    started: float | None = None
    finished: float | None = None
    exported: bool = False  # seen by at least one scrape since it finished
    forgotten: bool = False  # dropped by retention: nothing may keep data for it any more
    series: int = -1  # its series once scraped, as retention counts them (-1: not yet)
    # worker address -> [when its first task of the DAG began processing there, when its last
    # one stopped (None while one processes), the worker's label then]: the scheduler's own
    # times, finer than a scrape
    spans: dict[str, list] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "job_id": self.job.id,
            "dag_id": self.id,
            "job_name": self.job.name,
            "client": self.client,
            "status": self.status.name.lower(),
            "submitted": self.submitted,
            "started": self.started,
            "finished": self.finished,
        }


@dataclass(frozen=True, slots=True)
class TrackedWorker:
    label: str
    gpus: tuple[tuple[int, str], ...] = ()  # (index, uuid)

