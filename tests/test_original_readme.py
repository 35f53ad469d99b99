"""The original dask-metrics README's two snippets, run as they are written there
(../shared/seeds/dask-metrics-README.md), with only the scheduler address filled in, on the
local stack: a scheduler with the preload, workers with sidecars, a real Prometheus.

The snippets use ``Client`` without importing it, as in a session that already did
``from distributed import Client``; they run in such a namespace. Between them, two jobs run
from new clients, as the README says ("run any jobs just as you normally would").
"""

from __future__ import annotations

import csv
import re
import time
from pathlib import Path

import pytest
from distributed import Client

from dask_metrics.demo.localstack import LocalStack, StackOptions

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT.parent / "shared" / "seeds" / "dask-metrics-README.md"
PLACEHOLDER = "'[scheduler address]'"


def snippets() -> list[str]:
    if not SEED.exists():
        pytest.fail(f"the original README is missing: {SEED} (../shared beside the checkout)")
    blocks = re.findall(r"```python\n(.*?)```", SEED.read_text(), flags=re.S)
    assert len(blocks) == 2, "the original README has two snippets"
    assert all(PLACEHOLDER in b for b in blocks)
    return blocks


def square(x: int) -> int:
    """A task long enough for Prometheus (scraping every second) to see its job run."""
    time.sleep(1.2)
    return x * x


def test_the_original_readme_runs_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    start, stop = snippets()
    with LocalStack(StackOptions(folder=tmp_path / "stack", workers=2)) as stack:
        address = repr(stack.scheduler_address)
        monkeypatch.chdir(tmp_path)  # 'path/to/folder' is relative to where the user runs it

        exec(start.replace(PLACEHOLDER, address), {"Client": Client})

        for job in range(2):  # each client is a job; each graph a DAG
            with Client(stack.scheduler_address) as client:
                for dag in range(job + 1):
                    futures = client.map(square, range(4), key=[f"j{job}d{dag}-{i}"
                                                                for i in range(4)])
                    assert client.gather(futures) == [0, 1, 4, 9]

        namespace: dict[str, object] = {"Client": Client}
        exec(stop.replace(PLACEHOLDER, address), namespace)

        # "worker.peak_memory()" in the README: a list per worker of each GPU's peak percent
        with Client(stack.scheduler_address) as client:
            monitor = namespace["Monitor"](client)  # the snippet's own import
            peaks = monitor.peak_memory()
            jobs = monitor.successful_jobs()

    folder = tmp_path / "path" / "to" / "folder"
    per_worker = {p.stem: p for p in folder.glob("*.csv")}
    assert set(stack.worker_names) <= set(per_worker), sorted(per_worker)
    for worker in stack.worker_names:
        with open(per_worker[worker], newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert rows, worker
        header = list(rows[0])
        for column in ("timestamp", "job", "dag", "mem-util", "compute-util"):
            assert column in header, (worker, header)
        assert "power" not in header  # only what attach() asked for
        assert float(rows[0]["timestamp"]) >= 0
        assert {r["job"] for r in rows} >= {"0", "1"}, worker
    assert len(peaks) == 2 and all(len(gpus) == 1 for gpus in peaks), peaks
    assert all(isinstance(p, int) and 0 <= p <= 100 for gpus in peaks for p in gpus), peaks
    assert jobs == [[True], [True, True]], jobs
