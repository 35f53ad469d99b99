#!/usr/bin/env bash
# Install dask-metrics[test] with pinned packages into a venv of its own, for a test tier
# that needs other versions than ./.venv (the oldest Dask, dask-cuda's Dask).
# Usage: venv-with.sh VENV PIN... ; reinstalls only when the pins or pyproject.toml changed
# (a stamp file in VENV).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$1"
shift
pins=("$@")
stamp="$venv/.installed"
want="${pins[*]} $(sha256sum pyproject.toml | cut -d' ' -f1)"
[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && exit 0

echo "$(basename "$venv"): installing dask-metrics[test] with ${pins[*]}" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! {
  { [ -x "$venv/bin/python" ] || python3 -m venv "$venv"; } &&
    "$venv/bin/python" -m pip install --upgrade pip &&
    "$venv/bin/python" -m pip install -e ".[test]" "${pins[@]}"
} >"$log" 2>&1; then
  cat "$log" >&2
  echo "$(basename "$venv"): installing failed (pip's output above)" >&2
  exit 1
fi
echo "$want" >"$stamp"
