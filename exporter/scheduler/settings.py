"""The preload's settings: Dask config ``dask-metrics.scheduler.*`` (defaults in
``scheduler.yaml``), overridden by the preload's command-line options."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import dask.config
import yaml
from dask.utils import parse_timedelta

from dask_metrics.exporter.job_tracker import JobMode

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
    max_finished_dags: int = 1000
    finished_dag_ttl: float = 300.0
    max_jobs: int = 1000
    max_sessions: int = 100
    label_max_length: int = 128

    @classmethod
    def from_config(cls, **overrides: Any) -> Settings:
        """Dask config ``dask-metrics.scheduler.*``, overridden by non-None ``overrides``."""

        def get(name: str) -> Any:
            value = overrides.get(name.replace("-", "_"))
            return dask.config.get(f"{CONFIG_SECTION}.{name}") if value is None else value

        port = get("metrics-port")
        try:
            mode = JobMode(get("job-mode"))
        except ValueError:
            choices = ", ".join(m.value for m in JobMode)
            raise ValueError(f"{CONFIG_SECTION}.job-mode must be one of {choices}") from None
        return cls(
            job_mode=mode,
            prometheus_url=get("prometheus-url") or None,
            metrics_port=None if port is None or port == "" else int(port),
            max_finished_dags=int(get("max-finished-dags")),
            finished_dag_ttl=float(parse_timedelta(get("finished-dag-ttl"), default="s")),
            max_jobs=int(get("max-jobs")),
            max_sessions=int(get("max-sessions")),
            label_max_length=int(get("label-max-length")),
        )
