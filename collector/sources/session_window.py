"""A monitor session's time range: the one place where "session N" or ``--since monitor``
becomes the [since, until] that every command and every ``Monitor`` method reads.

Sessions live on the scheduler and are recorded in Prometheus by two gauges
(``dask_job_monitor_start_timestamp_seconds`` and
``dask_job_monitor_stop_timestamp_seconds``). A session whose scheduler restarted
(or stopped, or is no longer scraped) while it ran is not lost: it ended at the old
scheduler's last scrape that still showed it, and is marked interrupted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dask_metrics.collector.errors import CollectorError, UsageError
from dask_metrics.collector.model.jobs import unscraped_note
from dask_metrics.collector.query.presence import any_sample, gpu_parts
from dask_metrics.collector.query.refusals import parts_of
from dask_metrics.collector.query.scope import UNSCOPED, Scope
from dask_metrics.collector.store.client import PrometheusClient
from dask_metrics.contract import (
    CURRENT_JOB,
    DAG_STATUS,
    DAGS_UNSCRAPED,
    DASK_CLUSTER,
    EXPORTER_NVML_UP,
    INFO,
    MONITOR_START,
    MONITOR_STOP,
    SCHEDULER_START,
    UP,
    UUID,
    WORKER,
)

#: Look-backs for the last session, shortest first, so a recent session stays cheap to find.
MONITOR_LOOKBACK = ("1h", "1d", "7d", "31d")
#: The longest scrape interval expected of the exporters (Prometheus' default is 60 s): a
#: session with no GPU sample inside, but one within this before and after it, fell between
#: two scrapes; otherwise Prometheus was not scraping the GPUs then.
SCRAPE_GAP = 60.0
#: Series whose newest sample shows how far Prometheus has scraped the cluster: every GPU
#: and the scheduler.
FRESHNESS = (UP.name, CURRENT_JOB.name)
#: Seconds back an instant selector's series are listed from, beyond any store's lookback
#: (Prometheus' is 5 minutes).
LOOKBACK = 3600.0
#: Seconds to wait for Prometheus to scrape past a session's stop, by default.
PATIENCE = 30.0

Warn = Callable[[str], None]


@dataclass(frozen=True)
class Recorded:
    """A session as Prometheus recorded it: ``stop`` None while it runs; ``interrupted``:
    its scheduler went away while it ran, and ``stop`` is that scheduler's last scrape
    showing it."""

    start: float
    stop: float | None
    cluster: str = ""
    interrupted: bool = False

    def note(self, what: str = "the monitor session") -> str:
        """The warning an interrupted session comes with ("" for the others)."""
        if not self.interrupted or self.stop is None:
            return ""
        return (f"{what} ended with its scheduler (restarted, stopped or no longer scraped): "
                f"its last scrape showing the session was {self.stop - self.start:.3g} s after "
                "the start; the session ends there, marked interrupted")


def last_session(client: PrometheusClient, now: float, scope: Scope = UNSCOPED) -> Recorded:
    """The last monitor session of ``scope``'s cluster (unscoped: of the one cluster that
    has sessions, else UsageError lists them), stopped, running or interrupted."""
    for window in MONITOR_LOOKBACK:
        starts = [s for s in client.query(
            f"last_over_time({scope.of(MONITOR_START.name)}[{window}])", now)
            if s.values and s.values[-1] > 0]
        if starts:
            break
    else:
        where = f" of cluster {scope.cluster!r}" if scope.cluster else ""
        raise CollectorError(f"no monitor session{where} in the last 31 days "
                             f"({MONITOR_START.name}): give --since a time")
    found = sorted({s.labels.get(DASK_CLUSTER, "") for s in starts})
    if scope.cluster is None and len(found) > 1:
        names = ", ".join(repr(c) if c else "'' (no dask_cluster label)" for c in found)
        raise UsageError(f"monitor sessions of {len(found)} Dask clusters in the last "
                         f"{window}: {names}; choose one with --cluster NAME")
    latest = max(starts, key=lambda s: s.values[-1])
    cluster = latest.labels.get(DASK_CLUSTER, "")
    # the same scheduler's series: its cluster (HA replicas' copies are one session)
    own = Scope(cluster if scope.cluster is None else scope.cluster, scope.replica_labels)
    return _as_recorded(client, own, latest.values[-1], now, window) or Recorded(
        latest.values[-1], None, cluster)


def recorded_session(client: PrometheusClient, start: float, now: float,
                     scope: Scope = UNSCOPED) -> Recorded | None:
    """The session that started at ``start`` as Prometheus recorded it, None where no
    scrape showed it (a session the scheduler forgot: it restarted, or kept too few)."""
    return _as_recorded(client, scope, start, now, f"{max(int(now - start) + 60, 60)}s")


def _as_recorded(client: PrometheusClient, scope: Scope, start: float, now: float,
                 window: str) -> Recorded | None:
    """The session that started at ``start``: stopped (its stop gauge), running (the
    scheduler's newest scrape shows it) or interrupted (at its last scrape that showed it);
    None where no scrape showed it."""
    cluster = scope.cluster or ""
    stop = _stop_of(client, scope, start, now, window)
    if stop is not None:
        return Recorded(start, stop, cluster)
    # Running while the scheduler's newest scrape still shows it. Not "while an instant
    # query finds it": without stale markers (a restarted Prometheus, VictoriaMetrics,
    # remote storage) a gone series is found for minutes after its last sample.
    started = scope.of(MONITOR_START.name)  # timestamp() of a selector: the sample's time
    shown = [s.values[-1] for s in client.query(
        f"timestamp({started}) and ignoring(__name__) ({started} == {start!r})", now)
        if s.values]
    newest = [s.values[-1] for s in client.query(
        f"max(timestamp({scope.of(CURRENT_JOB.name)}))", now) if s.values]
    if shown and (not newest or max(newest) <= max(shown) + 0.001):
        return Recorded(start, None, cluster)
    last = max(shown) if shown else _last_shown(client, scope, start, now)
    if last is None:
        return None
    stop = _stop_of(client, scope, start, last, "5m")
    return Recorded(start, stop, cluster) if stop is not None else \
        Recorded(start, last, cluster, interrupted=True)


def _stop_of(client: PrometheusClient, scope: Scope, start: float, at: float, window: str
             ) -> float | None:
    """The stop gauge of the session that started at ``start``, as last scraped before
    ``at``; None while it ran (0) or where no scrape showed its stop."""
    started = f"last_over_time({scope.of(MONITOR_START.name)}[{window}]) == {start!r}"
    stops = client.query(f"last_over_time({scope.of(MONITOR_STOP.name)}[{window}]) "
                         f"and ignoring(__name__) ({started})", at)
    stop = max((s.values[-1] for s in stops if s.values), default=0.0)
    return stop if stop >= start else None


def _last_shown(client: PrometheusClient, scope: Scope, start: float, now: float
                ) -> float | None:
    """The last scrape whose start gauge showed the session that started at ``start``:
    looked for in longer and longer stretches back from ``now`` (never before the start),
    so finding a recent end reads few samples."""
    span = max(now - start, 1.0)
    for window in (600.0, 3600.0, 86400.0, 7 * 86400.0, 31 * 86400.0):
        reach = min(window, span + 60.0)
        times = [t for s in client.query(f"{scope.of(MONITOR_START.name)}[{int(reach) + 1}s]",
                                         now)
                 for t, v in zip(s.times, s.values, strict=True) if v == start]
        if times:
            return max(times) / 1000
        if reach >= span + 60.0:
            return None
    return None


# ---- the window ----------------------------------------------------------------------------


def window(client: PrometheusClient, start: float, stop: float | None, scope: Scope, *,
           stretch: bool, patience: float, warn: Warn, what: str = "the monitor session"
           ) -> tuple[float, float]:
    """The session's [start, stop] (now while it runs), once Prometheus has scraped every
    GPU and the scheduler past its end (at most ``patience`` seconds of waiting, said in a
    warning): results read right after a stop are then complete.

    ``stretch``: a session between two scrapes (shorter than one scrape interval) holds no
    GPU sample; its range then ends once every GPU has been scraped after the stop (within
    SCRAPE_GAP; said in a warning): what export, report and plots need. Peaks are dated
    and read past the end by themselves, so they ask without."""
    until = stop if stop else time.time()
    deadline = time.monotonic() + patience
    while not _scraped_past(client, until, scope):
        if time.monotonic() > deadline:
            warn(f"Prometheus has not scraped up to the end of {what} after {patience:g} s: "
                 "the last samples may be missing")
            break
        time.sleep(0.5)
    if not stretch:
        return start, until
    gpus, end = scope.of(INFO.name), round(until * 1000)
    span, gap = max(round((until - start) * 1000), 1), round(SCRAPE_GAP * 1000)
    parts = parts_of(client, gpus, UUID, round(start * 1000) - gap + 1, end)
    if (any_sample(client, gpus, end - span + 1, end, parts)
            or not any_sample(client, gpus, round(start * 1000) - gap + 1,
                              round(start * 1000), parts)):
        return start, until
    # scraped just before, not inside: the session fell between two scrapes
    firsts = scrapes_after(client, until, scope, INFO.name, gpus=True)
    while None in firsts and time.monotonic() < deadline:  # each GPU's next scrape
        time.sleep(0.5)
        firsts = scrapes_after(client, until, scope, INFO.name, gpus=True)
    first = max(filter(None, firsts), default=until)
    if until < first <= until + SCRAPE_GAP:
        warn(f"{what} lasted {until - start:.3g} s, less than one scrape: its range ends once "
             f"every GPU was scraped after its stop, {first - until:.3g} s later")
        until = first
    return start, until


def await_scheduler(client: PrometheusClient, t: float, scope: Scope, *, patience: float,
                    warn: Warn) -> float:
    """Wait (at most ``patience`` s) until Prometheus has scraped, at or after ``t``, every
    scheduler of ``scope`` that it scraped within SCRAPE_GAP before: only then is "the last
    session" in Prometheus the last one on the scheduler (a session started and stopped
    since the previous scrape is not in Prometheus yet, and the one before it would be
    taken for it). A scheduler no longer scraped is not waited for. Returns the time to ask
    Prometheus at: ``t``, or the newest of those scrapes where it is later (a query at ``t``
    would not see it)."""
    deadline = time.monotonic() + patience
    while True:
        newest = [s.values[-1] for s in client.query(f"timestamp({scope.of(CURRENT_JOB.name)})",
                                                     time.time()) if s.values]
        recent = [v for v in newest if v >= t - SCRAPE_GAP]
        behind = [v for v in recent if v < t]
        if not behind:
            return max([t, *recent])
        if time.monotonic() > deadline:
            warn(f"Prometheus' newest scrape of the scheduler is {t - min(behind):.3g} s "
                 f"old (waited {patience:g} s for the next): a monitor session started and "
                 "stopped since then is not seen; the last one scraped is taken")
            return t
        time.sleep(0.25)


def await_exporters(client: PrometheusClient, workers: Sequence[str], t: float, scope: Scope,
                    *, patience: float, warn: Warn) -> None:
    """Wait (at most ``patience`` s) until Prometheus has scraped each of ``workers``' GPU
    exporters at ``t`` or later: a cluster just given its plugins has endpoints Prometheus
    discovers at its next refresh, and a session started before would miss its first
    seconds. Workers still unscraped then are named in a warning."""
    deadline = time.monotonic() + patience
    while True:
        newest = client.query(f"max by ({WORKER}) (timestamp("
                              f"{scope.of(EXPORTER_NVML_UP.name)}))", time.time())
        seen = {s.labels.get(WORKER) for s in newest if s.values and s.values[-1] >= t}
        missing = sorted(w for w in workers if w not in seen)
        if not missing:
            return
        if time.monotonic() > deadline:
            warn(f"Prometheus has not scraped the GPU exporter of {', '.join(missing)} "
                 f"{patience:g} s after dask-metrics' plugins were added: is it discovering "
                 "the scheduler's /dask-metrics/targets? (docs/deploy.md)")
            return
        time.sleep(0.5)


def _scraped_past(client: PrometheusClient, until: float, scope: Scope) -> bool:
    """Whether every GPU and the scheduler have been scraped at ``until`` or later (the GPUs
    by parts where a store's limit on series is below them)."""
    for metric in FRESHNESS:
        now = time.time()
        newest = gpu_parts(client, scope.of(metric), round((now - LOOKBACK) * 1000),
                           round(now * 1000), lambda more, metric=metric, now=now: client.query(
                               f"min(timestamp({scope.of(metric, more)}))", now))
        if any(s.values and s.values[-1] < until for s in newest):
            return False
    return True


def scrapes_after(client: PrometheusClient, t: float, scope: Scope, metric: str,
                  gpus: bool = False) -> list[float | None]:
    """Per series of ``metric`` sampled lately: its first sample at or after ``t``, None
    while it has none yet (``gpus``: GPU series, by parts where a store's limit on series
    is below them)."""
    now = time.time()
    span = max(int(now - t) + 2, 2)

    def ask(more: Sequence[str]) -> list[float | None]:
        return [min((ms / 1000 for ms in series.times if ms / 1000 >= t), default=None)
                for series in client.query(f"{scope.of(metric, more)}[{span}s]", now)]

    if not gpus:
        return ask(())
    return gpu_parts(client, scope.of(metric), round((now - span) * 1000), round(now * 1000),
                     ask)


def first_scrape_after(client: PrometheusClient, t: float, scope: Scope) -> float:
    """Time of the scheduler's first scrape at or after ``t`` (``t`` itself if none yet)."""
    return min(filter(None, scrapes_after(client, t, scope, CURRENT_JOB.name)), default=t)


def dag_outcomes(client: PrometheusClient, since: float, settled: float, scope: Scope,
                 life: str) -> tuple[dict[tuple[int, int], int], str | None]:
    """{(job id, DAG id): status} of the DAGs the scheduler showed from ``since`` to
    ``settled`` (its first scrape after a session's stop: a DAG that ended just before the
    stop is first scraped after it), of its life ``life`` only (a restarted scheduler's DAGs
    reuse the ids); and the warning for DAGs it forgot before a scrape saw them, if any."""
    window = max(int(settled - since) + 1, 1)
    seen: dict[tuple[int, int], int] = {}
    for series in client.query(f"last_over_time({scope.of(DAG_STATUS.name)}[{window}s])",
                               settled):
        if life and series.labels.get(SCHEDULER_START, life) != life:
            continue
        seen[int(series.labels["job_id"]), int(series.labels["dag_id"])] = int(
            series.values[-1])
    lost = unscraped_note(client.query(
        f"{scope.of(DAGS_UNSCRAPED.name)}[{window + int(SCRAPE_GAP)}s]", settled),
        round(since * 1000), round(settled * 1000))
    return seen, lost
