"""Learning the ``dask_cluster`` name from the scheduler: its dask-metrics preload answers
the ``dask_metrics_cluster`` handler. The worker preload asks through its worker's
connection; a sidecar that knows the scheduler's address (``--scheduler`` or
``DASK_SCHEDULER_ADDRESS``, as dask-jobqueue and dask-kubernetes set it) asks through a
connection of its own, so that both end up with the scheduler's name, never a guess of
their own that differs from it."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from dask_metrics.contract import CLUSTER_ENV, CLUSTER_OPTION, DASK_CLUSTER, Handler
from dask_metrics.exporter import cluster as cluster_name

logger = logging.getLogger(__name__)

ASK_TIMEOUT = 5.0  # seconds one question may take (connect included)
MAX_DELAY = 5.0  # seconds between two questions to a scheduler not reachable yet
SIDECAR_PATIENCE = 60.0  # seconds a sidecar serves nothing while its scheduler is unreachable


async def scheduler_cluster(ask: Callable[[], Awaitable[Any]], address: str,
                            patience: float | None = None) -> str:
    """The scheduler's dask_cluster value, asked (``ask``) until it answers, or for
    ``patience`` seconds at most (None: until it answers); a scheduler without the
    dask-metrics preload answers nothing. Without an answer the value is derived from its
    address (``cluster.worker_fallback``), with a warning naming the setting that decides."""
    delay = 0.1
    loop = asyncio.get_running_loop()
    deadline = None if patience is None else loop.time() + patience
    said = None
    while deadline is None or loop.time() < deadline:
        try:
            said = await asyncio.wait_for(ask(), ASK_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as exc:  # not reachable yet: ask again
            logger.debug("dask-metrics: asking the scheduler for %s: %s", DASK_CLUSTER, exc)
        except Exception as exc:  # an old preload, or none: no such handler
            said = None
            logger.debug("dask-metrics: %s: %r", Handler.CLUSTER, exc)
            break
        else:
            break
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_DELAY)
    if isinstance(said, str) and said:
        return said
    fallback = cluster_name.worker_fallback(address)
    gave_up = deadline is not None and loop.time() >= deadline
    why = (f"did not answer within {patience:.0f} s" if gave_up
           else "does not name its cluster (no dask_metrics.scheduler preload?)")
    logger.warning("dask-metrics: the scheduler at %s %s: labelling these series %s=%r from "
                   "its address; give %s (or %s) to every part to choose it", address, why,
                   DASK_CLUSTER, fallback, CLUSTER_OPTION, CLUSTER_ENV)
    return fallback


def ask_over_rpc(address: str) -> Callable[[], Awaitable[Any]]:
    """A question to the scheduler at ``address`` over a connection of its own, with the
    TLS settings of Dask's configuration (``distributed.comm.tls``)."""
    from distributed.core import rpc
    from distributed.security import Security

    async def ask() -> Any:
        async with rpc(address, connection_args=Security().get_connection_args("client"),
                       timeout=ASK_TIMEOUT) as scheduler:
            return await getattr(scheduler, Handler.CLUSTER)()

    return ask


def learn_in_background(address: str, learned: Callable[[str], None]) -> threading.Thread:
    """Ask the scheduler at ``address`` in a thread of its own; ``learned(name)`` once it
    answers (or its fallback, where it has no preload). A daemon: a sidecar's exit never
    waits for a scheduler that does not answer."""
    def run() -> None:
        try:
            name = asyncio.run(scheduler_cluster(ask_over_rpc(address), address,
                                                 SIDECAR_PATIENCE))
        except Exception:  # never let a learning thread take the sidecar down
            logger.exception("dask-metrics: learning the cluster's name from %s failed", address)
            name = cluster_name.worker_fallback(address)
        learned(name)

    thread = threading.Thread(target=run, name="dask-metrics-cluster", daemon=True)
    thread.start()
    return thread
