"""What to sample: the worker's name, its GPUs and its pids, and the cluster's name (the
``dask_cluster`` label), from options, the environment or a worker-info file that the
worker preload keeps up to date (a sidecar's case)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, replace

from dask_metrics.exporter.identity import WorkerIdentity, read_info_file
from dask_metrics.exporter.selection import owned

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    worker: str
    gpus: str | None  # a selection spec (see dask_metrics.exporter.selection); None = every GPU
    pids: frozenset[int] = frozenset()
    hostname: str = ""
    cluster: str | None = None  # the dask_cluster label; None: not known yet, serve nothing


class TargetSource:
    """Resolves the target each sampling round; cheap unless the worker-info file changed.

    Precedence, per field: explicit options, then the environment (the first device of
    ``CUDA_VISIBLE_DEVICES``, ``DASK_WORKER_NAME``), then the worker-info file, then defaults
    (all GPUs, host name); ``gpus="all"`` takes every device ``CUDA_VISIBLE_DEVICES`` lists.
    ``file_gpus=False`` takes only the worker's name and pid from the file, not its GPUs: a
    sidecar simulating GPUs serves its own, whatever the worker found (none, on a machine
    without a GPU).
    """

    def __init__(
        self,
        worker: str | None = None,
        gpus: str | None = None,
        pids: frozenset[int] = frozenset(),
        info_file: str | None = None,
        environ: Mapping[str, str] = os.environ,
        file_gpus: bool = True,
        cluster: str | None = None,
    ) -> None:
        # os.environ holds undecodable bytes as surrogates, which no scrape could encode
        self._worker = worker or _decodable(environ.get("DASK_WORKER_NAME")) or None
        self._gpus = owned(gpus, environ.get("CUDA_VISIBLE_DEVICES"))
        self._pids = pids
        self._info_file = info_file
        self._file_gpus = file_gpus
        self._cluster = cluster
        self._identity: WorkerIdentity | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._current = self._merge(None)

    def __call__(self) -> Target:
        if self._info_file is None:
            return self._current
        try:
            st = os.stat(self._info_file)
        except OSError:
            return self._current  # not written yet, or the worker's volume is gone
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                identity = read_info_file(self._info_file)
            except (OSError, ValueError) as exc:
                logger.warning("ignoring worker-info file: %s", exc)
                return self._current
            self._current = self._merge(identity)
            logger.info("worker-info file: worker %r, pid %s, %d GPU(s)%s, dask_cluster %s",
                        identity.label, identity.pid, len(identity.gpus),
                        "" if self._file_gpus else " (not used: the GPUs are simulated)",
                        repr(identity.cluster) if identity.cluster else "not known yet")
            if self._cluster and identity.cluster and identity.cluster != self._cluster:
                logger.warning("dask_cluster is set to %r here, the worker uses %r: this "
                               "exporter's series will not match the worker's cluster",
                               self._cluster, identity.cluster)
        return self._current

    def set_cluster(self, cluster: str) -> None:
        """Name the cluster once it is known (the worker preload, told by the scheduler)."""
        self._cluster = cluster
        self._current = self._merge(self._identity)

    def _merge(self, identity: WorkerIdentity | None) -> Target:
        self._identity = identity
        target = Target(
            worker=self._worker or socket.gethostname(),
            gpus=self._gpus,
            pids=self._pids,
            hostname=socket.gethostname(),
            cluster=self._cluster,
        )
        if identity is None:
            if self._info_file is not None and self._gpus is None:
                return replace(target, gpus="")  # no GPU is the worker's until the file says
            return target
        return replace(
            target,
            worker=self._worker or identity.label,
            gpus=self._gpus if self._gpus is not None or not self._file_gpus
            else ",".join(g.uuid for g in identity.gpus),
            pids=self._pids | {identity.pid},
            hostname=identity.host or target.hostname,
            cluster=self._cluster or identity.cluster or None,
        )


def _decodable(text: str | None) -> str | None:
    """``text`` with bytes that are not UTF-8 (surrogates, as os.environ keeps them) as U+FFFD."""
    if text is None:
        return None
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
