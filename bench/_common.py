"""What the benchmarks share: the durable-loop workload's texts, process figures, tables.

The workload is the one of ``shared/reference/bench-workload.md``: pseudo-English ASCII from a
fixed word list and a fixed seed, unique per step, so nothing compresses or deduplicates it.
Generated before any timing starts. No Marathon imports here: a LangGraph child process must
not pay for them.
"""

from __future__ import annotations

import json
import os
import random
import resource
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WORDS = (  # noqa: SIM905
    "the of and to in is it that for was on are with as be at by this from or have an not "
    "they which one you were all we when there can more if out so up said what its about into "
    "than them only other new some could time these two may then first any like now my such "
    "make over our even most after also made many before must through back years where much "
    "your way well down should because each just those people how too little state good very "
    "world still own see men work long here get both between life being under never day same "
    "another know while last might us great old year off come since against go came right "
    "used take three small large parser module buffer vector config handler window kernel "
    "tensor thread socket packet schema record stream cursor index table column filter sample "
    "batch layer model token cache queue worker signal commit branch"
).split()

SEED = 20261129
SYSTEM_CHARS = 1600
USER_CHARS = 400
ASSISTANT_CHARS = 1200
RESULT_CHARS = 2048
WRITE_CHARS = 512
FINAL_CHARS = 800


def words(rng: random.Random, chars: int, prefix: str = "") -> str:
    """Exactly ``chars`` characters of pseudo-English (``prefix`` first, to make it unique)."""
    parts = [prefix] if prefix else []
    size = len(prefix)
    while size < chars:
        word = rng.choice(WORDS)
        parts.append(word)
        size += len(word) + 1
    return " ".join(parts)[:chars]


@dataclass(frozen=True)
class Step:
    index: int
    text: str
    call_id: str
    tool: str
    arguments: dict[str, str]
    arguments_json: str
    result: str

    @property
    def raw_bytes(self) -> int:
        """What the step adds to the thread: assistant text + call arguments + tool result."""
        return len(self.text) + len(self.arguments_json) + len(self.result)


class Workload:
    """The texts of one run: built per step from its own seed, so a resume process makes only
    the steps it runs (step N+1 and the answer) without replaying a random stream."""

    def __init__(self, seed: int = SEED) -> None:
        self.seed = seed
        self.system = words(random.Random(f"{seed}:system"), SYSTEM_CHARS, "You are an agent.")
        self.user = words(random.Random(f"{seed}:user"), USER_CHARS, "Task:")
        self.final = words(random.Random(f"{seed}:final"), FINAL_CHARS, "Done:")
        self._steps: dict[int, Step] = {}

    def step(self, i: int) -> Step:
        cached = self._steps.get(i)
        if cached is not None:
            return cached
        rng = random.Random(f"{self.seed}:step:{i}")
        path = f"src/pkg/mod_{i:05d}.py"
        if i % 4 == 0:
            tool = "write_file"
            arguments = {"path": path, "content": words(rng, WRITE_CHARS, f"# module {i}")}
        else:
            tool = "read_file"
            arguments = {"path": path}
        step = Step(
            index=i,
            text=words(rng, ASSISTANT_CHARS, f"Step {i}:"),
            call_id=f"call_{i:06d}",
            tool=tool,
            arguments=arguments,
            arguments_json=json.dumps(arguments, ensure_ascii=False),
            result=words(rng, RESULT_CHARS, f"{path}:"),
        )
        self._steps[i] = step
        return step

    def prepare(self, first: int, last: int) -> None:
        """Generate steps first..last now (before any timing starts)."""
        for i in range(first, last + 1):
            self.step(i)

    def result_for(self, path: str) -> str:
        """The tool result for a path (both tools): looked up, no I/O."""
        return self.step(int(path.rsplit("_", 1)[1].split(".")[0])).result

    def raw_bytes_per_step(self, n: int) -> float:
        return sum(self.step(i).raw_bytes for i in range(1, n + 1)) / n


# -- process figures -------------------------------------------------------------------------


def peak_rss_mib() -> float:
    """This process's peak resident set size (``ru_maxrss``, KiB on Linux)."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 if sys.platform != "darwin" else kib / 1024 / 1024


def sqlite_files_bytes(db: Path) -> dict[str, int]:
    sizes = {}
    for suffix in ("", "-wal", "-shm"):
        path = Path(f"{db}{suffix}")
        sizes[suffix or "db"] = path.stat().st_size if path.exists() else 0
    return sizes


def checkpoint_and_size(db: Path) -> int:
    """``PRAGMA wal_checkpoint(TRUNCATE)``, then the database file's size."""
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return db.stat().st_size


def decile_ms(stamps: Sequence[float], first: bool) -> float:
    """Mean ms/step over the first (or last) tenth of steps, from model-call entry stamps.

    ``stamps[k]`` is the entry of model call k+1; step k+1 spans stamps[k] -> stamps[k+1].
    """
    n = len(stamps) - 1
    k = max(1, n // 10)
    if first:
        return (stamps[k] - stamps[0]) / k * 1000
    return (stamps[n] - stamps[n - k]) / k * 1000


def ensure_bytecode(root: Path, packages: Sequence[str] = ("pilot", "tools", "brain")) -> None:
    """Write the bytecode caches of the project's packages, as a first run does.

    With ``PYTHONDONTWRITEBYTECODE=1`` (set on this machine) an editable install is compiled
    from source by every new process, while the installed packages it is compared with (pip
    compiles them at install) load their caches: a fresh process would measure our compiler
    run, about 60 ms, not what a user's second ``pilot resume`` pays."""
    import compileall

    for package in packages:
        compileall.compile_dir(root / package, quiet=1)


def write_json(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write and fsync: the writer may SIGKILL itself right after."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:  # nan
            return "-"
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
