"""Host paths and container paths of a server: which bind mounts it gets and how a path maps.

vLLM runs inside the container and reads every path it is given there, while the user thinks
in host paths. The spec's checks use this mapping to say "that is a host path, the container
sees it as ..." before a launch, and ``brain.command`` turns the same mounts into ``-v``
options. Reads the filesystem only to expand ``~``.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, field_validator

if TYPE_CHECKING:
    from brain.spec import ServerSpec

# Where the official image keeps the Hugging Face cache (it runs as root).
CONTAINER_HF_CACHE = "/root/.cache/huggingface"


class VolumeSpec(BaseModel):
    """One bind mount: host path -> container path."""

    model_config = ConfigDict(extra="forbid")

    host: str
    container: str
    read_only: bool = False

    @field_validator("host")
    @classmethod
    def _host_absolute(cls, v: str) -> str:
        if not (v.startswith("/") or v.startswith("~")):
            raise ValueError(f"volume host path {v!r} must be absolute (or start with ~)")
        return v

    @field_validator("container")
    @classmethod
    def _container_absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"volume container path {v!r} must be absolute")
        return v


def expand_host(path: str) -> str:
    """A host path as Docker needs it: ``~`` expanded, normalised."""
    return os.path.normpath(os.path.expanduser(path))


def docker_mounts(spec: ServerSpec) -> list[VolumeSpec]:
    """Every bind mount the container gets: volumes, the HF cache and the preload socket dir."""
    mounts = list(spec.docker.volumes)
    if spec.docker.hf_cache:
        mounts.append(VolumeSpec(host=spec.docker.hf_cache, container=CONTAINER_HF_CACHE))
    if spec.uses_ipc_cache and spec.preload.socket_dir:
        sd = expand_host(spec.preload.socket_dir)
        mounts.append(VolumeSpec(host=sd, container=sd))
    return mounts


def _under(path: str, root: str) -> PurePosixPath | None:
    p, r = PurePosixPath(path), PurePosixPath(root)
    try:
        return p.relative_to(r)
    except ValueError:
        return None


def host_to_container_path(spec: ServerSpec, host_path: str) -> str | None:
    """Where a host path appears inside the container, or None if no mount covers it.

    The most specific (longest) mount wins, like Docker's own resolution.
    """
    best: tuple[int, str] | None = None
    hp = expand_host(host_path)
    for m in docker_mounts(spec):
        root = expand_host(m.host)
        rel = _under(hp, root)
        if rel is not None and (best is None or len(root) > best[0]):
            best = (len(root), str(PurePosixPath(m.container) / rel))
    return None if best is None else os.path.normpath(best[1])


def container_to_host_path(spec: ServerSpec, container_path: str) -> str | None:
    """Which host path backs a container path, or None if it is not on a bind mount."""
    best: tuple[int, str] | None = None
    cp = os.path.normpath(container_path)
    for m in docker_mounts(spec):
        rel = _under(cp, m.container)
        if rel is not None and (best is None or len(m.container) > best[0]):
            best = (len(m.container), str(PurePosixPath(expand_host(m.host)) / rel))
    return None if best is None else os.path.normpath(best[1])
