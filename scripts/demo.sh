#!/usr/bin/env bash
# The main job, end to end on this machine: a sidecar exporter serving GPU metrics
# (real GPUs through NVML when present, otherwise simulated ones, said loudly), then one scrape.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m exporter.demo "$@"
