"""ServerSpec: the single truth of one model server.

Every other view of a server is derived from it: the ``vllm serve`` argv and the container
options (``brain.command``), the ``--dry-run`` line, the preload fingerprint, the docs. Each
field vLLM reads carries its flag (``brain.spec_flags``), so the argv and the flags
``extra_args`` may not repeat come from the fields alone. A spec is checked when it is built
(``brain.spec_checks``: combinations vLLM would reject or silently mishandle are refused with
the reason and the fix, before a GPU is touched); host and container paths are mapped by
``brain.spec_paths``. This module does no I/O except ``ensure_api_key``, which writes the
key file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from brain import vllm_choices
from brain.spec_checks import is_loopback, structural_problems
from brain.spec_flags import Flag
from brain.spec_paths import VolumeSpec

# The vLLM image this project is tested against. Pinned because flags, log lines and error
# texts drift between releases (see reference/vllm.md); vLLM 0.33.0 is the version whose
# source and argument parser the brain's argv was checked with.
DEFAULT_IMAGE = "vllm/vllm-openai"
DEFAULT_TAG = f"v{vllm_choices.VLLM_VERSION}"

# The port vLLM listens on inside the container; the spec's port is the published one.
CONTAINER_PORT = 8000

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_MEM_RE = re.compile(r"^\d+(\.\d+)?[bkmgBKMG]?$")


Backend = Literal["docker", "process", "sim"]
"""Where a server runs: a container, a process on this host, or the simulated vLLM."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class SpeculativeSpec(_Strict):
    """What goes into ``--speculative-config`` (vllm/config/speculative.py, SpeculativeConfig)."""

    method: str | None = None
    """mtp, eagle, eagle3, dflash, dspark, draft_model, ngram, suffix ...; None lets vLLM infer
    it from the draft model's config."""
    model: str | None = None
    """Draft / assistant / EAGLE checkpoint (HF id, or a container-side path under Docker)."""
    num_speculative_tokens: int = 2
    draft_sample_method: Literal["greedy", "probabilistic"] | None = None
    enable_adaptive_verification: bool | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    """Other SpeculativeConfig keys, passed through verbatim (e.g. draft_tensor_parallel_size)."""

    @classmethod
    def config_keys(cls) -> tuple[str, ...]:
        """The SpeculativeConfig keys with a field, in ``--speculative-config`` order;
        ``extra`` may not repeat them."""
        return tuple(k for k in cls.model_fields if k != "extra")


class PreloadSpec(_Strict):
    """Load weights from a ``vllm preload`` daemon (``--load-format ipc_cache``)."""

    enabled: bool = False
    socket_dir: str | None = None
    """Host directory for the daemon sockets; mounted at the same path in both containers."""
    mode: Literal["zero_copy", "copy"] = "zero_copy"
    fallback: bool = False
    """False: a mismatched or missing daemon is a loud error the brain explains, not a silent
    slow load from disk (vLLM's own default is True)."""
    health_port: int | None = Field(default=None, ge=1, le=65535)


class DockerSpec(_Strict):
    """Container settings (only used by the docker backend)."""

    ipc_host: bool = True
    """--ipc=host: PyTorch/NCCL use shared memory; vLLM's docs ask for it (or a big shm)."""
    pid_host: bool = False
    """--pid=host: believed needed for CUDA IPC between preload daemon and server containers."""
    shm_size: str | None = "20g"
    """Only matters when ipc_host is false."""
    cpus: float | None = Field(default=None, gt=0)
    cpu_shares: int | None = Field(default=None, ge=2)
    memory: str | int | None = None
    memory_swap: str | int | None = None
    memory_reservation: str | int | None = None
    oom_score_adj: int | None = Field(default=None, ge=-1000, le=1000)
    volumes: list[VolumeSpec] = Field(default_factory=list)
    network_host: bool = False
    """--network host: vLLM listens on the spec's host/port directly, nothing is published."""
    hf_cache: str | None = "~/.cache/huggingface"
    """Host HF cache mounted at /root/.cache/huggingface (the whole cache, never a snapshot
    directory: snapshots are symlinks into blobs/)."""
    request_gpus: bool = True
    """False omits the GPU device request (CI's fake image on a machine without GPUs)."""
    pass_env: list[str] = Field(default_factory=lambda: ["HF_TOKEN"])
    """Host environment variables handed to the container when set (gated models need HF_TOKEN)."""

    @field_validator("shm_size", "memory", "memory_swap", "memory_reservation")
    @classmethod
    def _memory_size(cls, v: str | int | None) -> str | int | None:
        if isinstance(v, str) and not _MEM_RE.match(v) and v != "-1":
            raise ValueError(f"{v!r} is not a size like 512m, 20g or a byte count")
        return v


