"""One import package, ``dask_metrics``: the wheel installs nothing else, every module
imports its siblings through it (so no file is ever imported twice under two names), and the
installed wheel works without the source tree."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PART_FOLDERS = ("dask_metrics", "exporter", "collector")
OLD_TOP_LEVEL = {"exporter", "collector"}
OLD_PRELOADS = {"exporter." + role for role in ("scheduler", "worker")}  # built, not spelled


def python_files() -> list[Path]:
    folders = (*PART_FOLDERS, "tests", "benchmarks", "grafana")
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py")
                  if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_a_part_folder_as_a_top_level_package(path: Path):
    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] in OLD_TOP_LEVEL]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in OLD_TOP_LEVEL:
                bad.append(node.module)
        elif isinstance(node, ast.Constant) and node.value in OLD_PRELOADS:
            bad.append(repr(node.value))  # a preload is a module name in a string
    assert not bad, f"{path.relative_to(ROOT)}: say dask_metrics.<part>: {bad}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    (found,) = out.glob("dask_metrics-*.whl")
    return found


@pytest.mark.integration
def test_the_wheel_installs_one_top_level_package(wheel: Path):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        top_level = zf.read(f"{info}/top_level.txt").decode().split() \
            if f"{info}/top_level.txt" in names else []
        record = zf.read(f"{info}/RECORD").decode()
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
    roots = {line.split(",")[0].split("/")[0] for line in record.splitlines() if line}
    assert roots == {"dask_metrics", info}, roots
    assert top_level in ([], ["dask_metrics"]), top_level
    for module in ("dask_metrics/contract.py", "dask_metrics/scheduler.py",
                   "dask_metrics/worker.py", "dask_metrics/exporter/cli.py",
                   "dask_metrics/exporter/scheduler.yaml", "dask_metrics/collector/cli/main.py",
                   "dask_metrics/collector/report/gpu_models.csv",
                   "dask_metrics/collector/report/mig_profiles.csv",
                   "dask_metrics/demo/localstack.py"):
        assert any(line.startswith(module + ",") for line in record.splitlines()), module
    assert "dask-metrics-exporter = dask_metrics.exporter.cli:main" in entry_points
    assert "collector = dask_metrics.collector.cli.main:main" in entry_points


@pytest.mark.integration
def test_the_installed_wheel_works_without_the_source_tree(wheel: Path, tmp_path: Path):
    target = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import dask_metrics, dask_metrics.scheduler, dask_metrics.worker\n"
        "import dask_metrics.exporter.cli, dask_metrics.collector.cli.main, dask_metrics.demo.cli\n"
        "from dask_metrics import Monitor\n"
        "mods = [m for n, m in sys.modules.items() if n.split('.')[0] == 'dask_metrics']\n"
        "outside = [m.__name__ for m in mods if not m.__file__.startswith(sys.argv[1])]\n"
        "assert not outside, outside\n"
        "assert not {'exporter', 'collector'} & set(sys.modules), 'a part imported top-level'\n"
        "print(Monitor.__module__, len(mods))\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(target)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("dask_metrics.collector.monitor.monitor ")
