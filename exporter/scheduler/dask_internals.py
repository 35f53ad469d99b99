"""Every use of Dask internals by the scheduler preload, in one module.

The SchedulerPlugin hooks, ``Scheduler.add_plugin``/``remove_plugin``/``plugins`` and the
task states a transition names are Dask's public plugin API, used elsewhere. Everything
here is not: scheduler attributes, message formats and objects that Dask may change in any
release. Each is checked against the source of distributed 2024.1.0 (the floor in
pyproject.toml) and 2026.8.0; ``scripts/test-dask-oldest.sh`` runs the Dask-facing tests
on the floor, the usual test run on the newest.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any, NamedTuple

from distributed.protocol.serialize import ToPickle

# Client.id is f"{type(self).__name__}-{name}-{uuid1}", or without "-{name}" when the client
# has no name (Client.__init__; 2024.1.0, 2026.8.0).
_CLIENT_ID = re.compile(
    r"[^-]+(?:-(?P<name>.+))?-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
)


def client_name(client_id: str) -> str:
    """The name a client was given (``Client(name=...)``, config ``client-name``), else its id."""
    match = _CLIENT_ID.fullmatch(client_id)
    return match["name"] if match and match["name"] else client_id


# -- scheduler handlers ------------------------------------------------------------------------


def add_handlers(scheduler: Any, handlers: Mapping[str, Callable[..., Any]]) -> Callable[[], None]:
    """Serve ``handlers`` as ``client.scheduler.<name>(...)`` calls; returns the undo.

    Server.handlers is the name -> callable dict the scheduler's RPC dispatches on
    (distributed.core.Server; 2024.1.0, 2026.8.0)."""
    scheduler.handlers.update(handlers)

    def undo() -> None:
        for name, handler in handlers.items():
            if scheduler.handlers.get(name) == handler:
                del scheduler.handlers[name]

    return undo


def scheduler_address(scheduler: Any) -> str:
    """The address workers and clients reach the scheduler on (``Server.address``, known
    once it listens, which it does before preloads start: Scheduler.start_unsafe;
    2024.1.0, 2026.8.0); "" when it does not listen yet."""
    try:
        return str(scheduler.address)
    except ValueError:
        return ""


# -- the graph submission being handled -----------------------------------------------------------

#: (submitting task, client-side annotations) of the graph submission being handled
_SUBMISSION: ContextVar[tuple[Any, Any]] = ContextVar(
    "dask_metrics_submission", default=(None, None)
)


def tap_update_graph(scheduler: Any) -> Callable[[], None]:
    """Let the update_graph hook see the client's message; returns the undo.

    Dask tells plugins which client submitted a graph, but neither which task (for graphs
    submitted from inside tasks) nor the span the client submitted it in (Dask moves tasks
    into the span of an older TaskGroup with the same name). Both are in the client's
    message: hand them to the update_graph hook, which Dask calls within this coroutine,
    through a context variable.

    Server.stream_handlers["update-graph"] is the coroutine Scheduler.update_graph, called
    with the message's fields as keywords, which calls the plugins' update_graph before it
    returns; the message has "submitting_task" (a key or None) and "annotations" (the
    client's dask.get_annotations()) (Client._graph_to_futures; 2024.1.0, 2026.8.0)."""
    handlers = scheduler.stream_handlers
    original = handlers.get("update-graph")
    if original is None:
        return lambda: None

    async def update_graph(**msg: Any) -> Any:
        token = _SUBMISSION.set((msg.get("submitting_task"), msg.get("annotations")))
        try:
            return await original(**msg)
        finally:
            _SUBMISSION.reset(token)

    handlers["update-graph"] = update_graph

    def undo() -> None:
        if handlers.get("update-graph") is update_graph:
            handlers["update-graph"] = original

    return undo


def submitting_task() -> Any:
    """The key of the task that submitted the graph being handled; None from a client."""
    return _SUBMISSION.get()[0]


def submitted_span() -> tuple[str, str] | None:
    """(id, name) of the top-level span the client submitted the graph being handled in
    (``with span(...)``).

    The client sends its annotations as ToPickle: over in-process (inproc) comms that object
    itself arrives on 2024.1.0 (Scheduler.update_graph unwraps it too), a dict on 2026.8.0.
    distributed.span annotates {"span": {"name": (...), "ids": (...)}},
    outermost first (2024.1.0, 2026.8.0)."""
    annotations = _SUBMISSION.get()[1]
    if isinstance(annotations, ToPickle):
        annotations = annotations.data
    span = annotations.get("span") if isinstance(annotations, dict) else None
    if not span or not span.get("ids") or not span.get("name"):
        return None
    return str(span["ids"][0]), str(span["name"][0])


# -- scheduler state ------------------------------------------------------------------------------


def top_level_span(scheduler: Any, keys: Iterable[Any]) -> tuple[str, str] | None:
    """(id, name) of the top-level span Dask put most of ``keys`` in (a collection built in
    a span, or the default span); None without the spans extension.

    Scheduler.extensions["spans"] is the SpansSchedulerExtension; its .spans maps span id
    to Span (.id, .name: tuple, outermost first, .parent); a task's span is
    TaskState.group.span_id (distributed.spans, distributed.scheduler; 2024.1.0, 2026.8.0)."""
    spans = scheduler.extensions.get("spans")
    if spans is None:
        return None
    known = scheduler.tasks
    votes = Counter(ts.group.span_id for key in keys if (ts := known.get(key)) is not None)
    votes.pop(None, None)
    if not votes:
        return None
    span = spans.spans.get(votes.most_common(1)[0][0])
    if span is None:
        return None
    while span.parent is not None:
        span = span.parent
    return span.id, span.name[0]


# Scheduler.tasks maps key -> TaskState (.state; .processing_on: WorkerState or None);
# Scheduler.workers maps address -> WorkerState (.name, .address, .extra: what the worker's
# startup_information returned, by key) (distributed.scheduler; 2024.1.0, 2026.8.0).


def task_states(scheduler: Any) -> Callable[[Any], str | None]:
    """The scheduler's state of a key, None for a key it does not know."""
    known = scheduler.tasks

    def state_of(key: Any) -> str | None:
        ts = known.get(key)
        return None if ts is None else ts.state

    return state_of


def processing_worker(scheduler: Any, key: Any) -> str | None:
    """Address of the worker a task is processing on, None if it is not processing."""
    ts = scheduler.tasks.get(key)
    ws = ts.processing_on if ts is not None else None
    return ws.address if ws is not None else None


def worker_addresses(scheduler: Any) -> list[str]:
    """Addresses of the workers the scheduler has now."""
    return list(scheduler.workers)


def worker_info(scheduler: Any, address: str, startup_key: str) -> tuple[Any, str, Any]:
    """(name, address, what it published under ``startup_key``, else None) of a worker."""
    ws = scheduler.workers[address]
    return ws.name, ws.address, ws.extra.get(startup_key)


def publish(scheduler: Any, address: str, startup_key: str, value: Any) -> bool:
    """Store ``value`` as what worker ``address`` published under ``startup_key`` (where
    its ``startup_information`` lands: ``WorkerState.extra``; 2024.1.0, 2026.8.0); False
    for a worker the scheduler does not know."""
    ws = scheduler.workers.get(address)
    if ws is None:
        return False
    ws.extra[startup_key] = value
    return True


# -- work stealing ----------------------------------------------------------------------------


def stolen(topic: str, msg: Any) -> tuple[Any, str] | None:
    """(key, thief address) when a log event confirms a steal, which moves a task to another
    worker without a transition.

    WorkStealing logs to topic "stealing"; a confirmed steal is ("confirm", key, state,
    victim, thief, stimulus_id) (distributed.stealing.WorkStealing.move_task_confirm;
    2024.1.0, 2026.8.0)."""
    if topic != "stealing" or msg[0] != "confirm":
        return None
    return msg[1], msg[4]


# -- fine performance metrics and worker resources -----------------------------------------

#: Contexts of Scheduler.cumulative_worker_metrics that are not exported cluster-wide:
#: "execute" is exported per job from the spans, "p2p" repeats time already in "execute"
#: (distributed.shuffle._core logs both; 2024.1.0, 2026.8.0).
_PER_TASK_CONTEXTS = frozenset({"execute", "p2p"})


def tap_span_heartbeats(
    scheduler: Any, sink: Callable[[Mapping[Any, float]], None]
) -> Callable[[], None] | None:
    """Hand ``sink`` what every worker heartbeat adds to the spans' metrics; returns the
    undo, or None when this Dask has no spans extension to tap.

    Scheduler.heartbeat_worker calls extensions[name].heartbeat(ws, data) for the data each
    worker extension sent; the spans extension's data is {("execute"|"p2p", span_id, prefix
    or where, activity, unit): value added since the last heartbeat}, which it adds to
    Span._cumulative_worker_metrics (distributed.spans.SpansSchedulerExtension.heartbeat;
    2024.1.0, 2026.8.0). The sink sees the data after Dask took it, and only if Dask did."""
    spans = scheduler.extensions.get("spans")
    original = getattr(spans, "heartbeat", None)
    if original is None:
        return None

    def heartbeat(ws: Any, data: dict[Any, float]) -> None:
        original(ws, data)
        sink(data)

    spans.heartbeat = heartbeat  # the instance attribute shadows the method

    def undo() -> None:
        if spans.__dict__.get("heartbeat") is heartbeat:
            del spans.heartbeat

    return undo


def span_prefixes(scheduler: Any, keys: Iterable[Any]) -> Counter[tuple[Any, str]]:
    """(span id, task prefix) -> how many of ``keys`` are in that span with that prefix.

    TaskState.group.span_id is set when the spans extension observes the tasks, before the
    plugins' update_graph; TaskState.prefix.name is key_split(key), the prefix workers
    report metrics under (distributed.scheduler, distributed.spans; 2024.1.0, 2026.8.0)."""
    known = scheduler.tasks
    out: Counter[tuple[Any, str]] = Counter()
    for key in keys:
        ts = known.get(key)
        if ts is not None and ts.group.span_id is not None:
            out[ts.group.span_id, ts.prefix.name] += 1
    return out


def _copied(read: Callable[[], Any]) -> Any:
    """``read()`` again when a scrape from another thread saw a dict change size."""
    for _ in range(100):
        try:
            return read()
        except RuntimeError:
            continue
    raise RuntimeError("the scheduler's state kept changing during 100 reads")


def cluster_metrics(scheduler: Any) -> list[tuple[str, tuple[Any, ...], Any, float]]:
    """(context, activity parts, unit, value) of the fine performance metrics outside task
    execution (gather-dep, get-data, memory-monitor, and any later context).

    Scheduler.cumulative_worker_metrics sums every heartbeat's digests: tuple keys
    (context, *activity, unit), execute and p2p without their span id; other keys are not
    fine performance metrics (distributed.scheduler.heartbeat_worker; 2024.1.0, 2026.8.0)."""
    items = _copied(lambda: list(scheduler.cumulative_worker_metrics.items()))
    return [
        (str(key[0]), key[1:-1], key[-1], value)
        for key, value in items
        if isinstance(key, tuple) and len(key) >= 3 and key[0] not in _PER_TASK_CONTEXTS
    ]


class WorkerResources(NamedTuple):
    """One worker's resources as the scheduler knows them from its heartbeats."""

    name: Any
    address: str
    memory: int  # process memory (RSS)
    managed: int  # managed memory in RAM
    spilled: int  # managed memory on disk
    memory_limit: int
    cpu: float  # cores (heartbeat's cpu percent / 100)
    threads: int
    executing: int
    processing: int
    occupancy: float
    stored: int  # bytes of results the scheduler knows it holds
    rmm_used: int | None = None  # heartbeat's "rmm-used": None without rmm
    rmm_pool: int | None = None  # heartbeat's "rmm-total": max(pool size, used)


def worker_resources(scheduler: Any) -> list[WorkerResources]:
    """Every worker's resources, from what the last heartbeat and the scheduler hold.

    WorkerState.memory is a MemoryState (.process, .managed: in RAM, .spilled: on disk),
    .memory_limit, .nthreads, .processing (set), .occupancy, .nbytes; .metrics is the last
    heartbeat's metrics: "cpu" (percent of one core), "task_counts" (worker task state
    -> count, "executing" among them) and, where the worker imports rmm, "rmm":
    {"rmm-used", "rmm-total"} (None values when it cannot) (distributed.scheduler,
    Worker.get_metrics, distributed.diagnostics.rmm.real_time; 2024.1.0, 2026.8.0)."""
    out = []
    for ws in _copied(lambda: list(scheduler.workers.values())):
        mem = ws.memory
        metrics = ws.metrics or {}
        counts = metrics.get("task_counts") or {}
        rmm = metrics.get("rmm") if isinstance(metrics.get("rmm"), dict) else {}
        out.append(WorkerResources(
            ws.name, ws.address, mem.process, mem.managed, mem.spilled, ws.memory_limit or 0,
            float(metrics.get("cpu") or 0.0) / 100.0, ws.nthreads,
            int(counts.get("executing", 0)), len(ws.processing), float(ws.occupancy),
            ws.nbytes, _bytes(rmm.get("rmm-used")), _bytes(rmm.get("rmm-total")),
        ))
    return out


def _bytes(value: Any) -> int | None:
    """A heartbeat's byte count, or None when absent or not a number."""
    return int(value) if isinstance(value, int | float) and value >= 0 else None


def executing_tasks(scheduler: Any) -> list[tuple[Any, str, list[tuple[Any, str]]]]:
    """(name, address, [(key, prefix)...]) per worker: the tasks executing on it.

    WorkerState.executing maps TaskState -> duration for the tasks the worker reported
    executing in its last heartbeat (its active_keys: really running, not merely ready);
    a task that finished since is no longer processing on that worker and is left out
    (Scheduler.heartbeat_worker, Worker.heartbeat; 2024.1.0, 2026.8.0)."""
    out = []
    for ws in _copied(lambda: list(scheduler.workers.values())):
        running = _copied(lambda ws=ws: list(ws.executing))
        out.append((ws.name, ws.address, [
            (ts.key, ts.prefix.name) for ts in running if ts.processing_on is ws]))
    return out