class DistributedSpec(_Strict):
    """One server spread over several machines with vLLM's Ray executor.

    vLLM's own recipe (docs/serving/parallelism_scaling.md, examples/online_serving/
    run_cluster.sh): start a Ray cluster (``ray start --head`` on one node, ``ray start
    --address=HEAD:6379`` on the others), then run one ``vllm serve ...
    --distributed-executor-backend ray`` on the head; Ray places the workers. The usual split
    is ``tensor_parallel_size`` = GPUs per node and ``pipeline_parallel_size`` = nodes.
    Under Docker the brain's container *is* the head (it runs ``ray start --head`` and then
    ``vllm serve``); with the process backend a Ray head you started must already run here.
    """

    nodes: int = Field(ge=2)
    """Machines in the Ray cluster, the head included."""
    gpus_per_node: int = Field(ge=1)
    pipeline_parallel_size: Annotated[int, Flag("--pipeline-parallel-size", "-pp")] = Field(
        default=1, ge=1
    )
    """--pipeline-parallel-size: model layers split across this many stages (usually nodes)."""
    backend: Annotated[Literal["ray"], Flag("--distributed-executor-backend", always=True)] = "ray"
    """vLLM's --distributed-executor-backend. Only ray: vLLM's mp backend across machines needs
    one ``vllm serve --headless`` per node, which the brain does not launch."""
    head_address: str
    """The head node's IP on the private network the nodes share (VLLM_HOST_IP, Ray's
    --node-ip-address). Traffic between nodes is unencrypted: keep it on a private segment."""
    ray_port: int = Field(default=6379, ge=1, le=65535)
    """The Ray head's GCS port (vLLM's run_cluster.sh uses 6379)."""

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


class TunedSpec(_Strict):
    """What ``brain tune`` chose for this profile and when (no vLLM flag: ``brain up`` says it).
    The chosen setting itself is the profile's ``speculative``; this keeps the evidence."""

    choice: str
    """The winning candidate (``off``, ``ngram:4``, ``mtp:2`` ...)."""
    measured_at: str
    """UTC time the tune ended (ISO 8601)."""
    evidence: str | None = None
    """The tune's evidence file (JSON: every sample, every interval)."""
    concurrency: int | None = None
    depth: str | None = None
    """The (concurrency, depth) point the choice was made for: where the runs spend most time."""
    note: str = ""
    """One line: the gain over off with its interval, or where speculation loses."""

    def line(self) -> str:
        """What ``brain up`` says about the tuned setting it starts."""
        where = ", ".join(
            x
            for x in (
                f"c={self.concurrency}" if self.concurrency else "",
                f"depth {self.depth}" if self.depth else "",
            )
            if x
        )
        text = f"tuned: speculative {self.choice} (brain tune, measured {self.measured_at}"
        text += f" for {where})" if where else ")"
        if self.note:
            text += f"; {self.note}"
        return text + (f"; evidence {self.evidence}" if self.evidence else "")


class TimeoutsSpec(_Strict):
    load_timeout_s: float = Field(default=1800, gt=0)
    """From start to /health 200; big models on cold disks take many minutes."""
    stop_timeout_s: float = Field(default=30, gt=0)
    """Grace between SIGTERM and SIGKILL."""


