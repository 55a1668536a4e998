"""Synthetic, deterministic change streams, with no server.

:mod:`capture.synthetic.shop` models a small shop (tables, rows, realistic transactions);
:mod:`capture.synthetic.generator` hands its stream to the pump and drives the clock encoders
read, so that output is byte-for-byte reproducible. ``walcast produce-test-stream``
(:mod:`capture.teststream`) is the command on top.
"""

from capture.synthetic.generator import (
    SyntheticClock,
    SyntheticSource,
    advance_clock,
    format_options,
)
from capture.synthetic.shop import generate
from capture.synthetic.tables import build_tables, table_specs

__all__ = [
    "SyntheticClock",
    "SyntheticSource",
    "advance_clock",
    "build_tables",
    "format_options",
    "generate",
    "table_specs",
]
