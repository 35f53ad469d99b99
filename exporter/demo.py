"""A first look: start a sidecar exporter on loopback, scrape it once, print the GPU series.

Real GPUs through NVML when this machine has them; otherwise simulated GPUs, said loudly.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from exporter.gpu_source import NvmlSource, SourceUnavailable


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nvml_available() -> bool:
    source = NvmlSource()
    try:
        source.start()
    except SourceUnavailable as exc:
        print(f"demo: no usable NVIDIA GPU here ({exc}); using 2 SIMULATED GPUs", file=sys.stderr)
        return False
    source.close()
    return True


def _get(url: str, deadline: float) -> str:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.read().decode()
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m exporter.demo", description=__doc__)
    parser.add_argument("--simulate", type=int, default=None, metavar="N",
                        help="force N simulated GPUs")
    args = parser.parse_args(argv)
    port = _free_port()
    cmd = [sys.executable, "-m", "exporter", "--listen", f"127.0.0.1:{port}",
           "--worker", "demo-worker"]
    if args.simulate or not _nvml_available():
        cmd += ["--simulate", str(args.simulate or 2)]
    proc = subprocess.Popen(cmd)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        print(f"demo: exporter up, health: {_get(base + '/healthz', deadline).strip()}")
        time.sleep(1.2)  # let the sampler integrate a few samples into the counters
        text = _get(base + "/metrics", deadline)
        lines = [ln for ln in text.splitlines() if ln.startswith("dask_gpu_")]
        print(f"demo: {len(lines)} GPU series from {base}/metrics:")
        print("\n".join(lines))
    finally:
        proc.terminate()
        proc.wait(10)
    return 0 if lines else 1


if __name__ == "__main__":
    sys.exit(main())
