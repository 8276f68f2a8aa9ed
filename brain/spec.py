"""ServerSpec: the single truth of one model server.

Every other view of a server is derived from it: the ``vllm serve`` argv and the container
options (``brain.command``), the ``--dry-run`` line, the preload fingerprint, the docs.
Validation refuses combinations vLLM would reject (or silently mishandle) with the reason and
the fix, before a GPU is touched. This module does no I/O except reading the filesystem to
tell a host path from a container path, and ``ensure_api_key`` which writes the key file.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import json
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.fields import FieldInfo

from brain import vllm_choices

# The vLLM image this project is tested against. Pinned because flags, log lines and error
# texts drift between releases (see reference/vllm.md); vLLM 0.33.0 is the version whose
# source and argument parser the brain's argv was checked with.
DEFAULT_IMAGE = "vllm/vllm-openai"
DEFAULT_TAG = "v0.33.0"

# Where the official image keeps the Hugging Face cache (it runs as root).
CONTAINER_HF_CACHE = "/root/.cache/huggingface"
# The port vLLM listens on inside the container; the spec's port is the published one.
CONTAINER_PORT = 8000

# vllm/tool_parsers/__init__.py (_TOOL_PARSERS_TO_REGISTER) in vLLM 0.33.0; the other lists of
# accepted values are in brain/vllm_choices.py.
KNOWN_TOOL_CALL_PARSERS: frozenset[str] = vllm_choices.TOOL_CALL_PARSERS

# Quantizations whose vLLM 0.33 methods set ``supports_pre_processed_weights`` (fp8 linear and
# MoE, ModelOpt NVFP4 MoE, MXFP4 MoE); anything else raises UnsupportedQuantForIPCError.
IPC_CACHE_QUANTIZATIONS: frozenset[str | None] = frozenset({None, "fp8", "modelopt_fp4", "mxfp4"})

# Speculative methods that need a separate draft checkpoint in ``speculative.model``.
DRAFT_MODEL_METHODS = frozenset({"eagle", "eagle3", "dflash", "dspark", "draft_model", "medusa"})
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_MEM_RE = re.compile(r"^\d+(\.\d+)?[bkmgBKMG]?$")


@dataclass(frozen=True, init=False)
class Flag:
    """The vLLM flag a spec field becomes, as vLLM's ``EngineArgs`` fields carry theirs.

    Written on the field (``Annotated[int | None, Flag("--max-num-seqs")]``), it is the one
    place the flag is named: the argv (``brain.command``) and the flags ``extra_args`` may not
    repeat (``owned_flags``) are both derived from it. The value is rendered from the field's
    type: a bool is the bare flag (False: ``--no-...``), a dict or section compact JSON, a
    float ``%g``, anything else ``str``. None, "" and the field's default are left out (vLLM
    then applies its own default), unless ``always``.
    """

    name: str
    aliases: tuple[str, ...]
    """Other spellings vLLM's parser accepts (``-tp``), refused in ``extra_args`` too."""
    always: bool
    """Given even when the value is the field's default."""
    serve_only: bool
    """A ``vllm serve`` flag the ``vllm preload`` daemon's argv leaves out (front-end and
    scheduler flags, the load format): the daemon's engine args must match the server's."""
    serve_positional: bool
    """``vllm serve`` takes the value as its positional argument (the model)."""

    def __init__(
        self,
        name: str,
        *aliases: str,
        always: bool = False,
        serve_only: bool = False,
        serve_positional: bool = False,
    ) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "aliases", aliases)
        object.__setattr__(self, "always", always)
        object.__setattr__(self, "serve_only", serve_only)
        object.__setattr__(self, "serve_positional", serve_positional)


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


SPECULATIVE_KEYS: tuple[str, ...] = tuple(k for k in SpeculativeSpec.model_fields if k != "extra")
"""The SpeculativeConfig keys SpeculativeSpec has a field for, in ``--speculative-config`` order;
``speculative.extra`` may not repeat them."""


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


class VolumeSpec(_Strict):
    """One bind mount: host path -> container path."""

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
    backend: Literal["docker", "process", "sim"] = "docker"
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


# --------------------------------------------------------------------------- path mapping


def _expand(path: str) -> str:
    return os.path.normpath(os.path.expanduser(path))


