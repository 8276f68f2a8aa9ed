"""The simulated server's built-in policies by name: what ``--policy`` on its command line takes.

Apart from ``brain.sim.policy`` (the policy protocol and the request types) because the
built-in policies are written against that protocol: naming them there would be a loop.
"""

from __future__ import annotations

from brain.sim.demo.policy import DemoPolicy
from brain.sim.policy import Policy
from brain.sim.script_policy import ScriptPolicy


def load_policy(spec: str) -> Policy:
    """``demo`` or ``script:PATH`` (PATH to a YAML script); ValueError for anything else."""
    spec = spec.strip()
    if spec == "demo":
        return DemoPolicy()
    if spec.startswith("script:"):
        return ScriptPolicy.from_file(spec.removeprefix("script:"))
    raise ValueError(f"unknown policy {spec!r}: use 'demo' or 'script:PATH'")
