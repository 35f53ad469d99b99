"""``collector watch``'s bad input: a --poll that is not a sane number of seconds, an --out
that cannot take files, a missing --scheduler, and a scheduler that cannot be reached with
--once. Each is one ``collector: error:`` line and a non-zero exit, never a traceback, a
busy loop or a retry that cannot succeed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dask_metrics.collector.monitor.watch import MAX_POLL, MIN_POLL, WatchOptions
from dask_metrics.demo.localstack import free_port
from tests.helpers import clean_env, collector, collector_process


def nowhere() -> str:
    """A scheduler address where nothing listens."""
    return f"tcp://127.0.0.1:{free_port()}"


@pytest.mark.parametrize("poll", ["inf", "nan", "0", "-1", "1ms", "2h", "1e3", "soon"])
def test_a_bad_poll_is_a_usage_error(tmp_path: Path, poll: str):
    out = tmp_path / "archive"
    code, _, err = collector("watch", "--once", "--scheduler", nowhere(), "--connect-timeout",
                             "1", "--out", str(out), f"--poll={poll}")
    assert code == 2, err
    assert err.startswith(f"collector: error: --poll: '{poll}' ") and err.count("\n") == 1, err
    assert not out.exists()  # refused before anything was done


@pytest.mark.parametrize("poll", [0.0, -1.0, MIN_POLL / 2, math.nan, math.inf, MAX_POLL + 1])
def test_watch_options_refuse_a_poll_that_would_spin_or_overflow(tmp_path: Path, poll: float):
    with pytest.raises(ValueError, match="must be from"):
        WatchOptions(out=tmp_path, poll=poll)


@pytest.mark.parametrize("where, reason", [("afile", "File exists"),
                                           ("afile/sub", "Not a directory")])
def test_an_out_that_is_a_file_is_one_line(tmp_path: Path, where: str, reason: str):
    (tmp_path / "afile").write_text("not a folder\n")
    out = tmp_path / where
    code, _, err = collector("watch", "--once", "--scheduler", nowhere(), "--connect-timeout",
                             "1", "--out", str(out))
    assert (code, err) == (1, f"collector: error: cannot write the output: {out}: {reason}\n")


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs Linux' /sys")
def test_an_out_folder_that_takes_no_files_is_one_line():
    """/sys: a folder that exists and takes no new files, for root too (as a read-only
    mount): said at the start, not once per session that then fails."""
    code, _, err = collector("watch", "--once", "--scheduler", nowhere(), "--connect-timeout",
                             "1", "--out", "/sys")
    assert code == 1 and err.startswith("collector: error: cannot write the output: /sys: ")
    assert err.count("\n") == 1, err


@pytest.mark.integration
def test_once_with_the_scheduler_unreachable_is_one_error_line(tmp_path: Path):
    result = collector_process("watch", "--once", "--scheduler", nowhere(), "--connect-timeout",
                               "1", "--out", str(tmp_path / "archive"), timeout=60)
    assert result.returncode == 1, result.stderr
    # refused at once, or (on a loaded machine) not answered within the 1 s
    assert result.stderr.startswith(("collector: error: cannot reach the Dask scheduler at ",
                                     "collector: error: no Dask scheduler answered at ")), \
        result.stderr
    assert result.stderr.count("\n") == 1 and "retrying" not in result.stderr, result.stderr


@pytest.mark.integration
def test_without_a_scheduler_address_the_service_exits_at_once(tmp_path: Path):
    """No --scheduler and no DASK_SCHEDULER_ADDRESS: bad input, which no retry mends."""
    result = collector_process("watch", "--out", str(tmp_path / "archive"), env=clean_env(),
                               timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("collector: error: --scheduler ADDR is required")
    assert result.stderr.count("\n") == 1, result.stderr


@pytest.mark.parametrize("seconds", ["nan", "inf", "0", "-1"])
@pytest.mark.parametrize("command", [["watch", "--once"], ["monitor", "status"]])
def test_a_connect_timeout_that_is_no_wait_is_a_usage_error(tmp_path: Path, seconds: str,
                                                             command: list[str]):
    """It said 'did not answer as a Dask scheduler (KeyError)' instead."""
    out = ["--out", str(tmp_path / "archive")] if command[0] == "watch" else []
    code, _, err = collector(*command, "--scheduler", nowhere(), "--connect-timeout", seconds,
                             *out)
    assert code == 2, err
    assert err.startswith("collector: error: --connect-timeout ") and err.count("\n") == 1, err
