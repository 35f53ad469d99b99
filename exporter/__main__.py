import sys

from dask_metrics.exporter.cli import main

sys.exit(main())
