"""Who the sidecar samples for: options, environment, then the worker-info file."""

import os

import pytest

from dask_metrics.exporter.identity import GpuRef, WorkerIdentity, read_info_file, write_info_file
from dask_metrics.exporter.target import TargetSource

IDENTITY = WorkerIdentity("w-7", "tcp://10.0.0.7:4000", 4242, "node-7",
                          (GpuRef(0, "GPU-b"), GpuRef(1, "GPU-a")))


def test_environment_then_defaults():
    t = TargetSource(environ={"DASK_WORKER_NAME": "env-name", "CUDA_VISIBLE_DEVICES": "1,0"})()
    assert (t.worker, t.gpus) == ("env-name", "1")  # dask-cuda's rotation: its own first
    t = TargetSource(gpus="all", environ={"CUDA_VISIBLE_DEVICES": "1,0"})()
    assert t.gpus == "1,0"
    assert TargetSource(gpus="ALL", environ={})().gpus is None  # every GPU
    t = TargetSource(environ={})()
    assert t.gpus is None and t.worker  # all GPUs, host name


def test_info_file_appears_later_and_changes(tmp_path):
    path = tmp_path / "worker.json"
    source = TargetSource(info_file=str(path), environ={})
    assert source().gpus == ""  # none of the GPUs is known to be the worker's yet
    write_info_file(path, IDENTITY)
    t = source()
    assert (t.worker, t.gpus, t.pids, t.hostname) == ("w-7", "GPU-b,GPU-a", {4242}, "node-7")
    restarted = WorkerIdentity("w-7", "tcp://10.0.0.7:4001", 5151, "node-7", IDENTITY.gpus)
    write_info_file(path, restarted)
    assert source().pids == {5151}


def test_options_win_over_the_file(tmp_path):
    path = tmp_path / "worker.json"
    write_info_file(path, IDENTITY)
    t = TargetSource(worker="cli", gpus="0", pids=frozenset({1}), info_file=str(path),
                     environ={"DASK_WORKER_NAME": "env"})()
    assert (t.worker, t.gpus, t.pids) == ("cli", "0", {1, 4242})


def test_broken_file_keeps_the_last_good_target(tmp_path):
    path = tmp_path / "worker.json"
    write_info_file(path, IDENTITY)
    source = TargetSource(info_file=str(path), environ={})
    assert source().worker == "w-7"
    path.write_text("{not json")
    assert source().worker == "w-7"


def test_identity_round_trip(tmp_path):
    path = tmp_path / "i.json"
    write_info_file(path, IDENTITY)
    assert read_info_file(path) == IDENTITY
    assert IDENTITY.label == "w-7"
    assert WorkerIdentity("", "tcp://x:1", 1, "h").label == "tcp://x:1"


def test_a_worker_name_that_is_not_utf8_never_reaches_a_label(tmp_path):
    """A lone surrogate (a non-UTF-8 byte in the environment, or "\\udcff" in the file's
    JSON) made every scrape fail to encode: HTTP 500 for good."""
    t = TargetSource(environ={"DASK_WORKER_NAME": "w\udcff"})()
    assert t.worker == "w\ufffd" and t.worker.encode("utf-8")
    path = tmp_path / "worker.json"
    write_info_file(path, IDENTITY)
    source = TargetSource(info_file=str(path), environ={})
    assert source().worker == "w-7"
    path.write_text('{"name": "w\\udcff", "address": "tcp://a:1", "pid": 1}')
    assert source().worker == "w-7"  # ignored, as any malformed file


@pytest.mark.parametrize("text", ['{"name": "w", "address": "a", "pid": Infinity}',
                                  '{"address": "a", "pid": 1, "gpus": [{"index": 1e309, '
                                  '"uuid": "x"}]}', "[" * 100_000, "\xff\xfe"])
def test_files_that_broke_the_parser_are_malformed_not_a_traceback(tmp_path, text):
    path = tmp_path / "worker.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError):
        read_info_file(path)


def test_a_fifo_or_a_huge_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        read_info_file(fifo)  # blocked for good before: no writer ever comes
    big = tmp_path / "big.json"
    big.write_text(" " * (2 << 20))
    with pytest.raises(ValueError, match="larger than"):
        read_info_file(big)
