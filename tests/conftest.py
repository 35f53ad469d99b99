"""Shared fixtures (shared functions: tests/helpers.py). The fake NVML library is built once
per session from NVIDIA's nvml.h.

Tiers: ``-m "not integration"`` is the fast tier (no process, no server), ``-m integration``
the rest. The opt-in markers (gpu, containers) stay out unless the -m expression names them:
a -m on the command line replaces pyproject's ``-m 'not gpu and not containers'``, and the
two tiers together must still be the default suite.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dask_metrics.collector.connection import ENV_URL
from tests.fake_nvml import FakeNVML, build_fake_nvml

OPT_IN = ("gpu", "containers")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect gpu and containers tests unless the -m expression names their marker."""
    expr = config.getoption("markexpr") or ""
    unasked = [m for m in OPT_IN if not re.search(rf"\b{m}\b", expr)]
    dropped = [i for i in items if any(i.get_closest_marker(m) for m in unasked)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if not any(i.get_closest_marker(m) for m in unasked)]


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
