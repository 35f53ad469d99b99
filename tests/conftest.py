"""Shared fixtures. The fake NVML library is built once per session from NVIDIA's nvml.h."""

from __future__ import annotations

from pathlib import Path

import pytest

from dask_metrics.collector.connection import ENV_URL
from tests.fake_nvml import FakeNVML, build_fake_nvml


@pytest.fixture(autouse=True)
def _no_prometheus_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's DASK_METRICS_PROMETHEUS_URL must not reach the collector in a test."""
    monkeypatch.delenv(ENV_URL, raising=False)


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the fake ``libnvidia-ml.so.1`` (compiled once per session)."""
    return build_fake_nvml(tmp_path_factory.mktemp("fake_nvml"))


@pytest.fixture
def fake_nvml(tmp_path: Path, fake_nvml_lib: Path) -> FakeNVML:
    """Two default fake GPUs, state written to tmp_path; use ``.env`` for subprocesses."""
    fake = FakeNVML(tmp_path / "nvml_state", fake_nvml_lib, gpus=2)
    fake.write()
    return fake
