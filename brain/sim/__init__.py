"""The simulated vLLM server: the project's one test double and the dry-run backend.

Public API (import from the modules, nothing is imported here):

* ``brain.sim.config``: ``SimConfig``, ``Timing``, ``Speculative``, ``FaultRule``
* ``brain.sim.app``: ``create_app(config) -> FastAPI``
* ``brain.sim.server``: ``running_sim(config)`` (a context manager serving in a thread)
* ``brain.sim.policy``: ``Policy``, ``SimChatRequest``, ``SimTurn``
* ``brain.sim.policies``: ``load_policy(spec)`` (the built-in policies by name)
* ``brain.sim.demo``: ``sample_repo_path()``, ``DemoPolicy``
* ``brain.sim.cli``: ``sim_command`` (``brain sim``); ``python -m brain.sim.vllm_entry serve ...``

See ``brain/sim/README.md``.
"""
