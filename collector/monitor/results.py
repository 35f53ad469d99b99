"""What a Monitor reads of a session from Prometheus: its CSV files, report, peaks, jobs and
where its time went, each over the session's range as every command reads it
(session_window)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from dask_metrics.collector.errors import MonitorError, MonitorUsageError
from dask_metrics.collector.model.columns import NAMES
from dask_metrics.collector.output.export import ExportResult, export
from dask_metrics.collector.peaks.command import peaks
from dask_metrics.collector.peaks.table import caveats
from dask_metrics.collector.query.scope import Scope
from dask_metrics.collector.report.advice import DEFAULT_HEADROOM
from dask_metrics.collector.report.build import ReportResult, make_report
from dask_metrics.collector.sources import session_window
from dask_metrics.collector.sources.summaries import read_activities, read_gpu_by_prefix
from dask_metrics.collector.store.client import PrometheusClient
from dask_metrics.collector.store.connection import ENV_URL, load_config, resolve
from dask_metrics.contract import DagStatus

DAG_FINISHED, DAG_ERRED = DagStatus.FINISHED, DagStatus.ERRED


class SessionResults:
    """Monitor's results from Prometheus. Monitor provides the session (``session()``),
    the scope of the queries (``scope()``), the scheduler's status (``status()``) and
    ``_require_open``; and the connection: ``_prometheus`` (a URL or None), ``_config``
    (a file or None), ``_connection`` (options), ``scrape_wait`` and ``metrics``."""

    metrics: list[str]
    scrape_wait: float
    _prometheus: str | None
    _config: str | None
    _connection: dict[str, Any]

    def session(self) -> dict[str, Any]:
        raise NotImplementedError

    def scope(self) -> Scope:
        raise NotImplementedError

    def status(self) -> dict[str, Any]:
        raise NotImplementedError

    def _require_open(self) -> None:
        raise NotImplementedError

    def to_csv(self, path: str | os.PathLike[str], *, layout: str = "tidy",
               step: float | None = None, workers: Sequence[str] | None = None) -> ExportResult:
        """One CSV per worker of this Monitor's (or the last) session in ``path``, and
        export.json; workers.csv, jobs.csv and the summaries in its ``tables`` subfolder."""
        return self.export_session(self.session(), path, layout=layout, step=step,
                                   workers=workers)

    def export_session(self, session: dict[str, Any], path: str | os.PathLike[str], *,
                       layout: str = "tidy", step: float | None = None,
                       workers: Sequence[str] | None = None) -> ExportResult:
        """Export one session (as ``session()`` or ``sessions()`` return them)."""
        self._require_open()
        scope = self.scope()
        with self._prometheus_client() as prom:
            since, until = self._range(prom, session)
            metrics = [m for m in session.get("metrics") or self.metrics if m in NAMES]
            with _writing(path):
                return export(prom, since, until, path, metrics=metrics or None, step=step,
                              layout=layout, workers=workers, tables=SESSION_TABLES,
                              asked={"monitor_session": session["id"], "layout": layout,
                                     **_interrupted(session)},
                              **_scoping(scope))

    def report(self, path: str | os.PathLike[str], *, fmt: str = "html",
               headroom: float = DEFAULT_HEADROOM,
               baseline: str | os.PathLike[str] | Mapping[str, Any] | None = None
               ) -> ReportResult:
        """The session report of the running or last session: ``path``/report.html and
        report.json (``fmt="text"``: also the text, in the result's ``text``). Displayed in
        Jupyter, the result shows the page. ``baseline``: compare each job with the job of
        the same name in an earlier report: its folder or report.json, its dict (a result's
        ``report``), ``"previous"`` (the session before this one) or a time in an earlier
        session; a baseline that is not a report raises ValueError."""
        session = self.session()
        scope = self.scope()
        with self._prometheus_client() as prom:
            since, until = self._range(prom, session)
            with _writing(path):
                return make_report(prom, since, until, path, fmt=fmt, headroom=headroom,
                                   asked={"monitor_session": session["id"],
                                          **_interrupted(session)}, baseline=baseline,
                                   **_scoping(scope))

    def peak_memory(self) -> list[list[int | None]]:
        """Peak memory of the last session, % of capacity: per worker (in name order, as in
        workers.csv), per GPU — the original dask-metrics format. A peak that is only a
        bound comes with a warning saying why; None where it is unknown (no sample and no
        peak window over the session) or the GPU's capacity is."""
        session = self.session()
        scope = self.scope()
        with self._prometheus_client() as prom:
            # the session as it was: the peaks are dated, and a spike just before the stop
            # is read from the first scrape after it (peaks.peaks)
            since, until = self._range(prom, session, gpu=False)
            found = peaks(prom, since, until, **_scoping(scope))
        for line in caveats(found):
            warnings.warn(line, stacklevel=2)
        by_worker: dict[str, list[int | None]] = {}
        for p in found:  # peaks come in worker order, then GPU order
            percent = p.peak_percent
            by_worker.setdefault(p.worker, []).append(None if percent is None
                                                      else round(percent))
        return list(by_worker.values())

    def activities(self) -> list[dict[str, Any]]:
        """activities.csv of the running or last session: per job, DAG (where known), task
        prefix, activity and unit, how much it grew during the session::

            [{"job": "0", "job_name": "etl", "dag": "0", "prefix": "load",
              "activity": "thread-cpu", "unit": "seconds", "value": 12.5}, ...]
        """
        return self._session_rows(read_activities)

    def gpu_by_prefix(self) -> list[dict[str, Any]]:
        """gpu_by_prefix.csv of the running or last session: per job, DAG and task prefix,
        GPU busy seconds, peak memory (bytes) and energy (J, None where the GPUs report
        none), attributed as docs/collector.md describes::

            [{"job": "0", "job_name": "etl", "dag": "0", "prefix": "train",
              "gpu_seconds": 41.2, "peak_mem": 8589934592.0, "energy": 5210.0}, ...]
        """
        return self._session_rows(read_gpu_by_prefix)

    def _session_rows(self, read: Callable[..., list[dict[str, Any]]]) -> list[dict[str, Any]]:
        session = self.session()
        scope = self.scope()
        with self._prometheus_client() as prom:
            since, until = self._range(prom, session)
            return list(read(prom, since, until, **_scoping(scope)))

    def jobs(self) -> list[dict[str, Any]]:
        """The jobs of the running or last session, each with the DAGs it submitted while the
        session ran, in job-id and DAG-id order::

            [{"job_id": 3, "job_name": "alice",
              "dags": [{"dag_id": 0, "status": "finished"}, {"dag_id": 1, "status": "erred"}]}]

        ``status``: ``finished`` or ``erred``; ``running`` or ``waiting`` when the DAG had not
        ended at the stop (``stop(force=True)``), or is running now; ``unknown`` when no
        scrape saw it. The scheduler records which DAGs were submitted during the session;
        their outcomes come from ``dask_job_dag_status``, read at the scheduler's first
        scrape after the stop (a DAG that ended just before the stop is first scraped just
        after it). DAGs of earlier sessions, still in the series for their TTL, are not in.
        """
        session = self.session()
        scope = self.scope()
        with self._prometheus_client() as prom:
            since, until = self._range(prom, session, gpu=False)
            # an interrupted session's scheduler is gone: its last scrape is the last word
            settled = (until if session.get("interrupted")
                       else session_window.first_scrape_after(prom, until, scope))
            seen, lost = session_window.dag_outcomes(prom, since, settled, scope,
                                                      session.get("scheduler_start") or "")
        recorded = session.get("jobs")
        if recorded is None:
            why = ("its scheduler restarted, and its record of which DAGs the session ran "
                   "went with it" if "interrupted" in session else
                   "the scheduler's dask-metrics preload is older than this Monitor and does "
                   "not record which DAGs a session ran")
            warnings.warn(f"{why}: these are all the DAGs that ended in Prometheus from the "
                          "session's start to its end, earlier sessions' included",
                          stacklevel=2)
            recorded = _ended_dags(seen)
        if lost:
            warnings.warn(lost, stacklevel=2)
        if session.get("unrecorded_dags"):
            warnings.warn(f"monitor session {session['id']} ran DAGs of more jobs than the "
                          f"scheduler records: {session['unrecorded_dags']} DAG(s) are left "
                          "out", stacklevel=2)
        return [{"job_id": int(job["job_id"]), "job_name": str(job.get("job_name") or ""),
                 "dags": [{"dag_id": dag,
                           "status": _status_name(seen.get((int(job["job_id"]), dag)))}
                          for dag in range(int(job["first_dag"]), int(job["last_dag"]) + 1)]}
                for job in sorted(recorded, key=lambda j: int(j["job_id"]))]

    def successful_jobs(self) -> list[list[bool]]:
        """Per job, per DAG it submitted during the running or last session (as ``jobs()``
        lists them, in the same order): True when the DAG finished, False when it erred;
        DAGs that had not ended at the stop are left out (a job with none ended: ``[]``)."""
        return [[dag["status"] == "finished" for dag in job["dags"]
                 if dag["status"] in ("finished", "erred")] for job in self.jobs()]

    def _prometheus_client(self) -> PrometheusClient:
        config = load_config(self._config) if self._config else None
        url = self._prometheus
        if not (url or os.environ.get(ENV_URL) or (config or {}).get("prometheus")):
            url = self.status().get("prometheus_url")
            if not url:
                in_config = f", put 'prometheus:' in {self._config}" if self._config else ""
                raise MonitorUsageError(
                    f"no Prometheus URL: pass Monitor(client, prometheus=URL), set {ENV_URL}"
                    f"{in_config}, or start the scheduler preload with --prometheus-url")
        settings = resolve({**self._connection, "prometheus": url}, os.environ, config)
        return PrometheusClient(settings, on_warning=lambda m: warnings.warn(m, stacklevel=3))

    def _range(self, prom: PrometheusClient, session: dict[str, Any], gpu: bool = True
               ) -> tuple[float, float]:
        """The session's range as every command reads it (session_window.window), waiting
        at most ``scrape_wait`` for Prometheus to scrape past its end; ``gpu``: stretch a
        session shorter than a scrape to the GPUs' next scrape."""
        return session_window.window(
            prom, float(session["start"]), session.get("stop") or None, self.scope(),
            stretch=gpu, patience=self.scrape_wait,
            warn=lambda line: warnings.warn(line, stacklevel=4),
            what=f"monitor session {session.get('id')}")


@contextmanager
def _writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """A file system's refusal as one MonitorError naming the caller's path (the OSError
    names a staging file the caller never chose)."""
    try:
        yield
    except OSError as exc:
        raise MonitorError(f"cannot write {os.fspath(path)}: {exc.strerror or exc}") from None


SESSION_TABLES = "tables"
"""The subfolder of a session's export for workers.csv, jobs.csv, activities.csv and
gpu_by_prefix.csv: the original ``to_csv`` contract is one CSV file per worker in the
folder."""


def _interrupted(session: dict[str, Any]) -> dict[str, Any]:
    """What export.json and report.json say of a session that ended with its scheduler."""
    return {"interrupted": True} if session.get("interrupted") else {}


def _status_name(value: int | None) -> str:
    try:
        return DagStatus(value).name.lower() if value is not None else "unknown"
    except ValueError:
        return "unknown"


def _ended_dags(seen: dict[tuple[int, int], int]) -> list[dict[str, Any]]:
    """A session record from what Prometheus saw (a preload that records none): per job,
    the range of its ended DAGs."""
    ended: dict[int, list[int]] = {}
    for (job, dag), status in sorted(seen.items()):
        if status in (DAG_FINISHED, DAG_ERRED):
            ended.setdefault(job, []).append(dag)
    return [{"job_id": job, "job_name": "", "first_dag": dags[0], "last_dag": dags[-1]}
            for job, dags in ended.items()]


def _scoping(scope: Scope) -> dict[str, Any]:
    """export's and peaks' arguments for ``scope``: its cluster, or none at all."""
    return {"cluster": scope.cluster, "any_cluster": scope.cluster is None,
            "replica_labels": scope.replica_labels}
