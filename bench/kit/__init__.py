"""The kit the benches, the soak and the tests share: drive walcast, read what it wrote.

What lives here: :mod:`~bench.kit.daemon` (``walcast run`` as a subprocess, slot and WAL
positions), :mod:`~bench.kit.kafka` (read topics back from the beginning to their end),
:mod:`~bench.kit.fold` (fold walcast's json changes into tables as the README's consumer
contract says, replays dropped), :mod:`~bench.kit.wire` (pgoutput bytes built by hand),
:mod:`~bench.kit.fuzz` (the pipeline fuzzer's harness) and :mod:`~bench.kit.figures` (a
bench's figures as JSON with the commit and the machine).

Why here and not in ``tests/`` or ``capture/`` (issue 33, item 5): ``bench/`` never imports
``tests/`` (a bench is a tool, run from a checkout without pytest's fixtures), while the
tests may import ``bench/`` (``tests/test_soak.py`` already imports ``bench.soak``). The kit
is not part of walcast either: ``capture/`` is the daemon users install (the wheel ships
``capture`` and ``pipeline`` only), and none of this runs in it. So the one home both may
import is a package under ``bench/``. It imports ``capture`` and third-party packages,
never ``tests`` and never ``bench``'s scripts; it reads ``tests/data`` as data only.
"""
