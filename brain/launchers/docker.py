"""Run the server as a Docker container through the Docker SDK for Python.

Containers are named ``marathon-<name>`` and labelled (``marathon.server``, the spec hash), so
they can be found from any ``brain`` invocation and told apart from the user's own. The image
must already be present: a missing image is an ``image_missing`` diagnosis with the
``docker pull`` line, never an implicit multi-GB pull, unless the caller asks (``pull=True``,
``brain up --pull``). ``request_gpus=False`` leaves the GPU device request out (CI's fake image
on a machine without NVIDIA: ``--gpus`` fails there).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from brain.command import DockerRunOptions, docker_run_options
from brain.diagnose import Diagnosis, diagnose
from brain.errors import LaunchError
from brain.launchers.base import ServerHandle, ServerStatus, poll_wait
from brain.launchers.ports import ensure_port_free
from brain.spec import ServerSpec


def docker_unreachable(exc: BaseException) -> LaunchError:
    return LaunchError(
        "Docker is not reachable",
        Diagnosis(
            "docker_unreachable",
            "the Docker daemon does not answer",
            [str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__],
            "start Docker (e.g. `sudo systemctl start docker`), check DOCKER_HOST and that "
            "you may use /var/run/docker.sock, or use --backend process / --backend sim",
        ),
    )


_NETWORK = re.compile(
    r"dial tcp|no such host|i/o timeout|connection refused|server misbehaving|"
    r"Client\.Timeout|TLS handshake timeout|network is unreachable",
    re.IGNORECASE,
)
_AUTH = re.compile(
    r"pull access denied|unauthorized|authentication required|requested access to the "
    r"resource is denied|no basic auth credentials",
    re.IGNORECASE,
)
_NAME = re.compile(
    r"manifest unknown|manifest for \S+ not found|invalid reference format|"
    r"not found: manifest",
    re.IGNORECASE,
)


def docker_api_diagnosis(text: str, spec: ServerSpec, *, pulling: bool = False) -> Diagnosis | None:
    """The Docker daemon's refusal (a pull, a container create) read as a cause and a fix:
    the registry out of reach, a login needed, an image or tag that does not exist, the rate
    limit, or the container runtime (runc) refusing an option a restricted Docker forbids."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), text.strip())
    ref = spec.image_ref
    if pulling and "toomanyrequests" in text.lower():
        return Diagnosis(
            "registry_rate_limited",
            "the registry refused the pull: pull rate limit reached",
            [line],
            f"`docker login` (an account's limit is higher) or wait, then brain up --pull; "
            f"or pull {ref} on another machine and `docker save`/`docker load` it here",
        )
    if pulling and _AUTH.search(text):
        return Diagnosis(
            "registry_auth",
            "the registry refused the pull: it needs a login, or the repository does not exist",
            [line],
            f"check the image name in the profile ({spec.image}); for a private registry run "
            f"`docker login {_registry(spec.image)}` first, then brain up --pull",
        )
    if pulling and _NAME.search(text):
        return Diagnosis(
            "image_not_found",
            f"the registry has no {ref}: the image name or tag is wrong",
            [line],
            f"fix image/tag in the profile (e.g. a vllm/vllm-openai release tag such as "
            f"v0.33.0; `docker search {spec.image.split('/')[-1]}` or the registry's tag list "
            "shows what exists), then brain up --pull",
        )
    if pulling and _NETWORK.search(text):
        return Diagnosis(
            "registry_unreachable",
            f"Docker cannot reach the registry {_registry(spec.image)} (no network, DNS or a "
            "proxy in the way)",
            [line],
            "check the network and Docker's proxy settings (`docker info` shows them), or pull "
            f"{ref} on a connected machine and bring it over with `docker save` / `docker load`",
        )
    if "oom_score_adj" in text and "permission denied" in text.lower():
        value = spec.docker.oom_score_adj
        return Diagnosis(
            "docker_oom_score_adj_denied",
            "this Docker may not lower the container's OOM score (rootless Docker, user "
            "namespaces or a restricted runtime lack CAP_SYS_RESOURCE)",
            [line],
            f"set docker.oom_score_adj to 0 or more in the profile (now {value}; the shipped "
            "profiles use 300: the kernel kills the server before the rest of the system), "
            "or remove it",
        )
    if "OCI runtime" in text or "runc" in text:
        return Diagnosis(
            "docker_runtime_refused",
            "the container runtime (runc) refused to create the container",
            [line],
            "a rootless or restricted Docker (user namespaces, a CI sandbox, no cgroup "
            "delegation) forbids some options: try without docker.oom_score_adj, "
            "docker.memory/memory_swap/memory_reservation and docker.ipc_host in the profile; "
            "`docker info` shows the security options in force",
        )
    return None


def _registry(image: str) -> str:
    first = image.split("/", 1)[0]
    return first if "/" in image and ("." in first or ":" in first) else "docker.io"


