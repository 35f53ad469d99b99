"""``python -m collector``: the same as the ``collector`` command."""

import sys

from collector.cli import main

sys.exit(main())