class SpecProblem(ValueError):
    """One or more invalid combinations, each as (field, message, hint)."""

    def __init__(self, problems: list[tuple[str, str, str]]) -> None:
        self.problems = problems
        super().__init__(
            "; ".join(f"{f}: {m}" + (f" Fix: {h}" if h else "") for f, m, h in problems)
        )


class ServerSpec(_Strict):
    """One vLLM server, completely: what to run, where, and with which flags."""

    name: str
    description: str = ""
    backend: Backend = "docker"
    image: str = DEFAULT_IMAGE
    tag: str = DEFAULT_TAG
    gpus: list[int | str] | Literal["all"] = "all"
    # The fields below with a Flag are vLLM's, in the order the argv gives them.
    model: Annotated[str, Flag("--model", always=True, serve_positional=True)]
    served_model_name: Annotated[str | None, Flag("--served-model-name", serve_only=True)] = None
    host: Annotated[str, Flag("--host", always=True, serve_only=True)] = "127.0.0.1"
    port: Annotated[int, Flag("--port", always=True, serve_only=True)] = Field(
        default=8000, ge=1, le=65535
    )
    """The published port: the process listens on it, a bridged container on 8000 inside."""
    api_key: Annotated[str | None, Flag("--api-key", serve_only=True)] = None
    tensor_parallel_size: Annotated[int, Flag("--tensor-parallel-size", "-tp")] = Field(
        default=1, ge=1
    )
    distributed: DistributedSpec | None = None
    """Several machines serve this one model (vLLM + Ray); None: one machine."""
    max_model_len: Annotated[int | Literal["auto"] | None, Flag("--max-model-len")] = None
    gpu_memory_utilization: Annotated[float, Flag("--gpu-memory-utilization", always=True)] = 0.9
    max_num_seqs: Annotated[int | None, Flag("--max-num-seqs")] = Field(default=None, ge=1)
    max_num_batched_tokens: Annotated[int | None, Flag("--max-num-batched-tokens")] = Field(
        default=None, ge=1
    )
    max_num_queued_reqs: Annotated[int | None, Flag("--max-num-queued-reqs", serve_only=True)] = (
        Field(default=None, ge=1)
    )
    stream_interval: Annotated[int | None, Flag("--stream-interval", serve_only=True)] = Field(
        default=None, ge=1
    )
    """vLLM's --stream-interval (0.33+): tokens batched into each streamed chunk, the first
    and last sent at once. 8-16 cuts the server's and the clients' per-token HTTP work when
    many runs share the server; None: vLLM's default, 1."""
    dtype: Annotated[str | None, Flag("--dtype")] = None
    quantization: Annotated[str | None, Flag("--quantization", "-q")] = None
    kv_cache_dtype: Annotated[str | None, Flag("--kv-cache-dtype")] = None
    enable_chunked_prefill: Annotated[bool | None, Flag("--enable-chunked-prefill")] = None
    enable_prefix_caching: Annotated[bool | None, Flag("--enable-prefix-caching")] = None
    enforce_eager: Annotated[bool, Flag("--enforce-eager")] = False
    attention_backend: Annotated[str | None, Flag("--attention-backend")] = None
    trust_remote_code: Annotated[bool, Flag("--trust-remote-code")] = False
    generation_config: Annotated[str | None, Flag("--generation-config")] = None
    load_format: Annotated[str | None, Flag("--load-format", serve_only=True)] = None
    preload: Annotated[PreloadSpec, Flag("--model-loader-extra-config", serve_only=True)] = Field(
        default_factory=PreloadSpec
    )
    speculative: Annotated[SpeculativeSpec | None, Flag("--speculative-config")] = None
    reasoning_parser: Annotated[str | None, Flag("--reasoning-parser")] = None
    limit_mm_per_prompt: Annotated[dict[str, Any] | None, Flag("--limit-mm-per-prompt")] = None
    allowed_local_media_path: Annotated[str | None, Flag("--allowed-local-media-path")] = None
    enable_auto_tool_choice: Annotated[bool, Flag("--enable-auto-tool-choice", serve_only=True)] = (
        False
    )
    tool_call_parser: Annotated[str | None, Flag("--tool-call-parser", serve_only=True)] = None
    chat_template: Annotated[str | None, Flag("--chat-template", serve_only=True)] = None
    docker: DockerSpec = Field(default_factory=DockerSpec)
    extra_args: list[str] = Field(default_factory=list)
    """Flags without a field, passed verbatim after the derived ones; a flag a field owns is
    refused (``owned_flags``)."""
    env: dict[str, str] = Field(default_factory=dict)
    timeouts: TimeoutsSpec = Field(default_factory=TimeoutsSpec)
    tuned: TunedSpec | None = None
    """Written by ``brain tune``: the measured choice, when, and its evidence."""

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(
                f"{v!r} must be lowercase letters, digits, '.', '_' or '-' (it names a container)"
            )
        return v

    @field_validator("extra_args", mode="before")
    @classmethod
    def _stringify_args(cls, v: Any) -> Any:
        """YAML reads ``[--block-size, 256]`` as a str and an int; argv is all strings."""
        if isinstance(v, list):
            return [
                str(x) if isinstance(x, int | float) and not isinstance(x, bool) else x for x in v
            ]
        return v

    @field_validator("max_model_len", mode="before")
    @classmethod
    def _human_int(cls, v: Any) -> Any:
        """Accept vLLM's spellings: 32k = 32000, 32K = 32768, -1 = auto."""
        if isinstance(v, str):
            s = v.strip()
            if s.lower() == "auto" or s == "-1":
                return "auto"
            m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG])", s)
            if m:
                mult = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
                return int(float(m.group(1)) * mult[m.group(2)])
        if v == -1:
            return "auto"
        return v

    @model_validator(mode="after")
    def _combinations(self) -> ServerSpec:
        problems = structural_problems(self)
        if problems:
            raise SpecProblem(problems)
        return self

    @property
    def image_ref(self) -> str:
        return f"{self.image}:{self.tag}" if self.tag else self.image

    @property
    def effective_served_name(self) -> str:
        """The name clients must send as ``model`` (vLLM defaults it to the model argument)."""
        return self.served_model_name or self.model

    @property
    def uses_ipc_cache(self) -> bool:
        return self.preload.enabled or self.load_format == "ipc_cache"


