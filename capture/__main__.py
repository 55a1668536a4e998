"""``python -m capture`` runs the walcast CLI."""

import sys

from capture.cli import main

sys.exit(main())