def docker_mounts(spec: ServerSpec) -> list[VolumeSpec]:
    """Every bind mount the container gets: volumes, the HF cache and the preload socket dir."""
    mounts = list(spec.docker.volumes)
    if spec.docker.hf_cache:
        mounts.append(VolumeSpec(host=spec.docker.hf_cache, container=CONTAINER_HF_CACHE))
    if spec.uses_ipc_cache and spec.preload.socket_dir:
        sd = _expand(spec.preload.socket_dir)
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
    hp = _expand(host_path)
    for m in docker_mounts(spec):
        root = _expand(m.host)
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
            best = (len(m.container), str(PurePosixPath(_expand(m.host)) / rel))
    return None if best is None else os.path.normpath(best[1])


# --------------------------------------------------------------------------- validation


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _container_path_problem(spec: ServerSpec, field: str, value: str | None) -> list:
    """A path vLLM reads inside the container must be a container path, not a host one."""
    if value is None or spec.backend != "docker" or not value.startswith(("/", "~")):
        return []
    if value.startswith("/") and container_to_host_path(spec, value) is not None:
        return []  # already a path on a container mount
    mapped = host_to_container_path(spec, value)
    if mapped is not None:
        return [
            (
                field,
                f"{value!r} is a host path; vLLM runs in the container and sees it as {mapped!r}.",
                f"set {field}={mapped}",
            )
        ]
    if os.path.exists(_expand(value)):
        return [
            (
                field,
                f"{value!r} exists on the host but no volume mounts it into the container.",
                f"add docker.volumes: [{{host: {value}, container: /models/...}}] and use the "
                "container path",
            )
        ]
    return []


