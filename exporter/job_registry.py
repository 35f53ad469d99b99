"""Which job a graph submission joins under the job mode, and which jobs are kept: jobs
are numbered in the order they are first seen, and idle ones are forgotten beyond a
bound, so a scheduler that serves millions of DAGs holds a bounded number of jobs."""

from __future__ import annotations

from collections.abc import Callable, Hashable

from dask_metrics.exporter.job_model import Job, JobMode
from dask_metrics.exporter.label_values import clean_label


class JobRegistry:
    """The jobs still held, by job key, oldest first."""

    def __init__(
        self,
        mode: JobMode,
        *,
        max_jobs: int,
        label_max_length: int,
        on_forget: Callable[[Job], None] | None = None,
    ) -> None:
        self.mode = mode
        self.max_jobs = max_jobs
        self.label_max_length = label_max_length
        self._on_forget = on_forget
        self._jobs: dict[Hashable, Job] = {}  # by job key, oldest first
        self._job_ids = 0
        self._manual_job: Job | None = None

    def __len__(self) -> int:
        return len(self._jobs)

    def job_for(self, client: str, name: str, span: tuple[str, str] | None) -> Job:
        """The job of a graph that ``client`` submitted, naming it ``name``, under the
        top-level span ``span`` (id, name)."""
        if self.mode is JobMode.MANUAL:
            job = self._manual_job or self.new_job()
            if not job.name:
                job.name = clean_label(name or client, self.label_max_length)
            return job
        if self.mode is JobMode.SPAN:
            span_id, span_name = span or ("", "default")
            key: Hashable = ("span", span_id)
            job_name, pinned = span_name, False
        else:
            key, job_name, pinned = ("client", client), name or client, True
        job = self._jobs.get(key)
        if job is None:
            job = self._new_job(key, job_name, pinned)
        elif pinned:
            job.pinned = True  # a client that reconnected under its id
        return job

    def _new_job(self, key: Hashable, name: str, pinned: bool) -> Job:
        self.evict(self.max_jobs - 1)  # make room first: the new job is idle too
        label = clean_label(name, self.label_max_length) if name else ""
        job = Job(self._job_ids, key, label, pinned=pinned)
        self._job_ids += 1
        self._jobs[key] = job
        return job

    def new_job(self, name: str | None = None) -> Job:
        """Manual mode: the next graph submissions belong to a new job."""
        if self.mode is not JobMode.MANUAL:
            raise ValueError(f"new_job needs job mode 'manual', not {self.mode.value!r}")
        if self._manual_job is not None:
            self._manual_job.pinned = False
        self._manual_job = self._new_job(("manual", self._job_ids), name or "", True)
        return self._manual_job

    def client_left(self, client: str) -> None:
        """A client disconnected: its job (client mode) may now be evicted when idle."""
        job = self._jobs.get(("client", client))
        if job is not None:
            job.pinned = False
            self.evict()

    def evict(self, limit: int | None = None) -> None:
        """Drop the oldest idle jobs (no DAG held, not pinned) beyond ``limit`` jobs."""
        excess = len(self._jobs) - (self.max_jobs if limit is None else limit)
        if excess <= 0:
            return
        idle = [k for k, job in self._jobs.items() if not job.held and not job.pinned]
        for key in idle[:excess]:
            job = self._jobs.pop(key)
            if self._on_forget is not None:
                self._on_forget(job)
