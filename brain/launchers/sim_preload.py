"""A stand-in for ``vllm preload`` where there is no vLLM: the sim backend and the CI image.

It takes the daemon's argv (``--model``, ``--weight-cache-socket-dir``,
``--weight-cache-health-port``, the engine args it ignores), prints vLLM's daemon lines (the
``===== Weight cache daemon READY: ... =====`` line the brain waits for) and serves ``GET
/health`` on the health port: 503 while "loading", 200 once ready, like the real parent
process. It holds no weights, so it only makes the preload lifecycle testable (start, wait,
fingerprint match, stop). ``BRAIN_SIM_PRELOAD_DELAY`` delays readiness;
``BRAIN_SIM_PRELOAD_FAIL=1`` prints vLLM's startup-failure line and exits 1.
Run as ``python -m brain.launchers.sim_preload ...``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _line(message: str, level: str = "INFO") -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"{level} {stamp} [daemon.py:1] {message}", flush=True)


def _health_server(host: str, port: int, ready: threading.Event) -> ThreadingHTTPServer:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = 200 if self.path == "/health" and ready.is_set() else 503
            if self.path != "/health":
                code = 404
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            return None

    server = ThreadingHTTPServer((host, port), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm preload (simulated)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--weight-cache-socket-dir", default=None)
    parser.add_argument("--weight-cache-health-port", type=int, default=None)
    parser.add_argument("--weight-cache-health-host", default="0.0.0.0")
    args, ignored = parser.parse_known_args(argv)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    ready = threading.Event()
    if args.weight_cache_health_port:
        _health_server(args.weight_cache_health_host, args.weight_cache_health_port, ready)
    _line(f"Weight cache daemon (simulated) starting: model={args.model!r}, ignored={ignored}")
    if os.environ.get("BRAIN_SIM_PRELOAD_FAIL"):
        _line(
            "Weight cache daemon rank(s) exited during startup (exitcodes=[1]); shutting down.",
            "ERROR",
        )
        return 1
    if stop.wait(float(os.environ.get("BRAIN_SIM_PRELOAD_DELAY", "0") or 0)):
        return 0
    if args.weight_cache_socket_dir:
        os.makedirs(args.weight_cache_socket_dir, mode=0o700, exist_ok=True)
    _line("Loading weights took 0.00 seconds")
    ready.set()
    _line(
        f"===== Weight cache daemon READY: model={args.model}, "
        f"tp={args.tensor_parallel_size}, socket_dir={args.weight_cache_socket_dir} ====="
    )
    stop.wait()
    _line("Weight cache daemon shutting down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
