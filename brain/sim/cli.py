"""``brain sim``: serve the simulated vLLM server in the foreground, as a process of its own.

Settings come from ``--config FILE`` (YAML of SimConfig fields) and then from flags, which win.
The process prints vLLM's startup lines on stdout, stops promptly on SIGTERM/SIGINT (it may be
a container's PID 1, which gets no default SIGTERM action) and exits with 1 after printing
``--fatal-log`` text, like a vLLM that failed to load.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import typer
import yaml
from pydantic import ValidationError

from brain.sim.config import SimConfig, VllmFlavour, load_config_file
from brain.sim.faults import parse_fault_spec
from brain.sim.logs import stdout_log
from brain.sim.server import SimServer, run_on_server_loop

DEFAULT_PORT = 8000


def build_config(base: SimConfig, overrides: dict[str, Any]) -> SimConfig:
    """``base`` with every non-None override applied (dotted keys reach timing/speculative)."""
    data = base.model_dump()
    for key, value in overrides.items():
        if value is None:
            continue
        target = data
        *parents, leaf = key.split(".")
        for parent in parents:
            target = target[parent]
        target[leaf] = value
    return SimConfig.model_validate(data)


def serve_in_foreground(config: SimConfig) -> int:
    """Run the server in this process until a signal or an exit fault; return the exit code."""
    server = SimServer(config, log=stdout_log, exit_mode="process")
    signals_seen = 0

    def on_signal(_signum: int, _frame: object) -> None:
        nonlocal signals_seen
        signals_seen += 1
        server.request_stop(force=signals_seen > 1)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    return run_on_server_loop(server.serve())


def sim_command(
    host: str | None = typer.Option(None, "--host", help="Address to bind (default 127.0.0.1)."),
    port: int | None = typer.Option(
        None, "--port", help=f"Port (default {DEFAULT_PORT}; 0 picks one)."
    ),
    model: str | None = typer.Option(
        None, "--model", "--served-model-name", help="Model name served and reported."
    ),
    max_model_len: int | None = typer.Option(None, "--max-model-len", help="Context length."),
    policy: str | None = typer.Option(
        None, "--policy", metavar="demo|script:PATH", help="Where the answers come from."
    ),
    api_key: list[str] | None = typer.Option(
        None, "--api-key", help="Require this Bearer key on /v1."
    ),
    load_delay: float | None = typer.Option(
        None, "--load-delay", help="Seconds before the port opens."
    ),
    ttft: float | None = typer.Option(None, "--ttft", help="Base time to first token (s)."),
    ttft_per_token: float | None = typer.Option(
        None, "--ttft-per-token", help="Prefill s per prompt token."
    ),
    itl: float | None = typer.Option(None, "--itl", help="Seconds per decode step."),
    spec_tokens: int | None = typer.Option(
        None, "--spec-tokens", help="MTP draft tokens k (0 = off)."
    ),
    spec_acceptance: float | None = typer.Option(
        None, "--spec-acceptance", help="Acceptance probability."
    ),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="Batch capacity."),
    max_queue: int | None = typer.Option(None, "--max-queue", help="Waiting requests before 503."),
    fault: list[str] | None = typer.Option(
        None,
        "--fault",
        metavar="SPEC",
        help="Fault spec, repeatable, e.g. http_503@3 or stream_cut%2,after_chunks=4.",
    ),
    seed: int | None = typer.Option(None, "--seed", help="Seed for faults and acceptance draws."),
    fatal_log: str | None = typer.Option(
        None, "--fatal-log", help="Print this during load, exit 1."
    ),
    log_requests: bool | None = typer.Option(None, "--log-requests/--no-log-requests"),
    vllm_version: VllmFlavour | None = typer.Option(
        None,
        "--vllm-version",
        help="The vLLM release to answer as where releases differ (default 0.33).",
    ),
    config: Path | None = typer.Option(
        None, "--config", help="YAML file of SimConfig fields.", exists=True
    ),
) -> None:
    """Serve the simulated vLLM server (no GPU needed)."""
    try:
        base = load_config_file(config) if config else SimConfig()
        faults = [*base.faults, *(parse_fault_spec(spec) for spec in fault or [])]
        resolved = build_config(
            base,
            {
                "host": host,
                "port": port if port is not None else (base.port or DEFAULT_PORT),
                "model": model,
                "served_model_names": [model] if model else None,
                "max_model_len": max_model_len,
                "policy": policy,
                "api_keys": list(api_key) if api_key else None,
                "timing.load_delay": load_delay,
                "timing.ttft": ttft,
                "timing.ttft_per_token": ttft_per_token,
                "timing.itl": itl,
                "speculative.num_tokens": spec_tokens,
                "speculative.acceptance": spec_acceptance,
                "max_num_seqs": max_num_seqs,
                "max_queue": max_queue,
                "faults": [f.model_dump() for f in faults],
                "seed": seed,
                "fatal_log": fatal_log,
                "log_requests": log_requests,
                "vllm_version": vllm_version,
            },
        )
    except ValidationError as exc:
        typer.echo(f"brain sim: {_validation_text(exc)}", err=True)
        raise typer.Exit(2) from None
    except yaml.YAMLError as exc:
        typer.echo(f"brain sim: --config {config} is not valid YAML ({_yaml_text(exc)})", err=True)
        raise typer.Exit(2) from None
    except ValueError as exc:
        typer.echo(f"brain sim: {exc}", err=True)
        raise typer.Exit(2) from None
    problem = policy_problem(resolved.policy) or port_problem(resolved.host, resolved.port)
    if problem:
        typer.echo(f"brain sim: {problem}", err=True)
        raise typer.Exit(2)
    raise typer.Exit(serve_in_foreground(resolved))


def _validation_text(exc: ValidationError) -> str:
    """pydantic's errors as one line: where, then what (the first three)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()[:3]
    )


def _yaml_text(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}" if mark is not None else ""
    return f"{getattr(exc, 'problem', None) or 'bad YAML'}{where}"


def policy_problem(spec: str) -> str | None:
    """What is wrong with ``--policy`` (a missing or broken script, an unknown name), found
    before the server starts, or None."""
    from brain.sim.policies import load_policy

    path = spec.strip().removeprefix("script:")
    try:
        load_policy(spec)
    except OSError as exc:
        return (
            f"--policy {spec}: cannot read {path} ({exc.strerror}); give the path of a YAML "
            "script of conversations (see brain/sim/README.md)"
        )
    except yaml.YAMLError as exc:
        return f"--policy {spec}: {path} is not valid YAML ({_yaml_text(exc)}); fix the file"
    except ValidationError as exc:
        return (
            f"--policy {spec}: {path} is not a script ({_validation_text(exc)}); a script is "
            "`conversations: [{key: ..., turns: [...]}]` (see brain/sim/README.md)"
        )
    except ValueError as exc:
        return f"--policy: {exc}"
    return None


def port_problem(host: str, port: int) -> str | None:
    """A port another process already listens on, named with its holder, or None."""
    import errno
    import socket

    if port == 0:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port"
        else:
            return None
    from brain.launchers.ports import port_holder

    return (
        f"{host}:{port} is already in use by {port_holder(port)}; stop it, or pick another "
        "--port (0 picks a free one)"
    )
