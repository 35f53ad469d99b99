#!/usr/bin/env bash
# Run the tests of the real dask-cuda (LocalCUDACluster over the suite's fake NVML driver)
# in ./.venv-cuda: dask-cuda pins its own Dask (rapids-dask-dependency), so it gets an
# environment of its own, with the project installed beside it. cuda-bindings is what
# dask-cuda imports; the CUDA toolkit wheels of its [cu12] extra are not needed without a
# GPU. Reinstalled only when the pins or pyproject.toml changed. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-cuda
pins=("dask-cuda==26.10.0" "cuda-bindings>=12,<13")
stamp="$venv/.installed"
want="${pins[*]} $(sha256sum pyproject.toml | cut -d' ' -f1)"

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "test-dask-cuda: installing dask-metrics[test] with ${pins[*]} into $venv" >&2
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  if ! {
    { [ -x "$venv/bin/python" ] || python3 -m venv "$venv"; } &&
      "$venv/bin/python" -m pip install --upgrade pip &&
      "$venv/bin/python" -m pip install -e ".[test]" "${pins[@]}"
  } >"$log" 2>&1; then
    cat "$log" >&2
    echo "test-dask-cuda: installing into $venv failed (pip's output above)" >&2
    exit 1
  fi
  echo "$want" >"$stamp"
fi

"$venv/bin/python" -c 'import dask_cuda, distributed; print(
    f"test-dask-cuda: dask-cuda {dask_cuda.__version__}, distributed {distributed.__version__}")'
"$venv/bin/python" -m pytest -m dask_cuda tests/test_dask_cuda.py "$@"
