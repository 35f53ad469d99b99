#!/usr/bin/env bash
# Run the test suite (and the linter) the way CI does: installs what it needs first, then
#   1. the fast tier: pure logic, no servers (under a minute),
#   2. the integration tier: real Prometheus, Dask, sidecars over the fake NVML driver,
#   3. the Dask-facing tests again on the oldest distributed that pyproject.toml allows,
#      and the real dask-cuda's in an environment of its own (it pins its Dask),
#   4. the containers tier: the image built and the compose stack run with podman.
# Extra arguments run pytest with them instead (e.g. a file, -k EXPR, -m integration).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
export DASK_METRICS_NO_SKIPS=1  # every piece is installed: a skipped test is a failure
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
.venv/bin/python -m pytest -m "not integration" -q
bash scripts/test-dask-oldest.sh -q
bash scripts/test-dask-cuda.sh -q
.venv/bin/python -m pytest -m integration -q
bash scripts/setup-containers.sh
.venv/bin/python -m pytest -m containers tests/test_containers.py
