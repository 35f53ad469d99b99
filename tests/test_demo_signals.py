"""The demo stopped by SIGTERM (``timeout``, ``kill``, a batch system) ends as Ctrl-C ends it:
one line, everything it started stopped, no traceback; while it works, with the collector's
exit status for a signal (128 + 15), and in --keep-running, where a signal is the expected
end, with 0."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import wait_for
from tests.prometheus_helpers import requires_prometheus
from tests.test_demo import ROOT, left_running

pytestmark = [pytest.mark.integration, requires_prometheus]


def sigterm_after(out: Path, line: str, *options: str) -> tuple[int, str]:
    """Run the demo (one simulated worker) into ``out``, send SIGTERM once it has printed a
    line containing ``line``; its exit status and everything it printed."""
    proc = subprocess.Popen([sys.executable, "-m", "dask_metrics.demo", "--simulate",
                             "--workers", "1", "--out", str(out), *options], cwd=ROOT,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for text in proc.stdout:
            lines.append(text)
            if line in text:
                proc.send_signal(signal.SIGTERM)
                break
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, "".join(lines) + rest


def test_sigterm_during_the_workload(tmp_path: Path):
    out = tmp_path / "out"
    code, printed = sigterm_after(out, "monitor.start(): session")
    assert code == 128 + signal.SIGTERM, printed
    assert "Traceback" not in printed, printed
    assert printed.rstrip().endswith(
        "demo: stopped by SIGTERM: everything started was stopped"), printed[-2000:]
    wait_for(lambda: not left_running(out), timeout=20, what="every process to stop")


def test_sigterm_ends_keep_running_as_ctrl_c_does(tmp_path: Path):
    """The reported case: the collector commands the demo ran had put their own SIGTERM
    handler in place, whose exception the wait did not expect."""
    out = tmp_path / "out"
    code, printed = sigterm_after(out, "Press Ctrl-C to stop", "--keep-running")
    assert code == 0, printed
    assert "Traceback" not in printed, printed
    assert "demo: stopping (SIGTERM)" in printed and printed.rstrip().splitlines()[-1] \
        .startswith("demo: done; everything started was stopped"), printed[-2000:]
    wait_for(lambda: not left_running(out), timeout=20, what="every process to stop")
