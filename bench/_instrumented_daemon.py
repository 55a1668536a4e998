"""``python -m capture`` under callgrind, instrumented from the pump's first run on.

Run as ``valgrind --tool=callgrind --instr-atstart=no python bench/_instrumented_daemon.py
run ...`` (by ``bench/cpu_per_change.py --callgrind``): start-up (imports, connecting,
the slot's set-up) runs uninstrumented and fast; the first call of ``Pump.run`` turns
instrumentation on (``callgrind_control -i on``) before it moves a single item, so the
counted instructions are the stream's and what follows. Works with any checkout whose
``capture.pump.Pump.run`` drives the stream (every commit since the pump existed).
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from typing import Any

import capture.pump as pump_module

_original = pump_module.Pump.run
_started = False


def _run(self: Any, *args: Any, **kwargs: Any) -> Any:
    global _started  # noqa: PLW0603 - once per process
    if not _started:
        _started = True
        subprocess.run(
            ["callgrind_control", "-i", "on", str(os.getpid())],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
    return _original(self, *args, **kwargs)


pump_module.Pump.run = _run  # type: ignore[method-assign]
sys.argv = ["capture", *sys.argv[1:]]
runpy.run_module("capture", run_name="__main__", alter_sys=True)
