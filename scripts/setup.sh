#!/usr/bin/env bash
# Install what dask-metrics needs on a fresh Debian/Ubuntu machine, into ./.venv.
# Usage: setup.sh [EXTRA] -- the package extra to install: test (default: the test suite) or
# plot (the demo). System packages (prometheus, python3-venv; for the tests also gcc for the
# fake NVML driver, openssl for TLS tests, victoria-metrics, the second Prometheus-compatible
# store the collector is tested on, and chromium, which renders the session report) are
# installed with apt-get when this user may.
# A second run with nothing changed (same pyproject.toml, same extra) installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-test}"

need=()
if [ "$extra" = test ]; then
  command -v gcc >/dev/null || need+=(gcc libc6-dev)
  command -v openssl >/dev/null || need+=(openssl)
  command -v victoria-metrics >/dev/null || need+=(victoria-metrics)  # a second store
  command -v chromium >/dev/null || need+=(chromium)  # renders the session report
fi
command -v prometheus >/dev/null && command -v promtool >/dev/null || need+=(prometheus)
python3 -m venv --help >/dev/null 2>&1 || need+=(python3-venv)
bash scripts/apt-install.sh setup "${need[@]}"
# The Debian package starts a system Prometheus where systemd runs; the tests start their own.

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# What is installed, and for which pyproject.toml: the test extra includes the plot extra.
stamp=.venv/.dask-metrics-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $extra"
have="$(cat "$stamp" 2>/dev/null || true)"
if [ "$have" = "$want" ] || { [ "$extra" = plot ] && [ "${have% *}" = "${want% *}" ] \
    && [ "${have##* }" = test ]; }; then
  exit 0
fi
echo "setup: installing dask-metrics[$extra] and its dependencies into .venv" >&2
log=.venv/install.log
# pip's and setuptools' chatter (an editable install always warns) goes to the log; on a
# failure the log is shown.
if ! { .venv/bin/python -m pip install -q --upgrade pip \
       && .venv/bin/python -m pip install -q -e ".[$extra]"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "setup: pip install failed (log: $log)" >&2
  exit 1
fi
echo "$want" >"$stamp"
echo "setup: done; the commands are in .venv/bin (collector, dask-metrics-exporter, dask):" \
  "run 'source .venv/bin/activate' to use them by name" >&2
