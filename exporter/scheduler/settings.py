"""The preload's settings: Dask config ``dask-metrics.scheduler.*`` (defaults in
``scheduler.yaml``), overridden by the preload's command-line options; the ``dask_cluster``
label's value from ``--dask-cluster``, ``DASK_METRICS_CLUSTER`` or ``dask-metrics.cluster``."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import dask.config
import yaml
from dask.utils import parse_timedelta

from dask_metrics.exporter import cluster
from dask_metrics.exporter.job_model import JobMode
from dask_metrics.options import Option
from dask_metrics.values import whole_number

CONFIG_SECTION = "dask-metrics.scheduler"


def _load_defaults() -> dict[str, Any]:
    """Register scheduler.yaml as Dask config defaults, the way Dask extensions do, so
    ``dask.config.get`` knows every key before the first Settings is made; returns them."""
    text = files("dask_metrics.exporter").joinpath("scheduler.yaml").read_text(encoding="utf-8")
    defaults = yaml.safe_load(text)
    dask.config.update_defaults(defaults)
    return defaults


# Also read directly: a ``dask.config.set`` block that first named a dask-metrics key
# removes the whole section when it ends, defaults registered meanwhile included.
_DEFAULTS = _load_defaults()["dask-metrics"]["scheduler"]


@dataclass(frozen=True)
class Settings:
    """The preload's settings as read (``from_config``); their defaults are scheduler.yaml's,
    written nowhere else."""

    job_mode: JobMode
    prometheus_url: str | None
    metrics_port: int | None
    metrics_address: str  # "" listens on every interface, as Dask's own servers do
    max_finished_dags: int
    max_unscraped_dags: int
    max_finished_series: int
    finished_dag_ttl: float
    max_jobs: int
    max_sessions: int
    label_max_length: int
    max_prefixes_per_job: int
    prometheus: str | None = None  # "local": run a Prometheus beside the scheduler
    local_prometheus_dir: str | None = None  # its data; None: under the temporary directory
    local_prometheus_port: int = 0  # 0: a free one
    cluster: str | None = None  # the user's dask_cluster value; None: derived at attach

    @classmethod
    def from_config(cls, **overrides: Any) -> Settings:
        """Dask config ``dask-metrics.scheduler.*``, overridden by non-None ``overrides``
        (the preload's options), each read as SETTINGS declares it."""
        values: dict[str, Any] = {}
        for o in SETTINGS:
            raw = overrides.get(o.name)
            if raw is None:
                raw = dask.config.get(f"{CONFIG_SECTION}.{o.key}", default=_DEFAULTS[o.key])
            try:
                values[o.name] = o.parse(raw)  # type: ignore[misc]
            except (ValueError, TypeError, KeyError) as exc:
                raise ValueError(f"{CONFIG_SECTION}.{o.key}: {raw!r} is not {exc}") from None
        return cls(**values, cluster=cluster.configured(overrides.get("cluster")))


def _count(low: int, high: int = 2**31, accepted: str = "") -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        number = whole_number(value)
        if number is None or not low <= number < high:
            raise ValueError(accepted or f"a whole number, {low} or more")
        return number
    return parse


def _job_mode(value: Any) -> JobMode:
    try:
        return JobMode(value)
    except ValueError:
        raise ValueError("one of " + ", ".join(m.value for m in JobMode)) from None


def _duration(value: Any) -> float:
    try:
        seconds = float(parse_timedelta(value, default="s"))
    except (ValueError, TypeError, KeyError):
        seconds = math.nan
    if not seconds >= 0:
        raise ValueError("a duration such as 300s or 5m")
    return seconds


def _port(value: Any) -> int | None:
    return None if value is None or value == "" else _count(0, 65536, "a port (0-65535)")(value)


def _prometheus(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if str(value).strip().lower() != "local":
        raise ValueError("local (a Prometheus beside the scheduler), or null")
    return "local"


SETTINGS = (
    Option("job_mode", _job_mode, f"how submissions form jobs (default: config "
           f"{CONFIG_SECTION}.job-mode, else client)", choices=tuple(m.value for m in JobMode)),
    Option("prometheus_url", lambda v: v or None, "Prometheus URL advertised to Monitors"),
    Option("prometheus", _prometheus, "local: run the prometheus binary on PATH beside the "
           "scheduler, scraping this cluster, and advertise it to Monitors",
           choices=("local",)),
    Option("local_prometheus_dir", lambda v: str(v) if v else None, "the local Prometheus' "
           "folder, kept after the cluster stops (default: dask-metrics-prometheus/<cluster> "
           "under the temporary directory)"),
    Option("local_prometheus_port", _count(0, 65536, "a port (0-65535)"), "the local "
           "Prometheus' port on 127.0.0.1 (default 0: a free one)"),
    Option("metrics_port", _port, "serve dask_job_* on this port's /metrics instead of the "
           "scheduler's (0: any free)"),
    Option("metrics_address", lambda v: str(v or ""), "the address --metrics-port listens on "
           "(default: every interface)"),
    Option("max_finished_dags", _count(0), "finished DAGs kept (scheduler.yaml)"),
    Option("max_unscraped_dags", _count(0), "finished DAGs no scrape saw yet, kept beyond "
           "max-finished-dags"),
    Option("max_finished_series", _count(0), "series of scraped finished DAGs kept at most"),
    Option("finished_dag_ttl", _duration, "how long a scraped finished DAG is kept"),
    Option("max_jobs", _count(1), "idle jobs kept"),
    Option("max_sessions", _count(1), "finished monitor sessions kept"),
    Option("label_max_length", _count(16), "the longest label value"),
    Option("max_prefixes_per_job", _count(1), "task prefixes with series of their own, per job"),
)
"""The preload's settings, declared once: their Dask config keys (``job-mode``), the
preload's options (``--job-mode``: the first seven) and how each is read. Their defaults are
scheduler.yaml's."""
