"""``python -m dask_metrics.collector``: the same as the ``collector`` command."""

import sys

from dask_metrics.collector.cli.main import main

if __name__ == "__main__":  # a process of the report's pool imports this module too
    sys.exit(main())
