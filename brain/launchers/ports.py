"""One server per port: is the spec's port taken, and by whom?

Checked before every start, so a second ``brain up`` on a busy port is refused with a name
("server qwen-smoke started by brain", "container marathon-x", "pid 4242: python -m ...")
instead of a vLLM traceback minutes later. The holder lookup is best effort and cheap: the
brain's own registry, Docker labels, then /proc/net/tcp* with /proc/*/fd.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from brain.errors import PortInUse


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


def port_is_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((_connect_host(host), port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (for tests and ``--set port=0``-like uses)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _registry_holder(port: int, pid: str | None) -> str | None:
    """A server in the brain's registry on ``port`` (matching ``pid`` when one is known)."""
    from brain.state import Registry

    for rec in Registry().servers():
        if int(rec.handle.get("port", -1)) != port:
            continue
        if pid is None or str(rec.handle.get("ref")) == pid:
            return f"server {rec.name!r} started by brain ({rec.backend}; `brain down {rec.name}`)"
    return None


def _docker_holder(port: int) -> str | None:
    """A marathon-labelled container publishing ``port``; None when Docker is not reachable."""
    try:
        import docker

        client = docker.from_env(timeout=2)
        for c in client.containers.list(filters={"label": "marathon.server"}):
            for bindings in (c.attrs.get("HostConfig", {}).get("PortBindings") or {}).values():
                for b in bindings or []:
                    if str(b.get("HostPort")) == str(port):
                        return (
                            f"container {c.name} (marathon server {c.labels['marathon.server']!r})"
                        )
    except Exception:
        return None
    return None


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def _process_holder(port: int) -> tuple[str, str] | None:
    """(pid, command line) of the process owning the listening socket, via /proc."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in targets:
                    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                    cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
                    return pid, cmd
            except OSError:
                continue
    return None


def port_holder(port: int) -> str:
    """Who holds ``port``: a brain server, a marathon container, a process, or "another process"."""
    proc = _safe(_process_holder, port)
    pid = proc[0] if proc else None
    if pid and (who := _safe(_registry_holder, port, pid)):
        return who
    if who := _safe(_docker_holder, port):
        return who
    if proc:
        return f"pid {proc[0]} ({proc[1][:120]})"
    return _safe(_registry_holder, port, None) or "another process"


def _safe(fn, *args):
    try:
        return fn(*args)
    except Exception:
        return None


def ensure_port_free(host: str, port: int) -> None:
    """Raise PortInUse naming the holder when host:port already accepts connections."""
    if port_is_open(host, port):
        raise PortInUse(host, port, port_holder(port))
