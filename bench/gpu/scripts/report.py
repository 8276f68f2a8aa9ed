"""The GPU proof's report: report.py ROOT > report.md (and ROOT/art/startup.png).

ROOT is the run's directory (art/, state/): the figures the phases wrote (art/figures.tsv), the
brain's server events (each start's timeline, the restart), the failures table, the benches.
Runs on the device at the end of g4, or here on an unpacked g4.tgz.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def _figures(art: Path) -> dict[str, str]:
    figs: dict[str, str] = {}
    path = art / "figures.tsv"
    if path.exists():
        for line in path.read_text().splitlines():
            if "\t" in line:
                k, v = line.split("\t", 1)
                figs[k] = v
    return figs


def _events(root: Path) -> list[Any]:
    os.environ.setdefault("MARATHON_HOME", str(root / "state" / "marathon"))
    try:
        from brain.events import ServerEventWriter

        return ServerEventWriter().read()
    except Exception as exc:  # the report still comes out without them
        print(f"no server events: {exc}", file=sys.stderr)
        return []


_PHASES = [
    ("imports (spawn to first line)", "first_output_s"),
    ("weights", "weights_load_s"),
    ("torch.compile", "torch_compile_s"),
    ("memory profiling", "memory_profiling_s"),
    ("graph capture", "graph_capture_s"),
    ("engine init (total)", "init_engine_s"),
    ("spawn to ready", "total_s"),
]


_SERVERS = ("smoldummy", "smoloff", "smolreal", "smolrealoff")


def _starts(events: list[Any]) -> list[tuple[str, str, dict[str, Any], float]]:
    out = []
    for e in events:
        if e.type == "ready" and e.server in _SERVERS:
            p = e.payload
            out.append(
                (
                    e.server,
                    e.at.isoformat(timespec="seconds"),
                    p.get("timeline") or {},
                    p.get("load_s"),
                )
            )
    return out


def _restart(events: list[Any], server: str) -> str | None:
    """Seconds from the last "died" to the "ready" right after it (the supervisor's restart)."""
    died, last = None, None
    for e in events:
        if e.server != server:
            continue
        if e.type == "died":
            died = e.at
        elif e.type == "ready" and died is not None:
            last, died = f"{(e.at - died).total_seconds():.1f}", None
        elif e.type in ("starting", "stopped"):
            died = None if e.type == "stopped" else died
    return last


def _bench(path: Path) -> list[str]:
    if not path.exists():
        return [f"({path.name}: not run)"]
    rep = json.loads(path.read_text())
    rows = [
        "| endpoint | point | output tok/s | TTFT p50 ms | TPOT p50 ms | acceptance | "
        "mean acc. length |",
        "|---|---|---|---|---|---|---|",
    ]
    for ep in rep.get("endpoints", []):
        for p in ep.get("points", []):
            sd = p.get("spec_decode") or {}
            acc = (
                f"{sd['acceptance_rate'] * 100:.1f}%"
                if sd.get("acceptance_rate") is not None
                else "-"
            )
            mal = f"{sd['mean_acceptance_length']:.2f}" if sd.get("mean_acceptance_length") else "-"
            ttft = (p.get("ttft_ms") or {}).get("p50")
            tpot = (p.get("tpot_ms") or {}).get("p50")
            rows.append(
                f"| {ep['label']} | {p['label']} | {p['output_throughput']:.1f} | "
                f"{ttft if ttft is None else round(ttft, 1)} | "
                f"{tpot if tpot is None else round(tpot, 2)} | {acc} | {mal} |"
            )
    for r in rep.get("comparison", []):
        ratios = ", ".join(f"{k} {v:.2f}" for k, v in r["ratios"].items() if v is not None)
        rows.append(f"\nratio {r['point']}: {ratios}")
    return rows


def _plot(starts: list[tuple[str, str, dict[str, Any], float]], png: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return False
    if not starts:
        return False
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(starts) + 1.5))
    keys = [
        "first_output_s",
        "weights_load_s",
        "torch_compile_s",
        "memory_profiling_s",
        "graph_capture_s",
    ]
    names = ["imports", "weights", "torch.compile", "memory profiling", "graph capture"]
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    for i, (_server, _at, t, _load) in enumerate(starts):
        left = 0.0
        for k, name, color in zip(keys, names, colors, strict=True):
            v = t.get(k) or 0.0
            ax.barh(i, v, left=left, color=color, label=name if i == 0 else None)
            left += v
        total = t.get("total_s") or 0.0
        if total > left:
            rest = "other (engine process, config, KV cache, API server)" if i == 0 else None
            ax.barh(i, total - left, left=left, color="lightgrey", label=rest)
        ax.text(max(total, left) + 1, i, f"{total:.0f} s", va="center", fontsize=8)
    ax.set_yticks(range(len(starts)), [f"{s} {a[11:19]}" for s, a, _, _ in starts], fontsize=8)
    ax.set_xlabel("seconds from the spawn")
    ax.set_title("vLLM 0.26 start-ups under the brain (H200)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    return True


def main(root: Path) -> None:
    art = root / "art"
    figs = _figures(art)
    events = _events(root)
    starts = _starts(events)
    print("# Marathon's brain on a real vLLM (GPU proof, bench/gpu)\n")
    for name in ("vllm_version.txt",):
        if (art / name).exists():
            print(f"- {(art / name).read_text().strip()}")
    print("\n## Figures\n")
    for k, v in figs.items():
        print(f"- {k}: {v}")
    print("\n## Start-ups (the brain's ready events; seconds from the spawn)\n")
    print("| server | ready at | " + " | ".join(n for n, _ in _PHASES) + " |")
    print("|---|---|" + "---|" * len(_PHASES))
    for server, at, t, _load in starts:
        vals = [t.get(k) for _, k in _PHASES]
        print(
            f"| {server} | {at} | "
            + " | ".join("-" if v is None else f"{v:g}" for v in vals)
            + " |"
        )
    for server in sorted({s for s, *_ in starts}):
        r = _restart(events, server)
        if r:
            print(f"\nrestart of {server} under --watch (died -> ready, from events): {r} s")
    if _plot(starts, art / "startup.png"):
        print("\n![start-ups](startup.png)")
    print("\n## Bench, ngram speculation on vs off, real weights\n")
    print("\n".join(_bench(art / "brain" / "bench_compare_real.json")))
    print("\n## Bench, ngram on vs off, dummy weights\n")
    print("\n".join(_bench(art / "brain" / "bench_compare_dummy.json")))
    print("\n## Failures provoked (one per diagnosis rule that can be provoked here)\n")
    f = art / "failures.md"
    print(f.read_text() if f.exists() else "(not run)")
    print("\n## Status under load and after it\n")
    for name in (
        "status_busy.txt",
        "status_url_after.txt",
        "status_real_busy.txt",
        "status_real_after.txt",
    ):
        p = art / "brain" / name
        if p.exists():
            print(f"### {name}\n```\n{p.read_text().strip()}\n```")
    p = art / "brain" / "pilot_restart.err"
    if p.exists():
        print(f"\n## The pilot run that rode out the restart\n```\n{p.read_text()[-2500:]}\n```")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/d"))
