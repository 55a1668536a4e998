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