# --------------------------------------------------------------------------- identity, keys


def spec_hash(spec: ServerSpec) -> str:
    """A short stable digest of everything that shapes the running server.

    Used as a container label: a running container whose hash differs from the spec's is
    stale and must be recreated. Description and timeouts do not change the server.
    """
    data = spec.model_dump(mode="json", exclude={"description", "timeouts"})
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def default_state_dir() -> Path:
    """$XDG_STATE_HOME/marathon/brain (default ~/.local/state/marathon/brain)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local/state")
    return Path(base) / "marathon" / "brain"


def api_key_path(spec: ServerSpec, store_dir: Path | str) -> Path:
    return Path(store_dir) / "api-keys" / f"{spec.name}.key"


def ensure_api_key(spec: ServerSpec, store_dir: Path | str | None = None) -> ServerSpec:
    """Give a non-loopback server an API key: the stored one, or a new one saved with 0600.

    Loopback servers and specs that already carry a key are returned unchanged. The key file
    is reused across restarts so clients configured once keep working.
    """
    if spec.api_key or is_loopback(spec.host) or spec.backend == "sim":
        return spec
    path = api_key_path(spec, store_dir if store_dir is not None else default_state_dir())
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.exists():
        key = path.read_text().strip()
        if key:
            return spec.model_copy(update={"api_key": key})
    key = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (key + "\n").encode())
    finally:
        os.close(fd)
    os.chmod(path, 0o600)
    return spec.model_copy(update={"api_key": key})
