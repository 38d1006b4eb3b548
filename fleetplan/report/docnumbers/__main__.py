"""``python -m fleetplan.report.docnumbers [--check]``: see the package's docstring."""

import sys

from fleetplan.report.docnumbers import main

sys.exit(main())
