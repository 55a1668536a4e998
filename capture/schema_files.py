"""Where the machine-readable schemas (``schemas/``) are found, in a checkout or installed.

The files ship in the wheel as data files (``<prefix>/share/walcast/schemas``, see
pyproject.toml), so that an installed walcast, ``walcast consume`` and the Spark jobs on
a cluster's executors included, reads the same schemas as a checkout. Order:
``$WALCAST_SCHEMA_DIR``, the checkout's ``schemas/`` (also an editable install), then the
installed data files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Final

SCHEMA_DIRS: Final = (
    Path(__file__).resolve().parent.parent / "schemas",  # a checkout / editable install
    Path(sys.prefix) / "share" / "walcast" / "schemas",  # data files of a wheel
)


def schema_path(name: str) -> Path | None:
    """The first copy of ``schemas/<name>`` found (see the module docstring), or None."""
    override = os.environ.get("WALCAST_SCHEMA_DIR")
    dirs = [Path(override)] if override else []
    for directory in [*dirs, *SCHEMA_DIRS]:
        if (directory / name).is_file():
            return directory / name
    return None


def require_schema(name: str) -> Path:
    """:func:`schema_path`, or FileNotFoundError naming every place looked at."""
    path = schema_path(name)
    if path is None:
        places = ", ".join(str(d) for d in SCHEMA_DIRS)
        msg = f"schema {name!r} not found in $WALCAST_SCHEMA_DIR or {places}"
        raise FileNotFoundError(msg)
    return path
