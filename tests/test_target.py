"""Who the sidecar samples for: options, environment, then the worker-info file."""

from dask_metrics.exporter.identity import GpuRef, WorkerIdentity, read_info_file, write_info_file
from dask_metrics.exporter.target import TargetSource

IDENTITY = WorkerIdentity("w-7", "tcp://10.0.0.7:4000", 4242, "node-7",
                          (GpuRef(0, "GPU-b"), GpuRef(1, "GPU-a")))


def test_environment_then_defaults():
    t = TargetSource(environ={"DASK_WORKER_NAME": "env-name", "CUDA_VISIBLE_DEVICES": "1,0"})()
    assert (t.worker, t.gpus) == ("env-name", "1,0")
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
