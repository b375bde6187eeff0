"""`python -m kerasjob [run|status] ...`: the operator (out of cluster or in a Pod)."""

import sys

from kerasjob.cli.app import main

sys.exit(main())
