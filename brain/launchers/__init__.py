"""Launchers: one protocol (``base.Launcher``), three backends (docker, process, sim).

``make_launcher`` picks the backend by name; the Docker SDK is imported only when the docker
backend is used, so the sim and process paths work where ``docker`` cannot even be imported.
"""

from __future__ import annotations

from brain.launchers.base import Launcher, ServerHandle, ServerStatus


def make_launcher(
    backend: str, *, request_gpus: bool | None = None, pull: bool = False
) -> Launcher:
    """The launcher for ``backend`` ("docker", "process" or "sim")."""
    if backend == "docker":
        from brain.launchers.docker import DockerLauncher

        return DockerLauncher(request_gpus=request_gpus, pull=pull)
    if backend == "process":
        from brain.launchers.process import ProcessLauncher

        return ProcessLauncher()
    if backend == "sim":
        from brain.launchers.sim import SimLauncher

        return SimLauncher()
    raise ValueError(f"unknown backend {backend!r}: use docker, process or sim")


__all__ = ["Launcher", "ServerHandle", "ServerStatus", "make_launcher"]
