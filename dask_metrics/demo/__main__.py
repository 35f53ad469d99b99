"""``python -m dask_metrics.demo``: the main job end to end on this machine."""

import sys

from dask_metrics.demo.cli import main

sys.exit(main())
