#!/usr/bin/env bash
# What the containers test tier (pytest -m containers, tests/test_containers.py) needs on a
# Debian/Ubuntu machine: podman with runc and netavark, debootstrap for the base image, and
# podman-compose (PyPI, into ./.venv: Debian's 1.0.3 ignores profiles). Run after setup.sh.
# Quiet and quick when everything is there. Your containers.conf is not touched: the tests
# pass docker/local/containers.conf as CONTAINERS_CONF (runc, no default ulimits, no systemd)
# unless CONTAINERS_CONF is set.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for cmd in podman:podman runc:runc debootstrap:debootstrap netavark:netavark \
           aardvark-dns:aardvark-dns catatonit:catatonit iptables:iptables; do
  name="${cmd%%:*}" package="${cmd#*:}"
  case "$name" in
    netavark|aardvark-dns) [ -x "/usr/lib/podman/$name" ] || need+=("$package") ;;
    catatonit) [ -x /usr/bin/catatonit ] || [ -x /usr/libexec/podman/catatonit ] \
                 || need+=("$package") ;;
    *) command -v "$name" >/dev/null || need+=("$package") ;;
  esac
done
if [ "$(id -u)" != 0 ]; then  # rootless podman: user namespaces and their id maps
  command -v newuidmap >/dev/null || need+=(uidmap)
  command -v slirp4netns >/dev/null || need+=(slirp4netns)
  command -v fuse-overlayfs >/dev/null || need+=(fuse-overlayfs)
fi
bash scripts/apt-install.sh setup-containers "${need[@]}"

if [ ! -x .venv/bin/python ]; then
  echo "setup-containers: no ./.venv: run scripts/setup.sh first" >&2
  exit 1
fi
if [ ! -x .venv/bin/podman-compose ]; then  # pip's chatter to the log, shown on a failure
  if ! .venv/bin/python -m pip install -q "podman-compose>=1.6,<2" >>.venv/install.log 2>&1
  then
    cat .venv/install.log >&2
    echo "setup-containers: pip install podman-compose failed" >&2
    exit 1
  fi
fi

if [ "$(id -u)" != 0 ] && ! grep -q "^$(id -un):" /etc/subuid 2>/dev/null; then
  echo "setup-containers: rootless podman needs a range for $(id -un) in /etc/subuid and" \
    "/etc/subgid (usermod --add-subuids 100000-165535 --add-subgids 100000-165535" \
    "$(id -un), as root)" >&2
  exit 1
fi
CONTAINERS_CONF="${CONTAINERS_CONF:-docker/local/containers.conf}" podman info >/dev/null
