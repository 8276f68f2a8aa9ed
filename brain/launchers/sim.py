"""The sim backend: the simulated vLLM server as a local process (``brain up --backend sim``).

It is the process launcher with ``vllm`` replaced by ``python -m brain.sim.vllm_entry``, which
takes the same ``vllm serve`` argv, prints vLLM-shaped startup lines and serves vLLM's wire
format without a GPU. Sim-only knobs ride in the spec's ``env`` (``BRAIN_SIM_LOAD_DELAY``,
``BRAIN_SIM_FATAL_LOG``, ``BRAIN_SIM_FAULTS``, ``BRAIN_SIM_POLICY``), exactly as a user would
set them with ``--set env.BRAIN_SIM_LOAD_DELAY=5``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from brain.launchers.process import ProcessLauncher

SIM_SERVE_MODULE = "brain.sim.vllm_entry"


class SimLauncher(ProcessLauncher):
    kind = "sim"

    def __init__(self, *, logs_dir: Path | None = None) -> None:
        super().__init__(executable=[sys.executable, "-m", SIM_SERVE_MODULE], logs_dir=logs_dir)

    def executable(self) -> list[str]:
        # The sim never honours MARATHON_VLLM_EXECUTABLE: it is always the simulated server.
        return [sys.executable, "-m", SIM_SERVE_MODULE]
