#!/usr/bin/env bash
# The main job, end to end on this machine: a local Dask cluster with the scheduler preload
# and a GPU exporter per worker (real GPUs through NVML when present, otherwise simulated ones,
# said loudly), a real Prometheus scraping every second, an example workload driven through the
# Monitor API, then per-worker CSV files, the peak-memory table and plots.
# Options: --workers N, --out DIR, --keep-running, --simulate, ... (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh plot
exec .venv/bin/python -m dask_metrics.demo "$@"