def structural_problems(spec: ServerSpec) -> list[tuple[str, str, str]]:
    """Combinations vLLM rejects or silently mishandles, as (field, message, fix)."""
    p: list[tuple[str, str, str]] = []
    sp = spec.speculative

    if not (0 < spec.gpu_memory_utilization <= 1):
        p.append(
            (
                "gpu_memory_utilization",
                f"{spec.gpu_memory_utilization} is outside (0, 1]; it is a fraction of the "
                "GPU's total memory.",
                "use e.g. 0.9",
            )
        )
    if isinstance(spec.gpus, list):
        if not spec.gpus:
            p.append(("gpus", "the GPU list is empty.", 'list device ids, e.g. [0], or "all"'))
        elif spec.distributed is None and spec.tensor_parallel_size > len(spec.gpus):
            p.append(
                (
                    "tensor_parallel_size",
                    f"{spec.tensor_parallel_size} ranks need {spec.tensor_parallel_size} GPUs "
                    f"but gpus lists {len(spec.gpus)}.",
                    f"list {spec.tensor_parallel_size} device ids in gpus or lower "
                    "tensor_parallel_size",
                )
            )

    if spec.distributed is not None:
        p += _distributed_problems(spec, spec.distributed)

    if sp is not None:
        if sp.num_speculative_tokens <= 0:
            p.append(
                (
                    "speculative.num_speculative_tokens",
                    f"{sp.num_speculative_tokens} must be > 0 (vLLM: 'Expected "
                    "num_speculative_tokens to be greater than zero').",
                    "use 1-4, or remove the speculative section to turn speculation off",
                )
            )
        if sp.enable_adaptive_verification and spec.enforce_eager:
            p.append(
                (
                    "speculative.enable_adaptive_verification",
                    "adaptive verification requires full CUDA graphs, which enforce_eager "
                    "disables.",
                    "set enforce_eager=false or enable_adaptive_verification=false",
                )
            )
        method = (sp.method or "").lower()
        if method in ("", "mtp", "gemma4_mtp") and not sp.model and _is_gemma4(spec.model):
            p.append(
                (
                    "speculative.model",
                    "Gemma 4 has no MTP layers in its checkpoint; {method: mtp} without a draft "
                    "model fails ('Unsupported speculative method').",
                    f"set speculative.model={_gemma_assistant(spec.model)}",
                )
            )
        elif not method and not sp.model:
            p.append(
                (
                    "speculative",
                    "neither method nor model is set, so vLLM cannot tell what drafts.",
                    "set speculative.model (a draft checkpoint) or speculative.method "
                    "(e.g. mtp, ngram)",
                )
            )
        elif method in DRAFT_MODEL_METHODS and not sp.model:
            p.append(
                (
                    "speculative.model",
                    f"method {method!r} needs a draft checkpoint.",
                    "set speculative.model to the draft's HF id",
                )
            )
        bad = sorted(set(sp.extra) & {*SPECULATIVE_KEYS, "tensor_parallel_size"})
        for key in bad:
            fix = (
                "use extra.draft_tensor_parallel_size (1 or the target's TP)"
                if key == "tensor_parallel_size"
                else f"set speculative.{key} instead"
            )
            p.append((f"speculative.extra.{key}", "not allowed here.", fix))
        p += _container_path_problem(spec, "speculative.model", sp.model)

    p += _choice_problems(spec)
    if spec.enable_auto_tool_choice and not spec.tool_call_parser:
        p.append(
            (
                "enable_auto_tool_choice",
                "auto tool choice needs a tool-call parser to extract calls from the text.",
                "set tool_call_parser (e.g. hermes, gemma4, qwen3_coder)",
            )
        )
    if (
        spec.tool_call_parser
        and spec.tool_call_parser not in KNOWN_TOOL_CALL_PARSERS
        and not any(a.startswith("--tool-parser-plugin") for a in spec.extra_args)
    ):
        p.append(
            (
                "tool_call_parser",
                f"{spec.tool_call_parser!r} is not a parser vLLM {DEFAULT_TAG} registers "
                f"(known: {', '.join(sorted(KNOWN_TOOL_CALL_PARSERS))}).",
                "pick a known name, or load a plugin parser with extra_args: "
                "[--tool-parser-plugin, /path/in/container.py]",
            )
        )

    if spec.uses_ipc_cache:
        if spec.load_format not in (None, "ipc_cache"):
            p.append(
                (
                    "load_format",
                    f"preload is enabled but load_format is {spec.load_format!r}.",
                    "remove load_format (preload implies ipc_cache) or disable preload",
                )
            )
        if spec.quantization not in IPC_CACHE_QUANTIZATIONS:
            p.append(
                (
                    "quantization",
                    f"{spec.quantization!r} weights cannot be shared through the weight cache "
                    "(UnsupportedQuantForIPCError).",
                    "use an unquantized, fp8, modelopt_fp4 or mxfp4 checkpoint, or disable preload",
                )
            )
        kv = spec.kv_cache_dtype
        if kv not in (None, "auto") and not kv.startswith("fp8"):
            p.append(
                (
                    "kv_cache_dtype",
                    f"{kv!r} is not verified with the weight cache (only auto and fp8*).",
                    "use kv_cache_dtype auto or fp8, or disable preload",
                )
            )
        if spec.backend == "docker" and spec.preload.enabled and not spec.preload.socket_dir:
            p.append(
                (
                    "preload.socket_dir",
                    "the daemon and server containers must share the socket directory.",
                    "set preload.socket_dir to a host directory (mounted at the same path)",
                )
            )

    if spec.backend == "docker":
        p += _container_path_problem(spec, "model", spec.model)
        p += _container_path_problem(spec, "chat_template", spec.chat_template)
        p += _container_path_problem(spec, "generation_config", spec.generation_config)
        media = spec.allowed_local_media_path
        if media is not None and container_to_host_path(spec, media) is None:
            mapped = host_to_container_path(spec, media)
            hint = (
                f"set allowed_local_media_path={mapped} (the container side)"
                if mapped
                else "mount the media directory (docker.volumes) and use its container path"
            )
            p.append(
                (
                    "allowed_local_media_path",
                    f"{media!r} is not inside any container mount, so vLLM cannot read it.",
                    hint,
                )
            )

    owned = _owned_flags_in_extra_args(spec.extra_args)
    for flag, field in owned:
        p.append(
            (
                "extra_args",
                f"{flag} is a spec field; passing it in extra_args would make two truths.",
                f"set {field} instead",
            )
        )
    return p


_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


