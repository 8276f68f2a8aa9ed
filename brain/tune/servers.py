"""The candidates' servers: every candidate served side by side (one GPU split between them),
so the rounds can interleave candidates without a restart between them; started one after
another (vLLM's memory profile of a starting server must not see another one starting), each
recorded in brain's registry like ``brain up``'s, so a ``--start-only`` call leaves them up
for the next call to reuse, and ``brain ps`` / ``brain down`` see them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from brain.errors import BrainError
from brain.launchers import make_launcher
from brain.launchers.base import ServerHandle
from brain.launchers.ports import free_port
from brain.spec import ServerSpec, ensure_api_key
from brain.state import Registry, state_dir
from brain.tune.candidates import Candidate, candidate_spec
from brain.tune.models import StartCost
from brain.urls import server_root


@dataclass
class Served:
    candidate: Candidate
    spec: ServerSpec
    handle: ServerHandle
    cost: StartCost
    version: str | None = None

    @property
    def root(self) -> str:
        return server_root(self.handle.base_url)


def _same(running: ServerSpec, wanted: ServerSpec) -> bool:
    return running.model_dump(exclude={"tuned"}) == wanted.model_dump(exclude={"tuned"})


def start_all(
    spec: ServerSpec,
    candidates: Sequence[Candidate],
    *,
    base_port: int,
    share_gpu: bool,
    registry: Registry,
    say: Callable[[str], None],
) -> list[Served]:
    """Start (or reuse, when one with the same spec is running) a server per candidate."""
    from brain.cli_common import preflight
    from brain.spec_checks import check_launchable
    from brain.supervisor import launch

    share = len(candidates) if share_gpu else 1
    served: list[Served] = []
    key: str | None = spec.api_key
    try:
        for i, cand in enumerate(candidates):
            port = base_port + i if base_port else free_port(spec.host)
            wanted = candidate_spec(spec, cand, port=port, share=share)
            # one key for all of them (the replay's one client sends one): the first's
            if key:
                wanted = wanted.model_copy(update={"api_key": key})
            else:
                wanted = ensure_api_key(wanted, state_dir())
            key = wanted.api_key
            launcher = make_launcher(wanted.backend)
            record = registry.get(wanted.name)
            if record is not None:
                handle = ServerHandle.from_dict(record.handle)
                if launcher.status(handle).alive and _same(record.server_spec(), wanted):
                    say(f"{cand.label}: reusing {wanted.name} on port {handle.port}")
                    cost = StartCost(
                        candidate=cand.label, server=wanted.name, port=handle.port, reused=True
                    )
                    served.append(Served(cand, wanted, handle, cost))
                    continue
                if launcher.status(handle).alive:
                    raise BrainError(
                        f"{wanted.name} is running with other settings; stop it first "
                        f"(brain down {wanted.name})"
                    )
                registry.remove(wanted.name)
            check_launchable(wanted)
            say(f"{cand.label}: starting {wanted.name} on port {wanted.port}")
            t0 = time.monotonic()
            handle, info = launch(
                wanted, launcher, preflight=preflight(registry), registry=registry
            )
            start_s = time.monotonic() - t0
            say(f"{cand.label}: ready in {start_s:.1f} s")
            cost = StartCost(
                candidate=cand.label, server=wanted.name, port=handle.port, start_s=start_s
            )
            served.append(Served(cand, wanted, handle, cost, info.version))
    except BaseException:
        stop_all(served, registry)
        raise
    return served


def stop_all(served: Sequence[Served], registry: Registry) -> None:
    """Stop the servers this tune started or reused, and forget them."""
    for s in served:
        launcher = make_launcher(s.spec.backend)
        if launcher.status(s.handle).alive:
            launcher.stop(s.handle, timeout=s.spec.timeouts.stop_timeout_s)
        registry.remove(s.spec.name)