class DockerLauncher:
    """One container per server, created from ``brain.command.docker_run_options``."""

    kind = "docker"

    def __init__(
        self,
        *,
        client: Any = None,
        request_gpus: bool | None = None,
        pull: bool = False,
        extra_labels: Mapping[str, str] | None = None,
    ) -> None:
        self._client = client
        self.request_gpus = request_gpus
        self.pull = pull
        self.extra_labels = dict(extra_labels or {})

    def client(self) -> Any:
        """The SDK client, created on first use; LaunchError with a remedy when unreachable."""
        if self._client is None:
            import docker

            try:
                client = docker.from_env(timeout=30)
                client.ping()
            except Exception as exc:
                raise docker_unreachable(exc) from exc
            self._client = client
        return self._client

    # --- start ------------------------------------------------------------------------------

    def ensure_image(self, spec: ServerSpec) -> None:
        """The image is present, or pulled when ``pull`` is set; else an image_missing error."""
        import docker.errors

        client = self.client()
        try:
            client.images.get(spec.image_ref)
            return
        except docker.errors.ImageNotFound:
            pass
        if self.pull:
            try:
                client.images.pull(spec.image, tag=spec.tag or None)
                return
            except docker.errors.APIError as exc:
                text = getattr(exc, "explanation", None) or str(exc)
                raise LaunchError(
                    f"could not pull {spec.image_ref}: {text}",
                    docker_api_diagnosis(str(text), spec, pulling=True)
                    or diagnose(str(exc), spec=spec),
                ) from exc
        raise LaunchError(
            f"image {spec.image_ref} is not present",
            Diagnosis(
                "image_missing",
                "the Docker image is not available locally",
                [f"No such image: {spec.image_ref}"],
                f"docker pull {spec.image_ref}  (or run brain up --pull; or fix image/tag)",
            ),
        )

    def run_options(self, spec: ServerSpec) -> DockerRunOptions:
        """The container to create (the preload launcher overrides this)."""
        return docker_run_options(spec, environ=os.environ, request_gpus=self.request_gpus)

    def listen_address(self, spec: ServerSpec) -> tuple[str, int] | None:
        return spec.host, spec.port

    def _remove_leftover(self, spec: ServerSpec, name: str) -> None:
        """A stopped container with our name (a crash) is removed; a running one is an error."""
        import docker.errors

        try:
            old = self.client().containers.get(name)
        except docker.errors.NotFound:
            return
        if old.status == "running":
            raise LaunchError(
                f"container {old.name} is already running (on another port?). "
                f"Stop it first: brain down {spec.name}"
            )
        old.remove(force=True)

    def start(self, spec: ServerSpec) -> ServerHandle:
        import docker.errors

        address = self.listen_address(spec)
        if address is not None:
            ensure_port_free(*address)
        client = self.client()
        self.ensure_image(spec)
        opts = self.run_options(spec)
        self._remove_leftover(spec, opts.name)
        kwargs = opts.to_sdk_kwargs()
        kwargs["labels"].update(self.extra_labels)
        try:
            container = client.containers.run(**kwargs)
        except docker.errors.APIError as exc:
            self._remove_created(opts.name)
            text = getattr(exc, "explanation", None) or str(exc)
            raise LaunchError(
                f"Docker refused to start {opts.name}: {text}",
                docker_api_diagnosis(str(text), spec) or diagnose(str(text), spec=spec),
            ) from exc
        host, port = address or (spec.host, 0)
        return ServerHandle(
            name=spec.name,
            backend=self.kind,
            ref=container.id,
            host=host,
            port=port,
            extra={"container": opts.name, "image": opts.image},
        )

    def _remove_created(self, name: str) -> None:
        """``run`` creates before it starts: a start failure leaves a dead container behind."""
        try:
            self.client().containers.get(name).remove(force=True)
        except Exception:
            pass

    # --- inspect ----------------------------------------------------------------------------

    def container(self, handle: ServerHandle) -> Any | None:
        import docker.errors

        try:
            return self.client().containers.get(handle.ref)
        except docker.errors.NotFound:
            return None

    def status(self, handle: ServerHandle) -> ServerStatus:
        c = self.container(handle)
        if c is None:
            return ServerStatus("missing", None, "container removed")
        state = c.attrs.get("State", {})
        if state.get("Running"):
            return ServerStatus("running")
        code = state.get("ExitCode")
        if state.get("OOMKilled"):
            return ServerStatus("oom_killed", code, "the kernel OOM killer stopped it")
        return ServerStatus("exited", code, state.get("Error") or "")

    def wait(self, handle: ServerHandle, timeout: float | None = None) -> ServerStatus:
        return poll_wait(self, handle, timeout, interval=0.25)

    def logs(
        self, handle: ServerHandle, follow: bool = False, stop: threading.Event | None = None
    ) -> Iterator[str]:
        c = self.container(handle)
        if c is None:
            return
        stream = c.logs(stream=True, follow=follow, stdout=True, stderr=True)
        if stop is not None:
            threading.Thread(target=_close_when_set, args=(stop, stream), daemon=True).start()
        partial = b""
        try:
            for chunk in stream:
                partial += chunk
                *lines, partial = partial.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", errors="replace").rstrip("\r")
        except Exception:
            if stop is None or not stop.is_set():
                raise
        finally:
            _close(stream)
        if partial:
            yield partial.decode("utf-8", errors="replace")

    # --- stop -------------------------------------------------------------------------------

    def stop(self, handle: ServerHandle, timeout: float = 30.0) -> None:
        import docker.errors

        c = self.container(handle)
        if c is None:
            return
        try:
            if c.status == "running":
                c.stop(timeout=max(1, int(timeout)))
            c.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: a removal is already in progress
                raise


def _close(stream: Any) -> None:
    try:
        stream.close()
    except Exception:
        pass


def _close_when_set(stop: threading.Event, stream: Any) -> None:
    stop.wait()
    _close(stream)
