"""The suite's results (JSON lines, one row a try) as the tables a reader wants.

Groups are (agent, model, call mode): the call mode a try *asked for* (``auto``: the model
chooses; ``text`` for the plain loop's bash blocks; a mode Marathon was pinned to), with
Marathon's variant in brackets when a try set workflow fields (``--set``, ``--variant``). Per
group: pass@1 (each task's share of passing tries, averaged over tasks), pass^k (the chance
that k tries of a task all pass, C(c,k)/C(n,k), averaged over tasks: pass^3, and pass^n
over all the tries run), false successes (the agent said it succeeded or submitted, the
hidden check says no), crashes, the call mode of every answer (native, text, forced,
none), and Marathon's answers cut at the output limit with how many of their calls ran (must
be 0). Then each task's passes per group, and why the failed tries failed.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from math import comb
from pathlib import Path
from typing import Any

from bench.tasks.callmodes import MODES

Group = tuple[str, str, str]
_DEFAULT_MODE = {"plain": "text"}


def load_rows(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Rows from results files, older ones (before models and call modes) filled in."""
    rows = []
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            row["model"], row["call_mode"] = group_of(row)[1:]
            row.setdefault("claimed", row.get("agent_status") in ("succeeded", "submitted"))
            row.setdefault("false_success", row["claimed"] and not row["success"])
            row.setdefault("answers", {})
            row.setdefault("crashed", False)
            rows.append(row)
    return rows


def group_of(row: dict[str, Any]) -> Group:
    """(agent, model, call mode), the call mode followed by the try's variant (its
    ``--set`` fields) when it had one."""
    agent = row["agent"]
    mode = row.get("call_mode") or _DEFAULT_MODE.get(agent, "auto")
    variant = row.get("variant")
    if variant and not mode.endswith(f"[{variant}]"):
        mode = f"{mode} [{variant}]"
    return (agent, row.get("model", "-"), mode)


def label(group: Group, groups: Sequence[Group]) -> str:
    """The group's name in a table or plot: only the parts that differ between groups."""
    agent, model, mode = group
    parts = [agent]
    if len({g[1] for g in groups}) > 1:
        parts.append(model)
    if len({g[2] for g in groups if g[0] == agent}) > 1:
        parts.append(mode)
    return " · ".join(parts)


def pass_hat(successes: int, tries: int, k: int) -> float | None:
    """The chance that k of the tries, drawn without replacement, all pass; None if k >
    tries."""
    if k > tries or k < 1:
        return None
    return comb(successes, k) / comb(tries, k)


def _by(rows: Iterable[dict[str, Any]], key: Any) -> dict[Any, list[dict[str, Any]]]:
    out: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        out[key(row)].append(row)
    return out


def group_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One group's figures (see the module docstring)."""
    tasks = _by(rows, lambda r: r["task"])
    counts = [(sum(r["success"] for r in tries), len(tries)) for tries in tasks.values()]
    min_tries = min(n for _, n in counts)

    def mean_over_tasks(k: int) -> float | None:
        values = [pass_hat(c, n, k) for c, n in counts]
        return None if any(v is None for v in values) else sum(values) / len(values)  # type: ignore[misc]

    answers = {mode: sum(int(r["answers"].get(mode, 0)) for r in rows) for mode in MODES}
    return {
        "tries": len(rows),
        "tasks": len(tasks),
        "passed": sum(r["success"] for r in rows),
        "pass@1": sum(c / n for c, n in counts) / len(counts),
        "pass^3": mean_over_tasks(3),
        "k": min_tries,
        "pass^k": mean_over_tasks(min_tries),
        "claims": sum(bool(r["claimed"]) for r in rows),
        "false_successes": sum(bool(r["false_success"]) for r in rows),
        "crashes": sum(bool(r["crashed"]) for r in rows),
        "answers": answers,
        "cut": _cut(rows),
        "steps": sum(r["steps"] for r in rows) / len(rows),
        "tokens": sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows) / len(rows),
        "estimated": any(r.get("tokens_estimated") for r in rows),
        "wall_s": sum(r["wall_s"] for r in rows) / len(rows),
    }


def _cut(rows: list[dict[str, Any]]) -> str:
    """``answers cut (their calls run)`` over the rows that recorded it; ``-`` where none did
    (other agents, results from before it was kept)."""
    kept = [r["cut"] for r in rows if r.get("cut") is not None]
    if not kept:
        return "-"
    return f"{sum(c[0] for c in kept)} ({sum(c[1] for c in kept)} run)"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def summary_table(rows: list[dict[str, Any]]) -> str:
    groups = _by(rows, group_of)
    names = sorted(groups)
    lines = [
        "| agent | model | call mode | tries | passed | pass@1 | pass^3 | pass^k (k) "
        "| false successes | crashes | answers native/text/forced/none "
        "| cut answers (their calls run) | mean steps | mean tokens | mean wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for group in names:
        s = group_stats(groups[group])
        a = s["answers"]
        lines.append(
            f"| {group[0]} | {group[1]} | {group[2]} | {s['tries']} | {s['passed']} | "
            f"{_pct(s['pass@1'])} | {_pct(s['pass^3'])} | {_pct(s['pass^k'])} ({s['k']}) | "
            f"{s['false_successes']} of {s['claims']} claims | {s['crashes']} | "
            f"{a['native']}/{a['text']}/{a['forced']}/{a['none']} | {s['cut']} | "
            f"{s['steps']:.1f} | "
            f"{'~' if s['estimated'] else ''}{s['tokens']:.0f} | {s['wall_s']:.0f} |"
        )
    return "\n".join(lines)


def task_table(rows: list[dict[str, Any]]) -> str:
    """Passes out of tries, a row per task and a column per group."""
    groups = sorted(_by(rows, group_of))
    cells = _by(rows, lambda r: (r["task"], group_of(r)))
    lines = [
        "| task | " + " | ".join(label(g, groups) for g in groups) + " |",
        "|---|" + "---|" * len(groups),
    ]
    for task in sorted({r["task"] for r in rows}):
        row = []
        for group in groups:
            tries = cells.get((task, group), [])
            passed = sum(r["success"] for r in tries)
            false = sum(bool(r["false_success"]) for r in tries)
            mark = f" ({false} false)" if false else ""
            row.append(f"{passed}/{len(tries)}{mark}" if tries else "-")
        lines.append(f"| {task} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def failure_table(rows: list[dict[str, Any]]) -> str:
    """Per task and group: the means, and the distinct reasons its failed tries ended."""
    groups = sorted(_by(rows, group_of))
    lines = [
        "| task | agent | success | mean steps | mean tokens | mean wall s | failures |",
        "|---|---|---|---|---|---|---|",
    ]
    for (task, group), tries in sorted(_by(rows, lambda r: (r["task"], group_of(r))).items()):
        s = group_stats(tries)
        why = "; ".join(sorted({r["reason"][:90] for r in tries if not r["success"]}))
        lines.append(
            f"| {task} | {label(group, groups)} | {s['passed']}/{s['tries']} | "
            f"{s['steps']:.1f} | {'~' if s['estimated'] else ''}{s['tokens']:.0f} | "
            f"{s['wall_s']:.0f} | {why} |"
        )
    return "\n".join(lines)


def markdown(rows: list[dict[str, Any]]) -> str:
    """The whole summary: groups, tasks, failures."""
    if not rows:
        return "No results."
    return "\n\n".join(
        [
            "## By agent, model and call mode",
            summary_table(rows),
            "## Per task (passed/tries; false: the agent claimed success, the hidden check "
            "says no)",
            task_table(rows),
            "## Failures",
            failure_table(rows),
        ]
    )
