"""When faults fire, and the short ``--fault`` spec syntax.

Spec strings (for ``--fault``, repeatable, and ``BRAIN_SIM_FAULTS``)::

    KIND[@N[+N...]][%EVERY][~PROBABILITY][,key=value...]

    http_503@3            request 3 gets a 503
    stream_cut%2          every 2nd request's stream is cut (after 3 chunks by default)
    stall@1,seconds=2,after_chunks=1
    refuse@5,seconds=1.5  at request 5, drop connections and refuse new ones for 1.5 s
    malformed_arguments~0.3,times=2   30 % chance per request, at most twice
    exit@4,exit_code=137  the process dies when request 4 arrives

``503``/``500`` are accepted for ``http_503``/``http_500``; ``-`` may replace ``_`` in kinds.
Decisions are a pure function of (seed, rule index, request number), so a run is repeatable
whatever the order in which concurrent requests are numbered.
"""

from __future__ import annotations

import random
import re
import threading
from typing import Any

from brain.sim.config import FaultRule

_ALIASES = {
    "503": "http_503",
    "500": "http_500",
    "dead": "engine_dead",
    "refuse_connections": "refuse",
}
_HEAD = re.compile(r"^(?P<kind>[a-zA-Z0-9_-]+)(?P<rest>.*)$")
_PART = re.compile(r"(@(?P<at>[0-9+]+))|(%(?P<every>[0-9]+))|(~(?P<prob>[0-9.]+))")


def parse_fault_spec(spec: str) -> FaultRule:
    """Parse one ``--fault`` string into a FaultRule; ValueError with the reason otherwise."""
    head, *options = [part.strip() for part in spec.strip().split(",")]
    match = _HEAD.match(head)
    if not match:
        raise ValueError(f"bad fault spec {spec!r}: expected KIND[@N][%N][~P][,key=value...]")
    kind = match.group("kind").replace("-", "_")
    data: dict[str, Any] = {"kind": _ALIASES.get(kind, kind)}
    rest = match.group("rest")
    position = 0
    while position < len(rest):
        part = _PART.match(rest, position)
        if not part:
            raise ValueError(f"bad fault spec {spec!r}: cannot read {rest[position:]!r}")
        if part.group("at"):
            data["at"] = [int(n) for n in part.group("at").split("+") if n]
        elif part.group("every"):
            data["every"] = int(part.group("every"))
        else:
            data["probability"] = float(part.group("prob"))
        position = part.end()
    for option in options:
        if "=" not in option:
            raise ValueError(f"bad fault option {option!r} in {spec!r}: expected key=value")
        key, value = (s.strip() for s in option.split("=", 1))
        data[key.replace("-", "_")] = value
    try:
        return FaultRule.model_validate(data)
    except Exception as exc:  # pydantic's message names the field
        raise ValueError(f"bad fault spec {spec!r}: {exc}") from exc


class FaultPlan:
    """Decides which rules fire for a request number; counts firings for ``times``."""

    def __init__(self, rules: list[FaultRule], seed: int):
        self._rules = list(rules)
        self._seed = seed
        self._fired = [0] * len(self._rules)
        self._lock = threading.Lock()

    def select(self, request_number: int) -> list[FaultRule]:
        chosen: list[FaultRule] = []
        with self._lock:
            for index, rule in enumerate(self._rules):
                if rule.times is not None and self._fired[index] >= rule.times:
                    continue
                if self._matches(index, rule, request_number):
                    self._fired[index] += 1
                    chosen.append(rule)
        return chosen

    def _matches(self, index: int, rule: FaultRule, n: int) -> bool:
        conditions = []
        if rule.at is not None:
            conditions.append(n in rule.at)
        if rule.every is not None:
            conditions.append(n % rule.every == 0)
        if rule.probability is not None:
            draw = random.Random(f"{self._seed}:fault:{index}:{n}").random()
            conditions.append(draw < rule.probability)
        return all(conditions)
