"""``python -m dask_metrics.collector``: the same as the ``collector`` command."""

import sys

from dask_metrics.collector.cli import main

sys.exit(main())
