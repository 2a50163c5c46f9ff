"""``python -m clusters.simulator serve MODEL …`` is ``python -m clusters.simulator.engine …``."""

import sys

from clusters.simulator.engine import main

sys.exit(main())
