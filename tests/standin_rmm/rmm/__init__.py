"""A stand-in for RAPIDS' ``rmm`` with the surface Dask's heartbeats read
(``distributed.diagnostics.rmm``): put ``tests/standin_rmm`` on a worker's PYTHONPATH and
script its pool in the JSON file named by $STANDIN_RMM_STATE:
``{"pool": bytes, "used": bytes, "tracked": true}`` (read at every heartbeat)."""

from rmm import mr

__all__ = ["mr"]
__version__ = "0.0-standin"
