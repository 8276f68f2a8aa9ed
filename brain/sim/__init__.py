"""The simulated vLLM server: the project's one test double and the dry-run backend.

Public API (import from the modules; only ``dry_run_server`` lives here):

* ``dry_run_server()``: the pilot's one way in (``pilot run --dry-run``): the demo policy
  served in a thread, and the sample repository it is scripted for
* ``brain.sim.config``: ``SimConfig``, ``Timing``, ``Speculative``, ``FaultRule``
* ``brain.sim.app``: ``create_app(config) -> FastAPI``
* ``brain.sim.server``: ``running_sim(config)`` (a context manager serving in a thread)
* ``brain.sim.policy``: ``Policy``, ``SimChatRequest``, ``SimTurn``
* ``brain.sim.policies``: ``load_policy(spec)`` (the built-in policies by name)
* ``brain.sim.demo``: ``sample_repo_path()``, ``DemoPolicy``
* ``brain.sim.cli``: ``sim_command`` (``brain sim``); ``python -m brain.sim.vllm_entry serve ...``

The pilot reaches the sim only through ``dry_run_server``, so the sim's modules can change
without touching it. See ``brain/sim/README.md``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DryRunServer", "dry_run_server"]

DRY_RUN_MODEL = "marathon-sim/demo"
"""The model name the dry-run server answers to (``/v1/models``)."""


@dataclass(frozen=True)
class DryRunServer:
    """A running dry-run server: where it answers, and the project its demo policy expects."""

    openai_base_url: str
    """The OpenAI-compatible base URL (``http://127.0.0.1:PORT/v1``)."""
    sample_repo: Path
    """The bundled sample repository the demo policy is scripted for; read-only: copy it."""


@contextmanager
def dry_run_server() -> Iterator[DryRunServer]:
    """Serve the demo policy on a free loopback port until the block ends.

    A run against it needs no GPU and no model: it answers as vLLM does, with short, fixed
    latencies (a dry run is for checking a workflow, not for timing it).
    """
    from brain.sim.config import SimConfig, Timing
    from brain.sim.demo import sample_repo_path
    from brain.sim.server import running_sim

    config = SimConfig(
        model=DRY_RUN_MODEL,
        max_model_len=32768,
        policy="demo",
        timing=Timing(ttft=0.05, itl=0.004),
    )
    with running_sim(config) as sim:
        yield DryRunServer(openai_base_url=sim.openai_base_url, sample_repo=sample_repo_path())
