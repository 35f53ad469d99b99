#!/usr/bin/env bash
# Run the Dask-facing tests on the oldest distributed (and dask) that pyproject.toml allows,
# in ./.venv-oldest: the preloads touch Dask internals, so the floor must be tested, not
# assumed. The floor is read from pyproject.toml's "distributed>=X"; the venv is reinstalled
# only when that floor or pyproject.toml changed (stamp file). Extra arguments go to pytest.
# Needs what scripts/setup.sh installs on the system (prometheus, gcc, python3-venv).
set -euo pipefail
cd "$(dirname "$0")/.."

# The test files that start real Dask schedulers and workers with the preloads.
tests=(
  tests/test_scheduler_plugin.py
  tests/test_scheduler_subprocess.py
  tests/test_scheduler_fine.py
  tests/test_exporter_worker.py
  tests/test_monitor_e2e.py
)

venv=.venv-oldest
floor=$(sed -n 's/^ *"distributed>=\([0-9.]*\)".*/\1/p' pyproject.toml)
if [ -z "$floor" ]; then
  echo "test-dask-oldest: no \"distributed>=X\" dependency in pyproject.toml" >&2
  exit 1
fi
pins=("distributed==$floor" "dask==$floor")
bash scripts/venv-with.sh "$venv" "${pins[@]}"

"$venv/bin/python" -c 'import dask, distributed; print(
    f"test-dask-oldest: dask {dask.__version__}, distributed {distributed.__version__}")'
"$venv/bin/python" -m pytest "${tests[@]}" "$@"