def _choice_problems(spec: ServerSpec) -> list[tuple[str, str, str]]:
    """Values vLLM would refuse at parse or engine-config time (``brain/vllm_choices.py``)."""
    c = vllm_choices
    plugin = any(a.startswith("--reasoning-parser-plugin") for a in spec.extra_args)
    checks = [
        c.choice_problem("dtype", spec.dtype, c.DTYPES),
        c.choice_problem("kv_cache_dtype", spec.kv_cache_dtype, c.KV_CACHE_DTYPES),
        c.choice_problem(
            "attention_backend", spec.attention_backend, c.ATTENTION_BACKENDS, upper=True
        ),
        c.choice_problem("quantization", spec.quantization, c.QUANTIZATION_METHODS),
        None
        if plugin
        else c.choice_problem(
            "reasoning_parser",
            spec.reasoning_parser,
            c.REASONING_PARSERS,
            plugin="--reasoning-parser-plugin",
        ),
    ]
    if spec.speculative is not None and spec.speculative.method:
        checks.append(
            c.choice_problem("speculative.method", spec.speculative.method, c.SPECULATIVE_METHODS)
        )
    return [problem for problem in checks if problem is not None]


def _distributed_problems(spec: ServerSpec, d: DistributedSpec) -> list[tuple[str, str, str]]:
    """A multi-node server: one GPU per rank across the nodes, a head the workers can reach."""
    p: list[tuple[str, str, str]] = []
    tp, pp = spec.tensor_parallel_size, d.pipeline_parallel_size
    if tp * pp != d.world_size:
        p.append(
            (
                "distributed",
                f"tensor_parallel_size {tp} x pipeline_parallel_size {pp} = {tp * pp} ranks, "
                f"but {d.nodes} nodes x {d.gpus_per_node} GPUs = {d.world_size} GPUs; vLLM "
                "runs exactly one rank per GPU.",
                f"the usual split is tensor_parallel_size={d.gpus_per_node} (GPUs per node) and "
                f"distributed.pipeline_parallel_size={d.nodes} (nodes)",
            )
        )
    if isinstance(spec.gpus, list) and spec.gpus and len(spec.gpus) != d.gpus_per_node:
        p.append(
            (
                "gpus",
                f"gpus lists {len(spec.gpus)} device(s) for the head node, but "
                f"distributed.gpus_per_node is {d.gpus_per_node}.",
                f'list {d.gpus_per_node} device ids, or gpus: "all"',
            )
        )
    if is_loopback(d.head_address) or d.head_address in ("0.0.0.0", "::"):
        p.append(
            (
                "distributed.head_address",
                f"{d.head_address!r} cannot be reached from the other nodes.",
                "set it to the head node's IP on the private network the nodes share",
            )
        )
    elif not _HOSTNAME_RE.match(d.head_address):
        p.append(
            (
                "distributed.head_address",
                f"{d.head_address!r} is not an IP address or host name.",
                "e.g. 10.0.0.1",
            )
        )
    if spec.preload.enabled:
        p.append(
            (
                "preload.enabled",
                "the weight-cache daemon is per machine and the brain starts it only here; a "
                "multi-node server cannot load from it.",
                "set preload.enabled=false",
            )
        )
    if spec.backend == "docker" and not spec.docker.network_host:
        p.append(
            (
                "docker.network_host",
                "Ray and NCCL connect the nodes directly over the host's network (vLLM's "
                "run_cluster.sh runs its containers with --network host).",
                "set docker.network_host=true",
            )
        )
    sp = spec.speculative
    if pp > 1 and sp is not None and sp.enable_adaptive_verification:
        p.append(
            (
                "speculative.enable_adaptive_verification",
                "adaptive verification is not supported with pipeline parallelism.",
                "set it to false, or use tensor parallelism only (pipeline_parallel_size=1)",
            )
        )
    return p


def launch_problems(spec: ServerSpec) -> list[tuple[str, str, str]]:
    """Problems that only matter when actually launching (``ensure_api_key`` fixes the first)."""
    p: list[tuple[str, str, str]] = []
    if spec.backend != "sim" and not is_loopback(spec.host) and not spec.api_key:
        p.append(
            (
                "api_key",
                f"host {spec.host} is reachable from other machines and the server has no API key.",
                "call ensure_api_key (brain up does) or set api_key, or bind 127.0.0.1",
            )
        )
    return p


def check_launchable(spec: ServerSpec) -> None:
    """Raise SpecError listing every launch-time problem."""
    from brain.errors import SpecError, SpecErrors

    problems = launch_problems(spec)
    if problems:
        raise SpecErrors([SpecError(m, field=f, hint=h) for f, m, h in problems])


