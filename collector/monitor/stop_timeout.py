"""A Monitor stop's timeout: whether a refused stop ran out of it, and the message that says
what the stop waited for. No scheduler here: ``Monitor`` asks it, and
these say what its answers mean to the user.
"""

from __future__ import annotations

from typing import Any

MAX_LISTED = 10  # unfinished DAGs a stop timeout names; the rest are counted


def timed_out(reply: dict[str, Any]) -> bool:
    """Whether a refused stop gave up waiting (the session still runs), rather than found
    no session to stop."""
    if "timed_out" in reply:
        return bool(reply["timed_out"])
    session = reply.get("session") or {}
    return "timed out" in str(reply.get("error", "")) and session.get("stop") is None


def describe_dag(dag: dict[str, Any]) -> str:
    """``job 1 'alice' DAG 0 (running, 2 result(s) pending, 1 task(s) processing)``."""
    details = [str(dag.get("status", "unfinished"))]
    if dag.get("pending") is not None:
        details.append(f"{dag['pending']} result(s) pending")
    if dag.get("processing") is not None:
        details.append(f"{dag['processing']} task(s) processing")
    return (f"job {dag.get('job_id')} {dag.get('job_name', '')!r} DAG {dag.get('dag_id')} "
            f"({', '.join(details)})")


def still_running(reply: dict[str, Any], timeout: float, dags: list[dict[str, Any]],
                  processing: dict[str, Any] | None) -> str:
    """The timeout message: what the stop waited for (``dags`` unfinished, ``processing``:
    the scheduler's tasks in flight per worker, None when it did not say)."""
    session = reply.get("session") or {}
    text = f"monitor session {session.get('id', '?')} not stopped after {timeout:g} s: "
    if dags:
        text += (f"{len(dags)} DAG(s) still running: "
                 + ", ".join(map(describe_dag, dags[:MAX_LISTED])))
        if len(dags) > MAX_LISTED:
            text += f" and {len(dags) - MAX_LISTED} more"
    else:
        text += "the DAGs it waited for have finished since"
    if processing is not None:
        busy = {w: len(keys) for w, keys in processing.items() if keys}
        tasks = sum(busy.values())
        text += f"; {tasks} task(s) processing"
        if busy:
            text += " on " + ", ".join(f"{w} ({n})" for w, n in sorted(busy.items()))
    return (text + ". The session keeps running: stop it again with a longer timeout "
            "(math.inf: no limit), or at once with stop(force=True) "
            "(collector monitor stop --force)")
