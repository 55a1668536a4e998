"""The driver JVM's stderr filter: one known notice dropped, every other byte kept."""

from __future__ import annotations

import io

from pipeline._gateway import DROPPED_LINES, copy_filtered


def test_only_the_incubator_notice_is_dropped() -> None:
    (notice,) = DROPPED_LINES
    source = io.BytesIO(
        notice + b"\n" + b"25/11/25 WARN NativeCodeLoader: no native\n"
        + b"WARNING: Using incubator modules: jdk.incubator.vector, more\n"
        + notice + b"\r\n" + b"# A fatal error \xff has been detected\nno newline at the end"
    )  # fmt: skip
    target = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="replace")
    copy_filtered(source, target)
    target.flush()
    assert target.buffer.getvalue() == (
        b"25/11/25 WARN NativeCodeLoader: no native\n"
        b"WARNING: Using incubator modules: jdk.incubator.vector, more\n"
        b"# A fatal error \xff has been detected\nno newline at the end"
    )


def test_a_text_only_target_gets_the_lines_decoded() -> None:
    source = io.BytesIO(b"one\n" + next(iter(DROPPED_LINES)) + b"\ntwo\n")
    target = io.StringIO()
    copy_filtered(source, target)
    assert target.getvalue() == "one\ntwo\n"


def test_delta_vacuum_counts_are_dropped_and_other_output_kept() -> None:
    source = io.BytesIO(
        b"Deleted 12 files and directories in a total of 3 directories.\n"
        b"Found 2 files and directories in a total of 1 directories that are safe to delete."
        b" Total size is 10 bytes.\n"
        b"Deleted 12 files and directories in a total of 3 directories. and more\n"
        b"a user's println\n"
    )
    target = io.StringIO()
    copy_filtered(source, target)
    assert target.getvalue() == (
        "Deleted 12 files and directories in a total of 3 directories. and more\na user's println\n"
    )
