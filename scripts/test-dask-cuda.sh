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
bash scripts/venv-with.sh "$venv" "${pins[@]}"

"$venv/bin/python" -c 'import dask_cuda, distributed; print(
    f"test-dask-cuda: dask-cuda {dask_cuda.__version__}, distributed {distributed.__version__}")'
"$venv/bin/python" -m pytest -m dask_cuda tests/test_dask_cuda.py "$@"
