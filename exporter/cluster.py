"""The ``dask_cluster`` label's value: which Dask cluster a series is from.

The scheduler preload decides it: the user's setting (``--dask-cluster``, the environment
variable ``DASK_METRICS_CLUSTER`` or the Dask config key ``dask-metrics.cluster``, the same
name in every part), else a default derived from where the scheduler runs. Workers ask the
scheduler for it (the ``dask_metrics_cluster`` handler) and write it into the worker-info
file, from which a sidecar takes it; a part that has its own setting keeps it and logs a
mismatch. These are the pure functions behind that; the parts do the asking.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from typing import Any

from dask_metrics.contract import CLUSTER_CONFIG, CLUSTER_ENV

# Kubernetes names the scheduler's pod after its Deployment (or, before dask-kubernetes
# 2023, the pod itself) "<cluster>-scheduler", a Deployment's pods
# "<cluster>-scheduler-<pod-template-hash>-<suffix>"; the pod's host name is its name, cut
# to 63 characters. dask-kubernetes' DaskCluster "<cluster>" (SCHEDULER_NAME_TEMPLATE
# "{cluster_name}-scheduler") and the Dask Helm chart ("{{ dask.fullname }}-scheduler":
# the release name when it contains "dask", else "<release>-dask") both name it so.
_K8S_SCHEDULER = re.compile(
    r"(?P<name>[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)-scheduler(?:-[a-z0-9]+){0,2}"
)
# The service a worker reaches the scheduler by, on the same two: "<cluster>-scheduler"
# (dask-kubernetes: "<cluster>-scheduler.<namespace>.svc.cluster.local").
_K8S_SERVICE = re.compile(r"(?P<name>[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)-scheduler(?:\..*)?")


def from_setting(value: Any) -> str | None:
    """A setting's value, or None for unset (None or blank)."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def configured(option: Any = None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The user's value: the option, else ``DASK_METRICS_CLUSTER``, else the Dask config key
    ``dask-metrics.cluster``; None when none is set."""
    found = from_setting(option) or from_setting(environ.get(CLUSTER_ENV))
    if found:
        return found
    import dask.config  # only here: the sidecar needs Dask for nothing else

    return from_setting(dask.config.get(CLUSTER_CONFIG, default=None))


def kubernetes_name(hostname: str) -> str | None:
    """The DaskCluster (dask-kubernetes) or Dask Helm chart name a scheduler pod's host name
    carries, or None when the host name is not a scheduler pod's."""
    match = _K8S_SCHEDULER.fullmatch(hostname.strip().lower())
    return match["name"] if match else None


def on_kubernetes(environ: Mapping[str, str] = os.environ) -> bool:
    """The kubelet sets KUBERNETES_SERVICE_HOST in every container of every pod."""
    return bool(environ.get("KUBERNETES_SERVICE_HOST"))


def _host_port(address: str) -> tuple[str, str]:
    """(host, port) of a Dask address; for an in-process address (``inproc://ip/pid/n``)
    the port is ``<pid>-<n>``, unique to the process's scheduler."""
    scheme, _, location = address.partition("://")
    if not location:
        scheme, location = "tcp", address
    if scheme == "inproc":
        host, _, rest = location.partition("/")
        return host, rest.replace("/", "-")
    host, _, port = location.rpartition(":")
    return host.strip("[]"), port


def scheduler_default(address: str, hostname: str | None = None,
                      environ: Mapping[str, str] = os.environ) -> str:
    """The default a scheduler derives: on Kubernetes the cluster name its pod's host name
    carries (see ``kubernetes_name``); elsewhere ``<host name>-<scheduler port>``, unique
    among the clusters running at one time (the port of an in-process scheduler is its
    ``<pid>-<n>``)."""
    hostname = hostname if hostname is not None else socket.gethostname()
    if on_kubernetes(environ):
        name = kubernetes_name(hostname)
        if name:
            return name
    _, port = _host_port(address)
    return f"{hostname}-{port}" if port else hostname


def worker_fallback(scheduler_address: str) -> str:
    """What a worker uses when its scheduler has no dask-metrics preload to ask: on
    Kubernetes the cluster name in the scheduler's service name, else
    ``<scheduler host>-<port>`` as the worker reaches it (all the workers of a cluster
    agree; no scheduler series carries a label to agree with)."""
    host, port = _host_port(scheduler_address)
    match = _K8S_SERVICE.fullmatch(host.lower())
    if match:
        return match["name"]
    return f"{host}-{port}" if port else host


def sidecar_start(option: Any, info_file: str | None, scheduler: str | None = None,
                  environ: Mapping[str, str] = os.environ) -> str | None:
    """The value a sidecar starts with: the user's (``configured``); else None, to be
    learned: with a worker-info file, from the ``cluster`` the worker preload writes into
    it once the scheduler has told it; else, with the scheduler's address (``scheduler``,
    else ``DASK_SCHEDULER_ADDRESS``, which dask-jobqueue and dask-kubernetes set), from the
    scheduler itself (``learn_cluster``); no series until then. With neither: the host
    name."""
    found = configured(option, environ)
    if found or info_file or scheduler or environ.get("DASK_SCHEDULER_ADDRESS"):
        return found
    return socket.gethostname()
