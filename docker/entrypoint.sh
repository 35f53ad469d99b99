#!/bin/sh
# Entry point of the dask-metrics image. No arguments, or a first argument that is an option
# ("--simulate 2", "--worker-info-file /shared/worker.json"): run the GPU exporter with them.
# Anything else is a command to run ("dask scheduler ...", "dask worker ...", "collector ...").
set -eu
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
  set -- dask-metrics-exporter "$@"
fi
exec "$@"
