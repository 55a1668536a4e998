"""Encode throughput of every registered format on a synthetic change stream.

    python bench/encode_formats.py [--count 1000000] [--seed 0] [--tables 4] [--format F]

The stream comes from :func:`capture.teststream.generate` and is built once, before any
timing, so the numbers are the encoders' alone (``encoder.encode`` for every item plus
``flush``, as the daemon calls them). Rows/s counts row changes (wall clock, and per CPU
second of this process, which is steadier on a shared machine); MB/s the message values
produced. ``x ref`` is each format's CPU rows/s over a reference run in the same process:
every change's new (or old) row rendered as a JSON object of PostgreSQL texts with orjson,
the least any text format does, so the ratio is comparable across machines and loads. A
format whose module is missing or fails is reported, not fatal.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from bench.kit.figures import Recorder, add_json_option
from capture.events import ChangeEvent, StreamItem
from capture.formats import FORMAT_NAMES, encoder_for
from capture.synthetic import format_options, generate


def bench(name: str, items: list[StreamItem], changes: int) -> tuple[float, float, int, int]:
    """Wall and CPU seconds, messages and bytes to encode ``items`` with format ``name``."""
    encoder = encoder_for(name, format_options())
    encode = encoder.encode
    messages = 0
    size = 0
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        cpu = time.process_time()
        for item in items:
            for message in encode(item):
                messages += 1
                size += len(message.value or b"")  # a Debezium tombstone has none
        for message in encoder.flush():
            messages += 1
            size += len(message.value or b"")
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
    finally:
        gc.enable()
    assert changes > 0
    return elapsed, cpu, messages, size


def reference(items: list[StreamItem]) -> tuple[float, float]:
    """Wall and CPU seconds to render every change's row as a JSON object of texts."""
    dumps = orjson.dumps

    def texts(_value: object) -> None:
        """An unchanged TOAST value (not sent) renders as null."""

    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        cpu = time.process_time()
        for item in items:
            if type(item) is ChangeEvent:
                image = item.after if item.after is not None else item.before
                if image is not None:
                    dumps(image.as_dict(typed=False), default=texts)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
    finally:
        gc.enable()
    return elapsed, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="row changes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument(
        "--format", action="append", choices=FORMAT_NAMES, help="only these formats"
    )
    add_json_option(parser)
    args = parser.parse_args()
    recorder = Recorder("encode_formats", args)
    formats: dict[str, object] = {}

    start = time.perf_counter()
    items = list(generate(args.count, args.seed, args.tables))
    changes = sum(1 for item in items if isinstance(item, ChangeEvent))
    made = time.perf_counter() - start
    print(
        f"stream: {changes:,} changes in {len(items) - changes:,} begin/commit items over "
        f"{args.tables} tables, generated in {made:.1f}s ({changes / made:,.0f} rows/s)"
    )
    ref_wall, ref_cpu = reference(items)
    ref_rate = changes / ref_cpu
    print(
        f"reference (orjson of each row's texts): {changes / ref_wall:,.0f} rows/s, "
        f"{ref_rate:,.0f} rows/s CPU"
    )
    print(
        f"{'format':<10} {'rows/s':>10} {'µs/row':>7} {'rows/s CPU':>11} {'x ref':>6} "
        f"{'messages':>10} {'MB/s':>6}"
    )
    for name in args.format or FORMAT_NAMES:
        try:
            elapsed, cpu, messages, size = bench(name, items, changes)
        except ImportError as exc:
            print(f"{name:<10} not available ({exc})")
            formats[name] = {"error": f"not available: {exc}"}
            continue
        except Exception as exc:  # noqa: BLE001 - report the broken format, bench the others
            print(f"{name:<10} FAILED: {type(exc).__name__}: {exc}")
            formats[name] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        print(
            f"{name:<10} {changes / elapsed:>10,.0f} {elapsed / changes * 1e6:>7.2f} "
            f"{changes / cpu:>11,.0f} {changes / cpu / ref_rate:>6.2f} {messages:>10,} "
            f"{size / elapsed / 1e6:>6.1f}"
        )
        formats[name] = {
            "rows_per_s": changes / elapsed, "us_per_row": elapsed / changes * 1e6,
            "rows_per_cpu_s": changes / cpu, "x_reference": changes / cpu / ref_rate,
            "messages": messages, "mb_per_s": size / elapsed / 1e6,
        }  # fmt: skip
    recorder.write({
        "changes": changes,
        "reference": {"rows_per_s": changes / ref_wall, "rows_per_cpu_s": ref_rate},
        "formats": formats,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
