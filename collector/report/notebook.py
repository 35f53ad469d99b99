"""What Jupyter shows (pure): a report's page inline, and a Monitor's state."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from dask_metrics.collector.model.timespec import format_rfc3339


def framed(page: str) -> str:
    """The report's page in a sandboxed frame (no script, no same origin: its styles stay its
    own and its Content Security Policy still holds)."""
    return (f'<iframe sandbox srcdoc="{html.escape(page, quote=True)}" title="dask-metrics '
            'session report" style="width:100%;height:820px;border:1px solid #d0d7de">'
            "</iframe>")


def _when(seconds: Any) -> str:
    return format_rfc3339(round(seconds * 1000)) if isinstance(seconds, int | float) else "-"


def monitor_html(address: str, owner: str, metrics: Sequence[str],
                 started: Mapping[str, Any] | None, status: Mapping[str, Any]) -> str:
    """A Monitor as a small table: its scheduler, the session there (running or the last
    one) and whether this Monitor started it, the job and DAG running, the columns the next
    start records; or why the scheduler could not say."""
    rows: list[tuple[str, str]] = [("scheduler", address), ("owner", owner)]
    if "error" in status:
        rows.append(("session", f"unknown: the scheduler did not answer ({status['error']})"))
    else:
        session = status.get("session") or {}
        if not session:
            state = "none yet: start() begins one"
        else:
            mine = bool(started) and started.get("id") == session.get("id") and \
                started.get("start") == session.get("start")
            state = (f"{session.get('id')} {'running' if status.get('running') else 'stopped'}"
                     f" since {_when(session.get('start'))}"
                     + ("" if status.get("running") else f", stopped {_when(session.get('stop'))}")
                     + (" (started by this Monitor)" if mine else
                        f" (owner {session.get('owner') or 'unknown'})"))
        rows += [("cluster", str(status.get("dask_cluster") or "-")), ("session", state),
                 ("running now", f"job {status.get('current_job')}, DAG "
                  f"{status.get('current_dag')}, {status.get('unfinished_dags')} DAG(s) "
                  "unfinished" if status.get("current_job") is not None else "no job")]
    rows.append(("next start records", ", ".join(metrics)))
    body = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
                   f"<td style='text-align:left'>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table><caption>dask-metrics Monitor</caption>{body}</table>"
