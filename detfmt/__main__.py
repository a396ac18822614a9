"""``python -m detfmt`` runs the detfmt command."""

import sys

from detfmt.cli import main

sys.exit(main())
