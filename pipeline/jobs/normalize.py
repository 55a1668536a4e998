"""``spark-submit pipeline/jobs/normalize.py --bootstrap-servers … --topic … --format …``."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file by spark-submit: make `pipeline` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pipeline.cli import add_normalize_arguments, normalize_job, run_submitted


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run the job in the active (spark-submit) session."""
    return run_submitted("normalize", __doc__, add_normalize_arguments, normalize_job, argv)


if __name__ == "__main__":
    sys.exit(main())
