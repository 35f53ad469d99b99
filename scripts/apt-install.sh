#!/usr/bin/env bash
# Install Debian packages with apt-get, as root or through sudo, quietly; the setup scripts'
# one way to do it. Usage: apt-install.sh WHO PACKAGE... (WHO names the caller in messages).
# Without root or sudo it says what to install and fails.
set -euo pipefail
who="$1"
shift
[ $# -gt 0 ] || exit 0
if [ "$(id -u)" = 0 ]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
  echo "$who: please install: $* (apt-get install -y --no-install-recommends $*)," \
    "or run this as root or with sudo" >&2
  exit 1
fi
echo "$who: installing $* with apt-get" >&2
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
  "$@" >/dev/null
