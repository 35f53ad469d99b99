"""Shared fixtures (shared functions: tests/helpers.py). The fake NVML library is built once
per session from NVIDIA's nvml.h.

Tiers: ``-m "not integration"`` is the fast tier (no process, no server), ``-m integration``
the rest. The opt-in markers (gpu, containers) stay out unless the -m expression names them:
a -m on the command line replaces pyproject's ``-m 'not gpu and not containers'``, and the
two tiers together must still be the default suite.

A test whose piece is missing on a developer's machine (Prometheus, Chromium, NVIDIA's
header for the fake driver) is skipped with the piece named; under ``scripts/test.sh``
(what CI runs, which installs every piece first: ``STRICT_ENV`` set) a skip is a failure.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from dask_metrics.collector.store.connection import ENV_URL
from tests.fake_nvml import FakeNVML, FakeNVMLBuildError, build_fake_nvml

OPT_IN = ("gpu", "containers", "dask_cuda")
STRICT_ENV = "DASK_METRICS_NO_SKIPS"


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Under STRICT_ENV, a skipped test fails, saying which piece was missing."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get(STRICT_ENV) and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped where every piece must be installed ({STRICT_ENV}): {reason}"


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the fake ``libnvidia-ml.so.1`` (compiled once per session); the
    tests that need it are skipped, naming what is missing, where it cannot be built."""
    try:
        return build_fake_nvml(tmp_path_factory.mktemp("fake_nvml"))
    except FakeNVMLBuildError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def fake_nvml(tmp_path: Path, fake_nvml_lib: Path) -> FakeNVML:
    """Two default fake GPUs, state written to tmp_path; use ``.env`` for subprocesses."""
    fake = FakeNVML(tmp_path / "nvml_state", fake_nvml_lib, gpus=2)
    fake.write()
    return fake
