"""Fuzz the whole capture pipeline with 1M+ mutated messages of recorded real traffic.

The fuzz test's harness (bench/kit/fuzz.py: decoder, relation cache, transaction
assembler, every output format on the Kafka and the tail path, the key-update split, layout
records), run for longer: ``--messages`` mutated messages (default 1,000,000) from
``--seed``. Prints progress, the walcast errors raised, messages per second, and every
finding (an exception that is not a walcast error) with the mutation that caused it; exits
1 if there was one.

Usage: flock /tmp/walcast-heavy.lock python bench/fuzz_pipeline.py [--messages 1000000]
           [--seed N] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kit.figures import Recorder, add_json_option
from bench.kit.fuzz import Stats, fuzz, load_sessions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    add_json_option(parser)
    args = parser.parse_args(argv)
    recorder = Recorder("fuzz_pipeline", args)
    sessions = load_sessions()
    started = time.monotonic()

    def progress(stats: Stats) -> None:
        elapsed = time.monotonic() - started
        print(
            f"{elapsed:7.0f} s  {stats.mutated_messages:>10,} mutated  "
            f"{stats.mutated_messages / elapsed:8,.0f}/s  findings {len(stats.findings)}",
            file=sys.stderr,
            flush=True,
        )

    stats = fuzz(sessions, seed=args.seed, mutated_messages=args.messages, progress=progress)
    elapsed = time.monotonic() - started
    print(f"seed {args.seed}: {stats.summary()}")
    print(
        f"{elapsed:.0f} s, {stats.mutated_messages / elapsed:,.0f} mutated messages/s, "
        f"{stats.fed_messages / elapsed:,.0f} messages fed/s"
    )
    seen: set[tuple[str, str]] = set()
    for finding in stats.findings:
        key = (finding.stage, finding.error[:80])
        if key not in seen:
            seen.add(key)
            print(finding)
    recorder.write({
        "seed": args.seed, "seconds": elapsed, "episodes": stats.episodes,
        "mutated_messages": stats.mutated_messages, "fed_messages": stats.fed_messages,
        "mutated_per_s": stats.mutated_messages / elapsed,
        "fed_per_s": stats.fed_messages / elapsed,
        "walcast_errors": stats.walcast_errors,
        "findings": len(stats.findings),
        "distinct_findings": [f"{stage}: {error}" for stage, error in sorted(seen)],
    })  # fmt: skip
    return 1 if stats.findings else 0


if __name__ == "__main__":
    sys.exit(main())
