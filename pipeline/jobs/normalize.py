"""``spark-submit pipeline/jobs/normalize.py --bootstrap-servers … --topic … --format …``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file by spark-submit: make `pipeline` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pipeline.cli import add_normalize_arguments, normalize_job


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run the job in the active (spark-submit) session."""
    from pyspark.sql import SparkSession  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="normalize.py", description=__doc__)
    add_normalize_arguments(parser)
    args = parser.parse_args(argv)
    spark = SparkSession.builder.appName("walcast-normalize").getOrCreate()
    for item in args.conf:
        key, _, value = item.partition("=")
        spark.conf.set(key, value)
    normalize_job(args).run(spark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
