"""The preload's settings: Dask config ``dask-metrics.scheduler.*`` (defaults in
``scheduler.yaml``), overridden by the preload's command-line options; the ``dask_cluster``
label's value from ``--dask-cluster``, ``DASK_METRICS_CLUSTER`` or ``dask-metrics.cluster``."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import dask.config
import yaml
from dask.utils import parse_timedelta

from dask_metrics.exporter import cluster
from dask_metrics.exporter.job_tracker import JobMode
from dask_metrics.values import whole_number

CONFIG_SECTION = "dask-metrics.scheduler"


def _load_defaults() -> None:
    """Register scheduler.yaml as Dask config defaults, the way Dask extensions do, so
    ``dask.config.get`` knows every key before the first Settings is made."""
    text = files("dask_metrics.exporter").joinpath("scheduler.yaml").read_text(encoding="utf-8")
    dask.config.update_defaults(yaml.safe_load(text))


_load_defaults()


@dataclass(frozen=True)
class Settings:
    job_mode: JobMode = JobMode.CLIENT
    prometheus_url: str | None = None
    metrics_port: int | None = None
    metrics_address: str = ""  # "" listens on every interface, as Dask's own servers do
    max_finished_dags: int = 1000
    max_unscraped_dags: int = 10_000
    finished_dag_ttl: float = 300.0
    max_jobs: int = 1000
    max_sessions: int = 100
    label_max_length: int = 128
    max_prefixes_per_job: int = 50
    cluster: str | None = None  # the user's dask_cluster value; None: derived at attach

    @classmethod
    def from_config(cls, **overrides: Any) -> Settings:
        """Dask config ``dask-metrics.scheduler.*``, overridden by non-None ``overrides``."""

        def get(name: str) -> Any:
            value = overrides.get(name.replace("-", "_"))
            return dask.config.get(f"{CONFIG_SECTION}.{name}") if value is None else value

        def read(name: str, convert: Any, accepted: str) -> Any:
            value = get(name)
            try:
                result = convert(value)
            except (ValueError, TypeError, KeyError):
                result = None
            if result is None:
                raise ValueError(f"{CONFIG_SECTION}.{name}: {value!r} is not {accepted}")
            return result

        def count(low: int, high: int = 2**31) -> Any:
            return lambda v: n if (n := whole_number(v)) is not None and low <= n < high else None

        port = get("metrics-port")
        return cls(
            job_mode=read("job-mode", JobMode, "one of " + ", ".join(m.value for m in JobMode)),
            prometheus_url=get("prometheus-url") or None,
            metrics_port=None if port is None or port == ""
            else read("metrics-port", count(0, 65536), "a port (0-65535)"),
            metrics_address=str(get("metrics-address") or ""),
            max_finished_dags=read("max-finished-dags", count(0), "a whole number, 0 or more"),
            max_unscraped_dags=read("max-unscraped-dags", count(0),
                                    "a whole number, 0 or more"),
            finished_dag_ttl=read(
                "finished-dag-ttl",
                lambda v: t if (t := float(parse_timedelta(v, default="s"))) >= 0 else None,
                "a duration such as 300s or 5m"),
            max_jobs=read("max-jobs", count(1), "a whole number, 1 or more"),
            max_sessions=read("max-sessions", count(1), "a whole number, 1 or more"),
            label_max_length=read("label-max-length", count(16), "a whole number, 16 or more"),
            max_prefixes_per_job=read("max-prefixes-per-job", count(1),
                                      "a whole number, 1 or more"),
            cluster=cluster.configured(overrides.get("cluster")),
        )