def spec_warnings(spec: ServerSpec) -> list[str]:
    """Legal but probably unintended settings, worth one line in ``brain up`` output."""
    w: list[str] = []
    if spec.tool_call_parser and not spec.enable_auto_tool_choice:
        w.append(
            'tool_call_parser is set without enable_auto_tool_choice: tool_choice "auto" '
            "requests will get HTTP 400."
        )
    if spec.uses_ipc_cache and spec.preload.fallback:
        w.append(
            "preload.fallback is true: a daemon mismatch silently falls back to slow disk loading."
        )
    if spec.backend == "docker" and spec.preload.enabled and not spec.docker.pid_host:
        w.append(
            "preload under Docker: CUDA IPC between containers probably needs docker.pid_host "
            "(unverified); set it if the server reports 'invalid device context'."
        )
    d = spec.distributed
    if d is not None and spec.tensor_parallel_size > d.gpus_per_node:
        w.append(
            f"tensor parallelism spans machines (TP {spec.tensor_parallel_size} > "
            f"{d.gpus_per_node} GPUs per node): every layer waits on the network. vLLM's docs "
            "advise TP = GPUs per node and pipeline_parallel_size = nodes, unless the nodes "
            "share InfiniBand."
        )
    if spec.backend == "docker" and not spec.docker.ipc_host and spec.tensor_parallel_size > 1:
        w.append("tensor parallelism without --ipc=host: make sure docker.shm_size is large.")
    return w


def _is_gemma4(model: str) -> bool:
    m = model.lower()
    return "gemma-4" in m or "gemma4" in m


def _gemma_assistant(model: str) -> str:
    return model.rstrip("/") + "-assistant" if model.endswith("-it") else "<model>-it-assistant"


# --------------------------------------------------------------------------- flags


@dataclass(frozen=True)
class FlagField:
    """One spec field that becomes a vLLM flag, found by ``flag_fields``."""

    path: str
    """The field, dotted from the spec (``distributed.pipeline_parallel_size``)."""
    flag: Flag
    default: Any
    is_bool: bool

    @property
    def negative(self) -> str | None:
        """``--no-<name>`` for a bool: vLLM gives every boolean field argparse's
        BooleanOptionalAction (engine/arg_utils.py, ``_compute_kwargs``)."""
        return "--no-" + self.flag.name.removeprefix("--") if self.is_bool else None

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every way to write the flag on a vLLM command line."""
        negative = (self.negative,) if self.negative else ()
        return (self.flag.name, *self.flag.aliases, *negative)


def _flag_of(info: FieldInfo) -> Flag | None:
    return next((m for m in info.metadata if isinstance(m, Flag)), None)


def _section(annotation: Any) -> type[BaseModel] | None:
    """The spec section a field holds: ``DistributedSpec`` for ``DistributedSpec | None``."""
    options = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else ()
    for t in (annotation, *options):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None


def _walk(model: type[BaseModel], prefix: str) -> Iterator[FlagField]:
    for name, info in model.model_fields.items():
        flag = _flag_of(info)
        if flag is not None:
            annotation = info.annotation
            is_bool = annotation is bool or bool in get_args(annotation)
            default = info.get_default(call_default_factory=True)
            yield FlagField(prefix + name, flag, default, is_bool)
        elif (section := _section(info.annotation)) is not None:
            yield from _walk(section, f"{prefix}{name}.")


@functools.cache
def flag_fields() -> tuple[FlagField, ...]:
    """Every ServerSpec field that becomes a vLLM flag, sections included, in argv order
    (the order the fields are declared in)."""
    return tuple(_walk(ServerSpec, ""))


@functools.cache
def owned_flags() -> dict[str, str]:
    """Every spelling of a field's flag -> the field: ``extra_args`` may not use them, since a
    second value would make two truths (and vLLM keeps the last one given)."""
    return {spelling: f.path for f in flag_fields() for spelling in f.spellings}


def field_value(spec: ServerSpec, path: str) -> Any:
    """The value at a dotted field path; None when a section on the way is unset."""
    value: Any = spec
    for part in path.split("."):
        if value is None:
            return None
        value = getattr(value, part)
    return value


def _owned_flags_in_extra_args(extra: list[str]) -> list[tuple[str, str]]:
    found = []
    for arg in extra:
        flag = arg.split("=", 1)[0]
        field = owned_flags().get(flag)
        if field is not None:
            found.append((flag, field))
    return found


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
