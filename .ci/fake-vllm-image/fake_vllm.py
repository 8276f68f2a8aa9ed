"""The `vllm` command inside the fake image: vLLM's argv in, the simulated server out.

    vllm serve MODEL [flags...]   -> python3 -m brain.sim.vllm_entry serve MODEL [flags...]
    vllm preload [flags...]       -> python3 -m brain.launchers.sim_preload [flags...]

FAKE_VLLM_ALLOCATE_MB=N makes `serve` first allocate and touch N MiB and hold it, so a
container with a small --memory limit is OOM-killed the way a real vLLM can be (the Docker
tests diagnose exactly that). The process is replaced with exec so signals from `docker stop`
reach the server, which handles SIGTERM.
"""

from __future__ import annotations

import os
import sys
import time


def _hog(megabytes: int) -> None:
    chunks = []
    for _ in range(megabytes):
        chunks.append(bytearray(b"\x01" * (1024 * 1024)))
    print(f"fake-vllm: holding {megabytes} MiB", flush=True)
    while True:
        time.sleep(3600)


def main(argv: list[str]) -> None:
    if not argv:
        print("usage: vllm serve MODEL [flags] | vllm preload [flags]", file=sys.stderr)
        raise SystemExit(2)
    command, rest = argv[0], argv[1:]
    if command == "serve":
        hog = int(os.environ.get("FAKE_VLLM_ALLOCATE_MB", "0") or 0)
        if hog > 0:
            _hog(hog)
        os.execvp(sys.executable, [sys.executable, "-m", "brain.sim.vllm_entry", "serve", *rest])
    if command == "preload":
        os.execvp(sys.executable, [sys.executable, "-m", "brain.launchers.sim_preload", *rest])
    print(f"fake vllm: unknown command {command!r}", file=sys.stderr)
    raise SystemExit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
