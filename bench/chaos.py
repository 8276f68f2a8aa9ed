"""The chaos bench: attack Marathon the way a long night does, and count what survived.

    python bench/chaos.py [--kills 200] [--seed N] [--jobs 2] [--quick] [--only kills,faults]

Sections (each prints a Markdown table):

1. kills: a scripted run against the simulated server, a real `pilot` SIGKILLed at seeded
   random moments, then `pilot resume` until done, compared with the uninterrupted run;
2. faults: the same run under each server fault the sim can inject, and the server process
   exiting under the brain's supervisor;
3. input: hypothesis-generated broken workflow files, workspace escapes, binary files, a
   100 MB command output, a command that forks and ignores SIGTERM;
4. storage: the database on a full file system, a database locked by another process;
5. concurrency: two `pilot resume` of one run started together.

Must-be-zero figures (side effects twice, crashes, both resumes running, integrity failures)
are summed at the end; the exit code is 1 when any of them is not zero.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

SECTIONS = ("kills", "faults", "input", "storage", "concurrency")


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=None, help="Kill moments (default 200).")
    parser.add_argument("--steps", type=int, default=None, help="Steps of the run (default 100).")
    parser.add_argument("--seed", type=int, default=1, help="Seed of the random moments.")
    parser.add_argument("--jobs", type=int, default=2, help="Kill scenarios run at once.")
    parser.add_argument("--quick", action="store_true", help="Small sizes: about a minute.")
    parser.add_argument(
        "--refuse-seconds",
        type=float,
        default=None,
        help="How long the server refuses connections (default 120, quick 3).",
    )
    parser.add_argument("--races", type=int, default=None, help="Concurrent-resume trials.")
    parser.add_argument("--only", default=",".join(SECTIONS), help="Sections, comma-separated.")
    args = parser.parse_args(argv)
    quick = args.quick
    steps = args.steps or (12 if quick else 100)
    kills = args.kills if args.kills is not None else (5 if quick else 200)
    refuse = args.refuse_seconds if args.refuse_seconds is not None else (3.0 if quick else 120)
    races = args.races if args.races is not None else (3 if quick else 100)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {', '.join(sorted(unknown))}; use {', '.join(SECTIONS)}")

    console = Console(stderr=True)
    out: list[str] = []
    must_be_zero: dict[str, int] = {}
    began = time.monotonic()
    mode = "quick" if quick else "full"
    command = "python bench/chaos.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out.append(f"# Chaos bench ({mode}): `{command.strip()}`\n")

    with tempfile.TemporaryDirectory(prefix="marathon-chaos-") as tmp:
        base = Path(tmp)
        if "kills" in only:
            from chaos_kills import kill_matrix, kill_table, killed_after_table

            with _progress(console) as bar:
                task = bar.add_task("kill matrix", total=kills)
                matrix = kill_matrix(
                    steps=steps,
                    kills=kills,
                    seed=args.seed,
                    jobs=args.jobs,
                    base=base,
                    progress=lambda _r: bar.advance(task),
                )
            ref = matrix.ref
            out.append(
                f"## 1. Kill matrix\n\n{steps}-step run ({len(ref.types)} events, "
                f"{ref.types.count('compaction')} compactions), {kills} SIGKILLs (seed "
                f"{args.seed}), each followed by `pilot resume`; {matrix.seconds:.0f} s. "
                f"Uninterrupted run on the slow server equal to the fast one: "
                f"{'yes' if ref.slow_run_equal else 'NO'}.\n"
            )
            out.append(kill_table(matrix) + "\n")
            out.append(killed_after_table(matrix) + "\n")
            errors = [r for r in matrix.results if r.error]
            for r in errors[:5]:
                out.append(f"- case {r.case}: {r.error.strip()[:300]}")
            must_be_zero["kills: side effects applied twice"] = sum(
                r.duplicates for r in matrix.results
            )
            must_be_zero["kills: runs not completed after resume"] = sum(
                not r.completed for r in matrix.results
            )
            must_be_zero["kills: transcript or tree differs"] = sum(
                not (r.transcript_equal and r.tree_equal) for r in matrix.results
            )
            must_be_zero["kills: integrity failures"] = sum(not r.integrity for r in matrix.results)
        if "faults" in only:
            from chaos_faults import fault_matrix, fault_table

            with _progress(console) as bar:
                task = bar.add_task("server faults", total=None)
                faults = fault_matrix(
                    steps=10 if quick else min(steps, 30),
                    refuse_seconds=refuse,
                    base=base,
                    quick=quick,
                    progress=lambda _r: bar.advance(task),
                )
            out.append(
                "## 2. Server faults\n\nThe run (shorter) under each fault; *lost* compares the "
                "ledger and the workspace with the clean run's (the fault's own turns aside). "
                "A call cut mid-string by `malformed_arguments` is never run: the repair "
                "does not close a cut-off string, so the model is asked to send it again.\n"
            )
            out.append(fault_table(faults) + "\n")
            must_be_zero["faults: runs with something lost"] = sum(
                r.lost for r in faults if r.lost is not None
            )
            must_be_zero["faults: side effects applied twice"] = sum(r.duplicates for r in faults)
        if "input" in only:
            from chaos_input import bad_input, input_table

            with _progress(console) as bar:
                task = bar.add_task("bad input", total=None)
                cases = bad_input(base=base, quick=quick, progress=lambda: bar.advance(task))
            out.append("## 3. Bad input\n")
            out.append(input_table(cases) + "\n")
            must_be_zero["input: crashes"] = sum(c.crashes for c in cases)
        if "storage" in only:
            from chaos_storage import storage_faults, storage_table

            with console.status("storage faults"):
                storage = storage_faults(base=base, quick=quick)
            out.append("## 4. Storage faults\n")
            out.append(storage_table(storage) + "\n")
            must_be_zero["storage: scenarios failed"] = sum(not s.ok for s in storage)
            must_be_zero["storage: integrity failures"] = sum(not s.integrity for s in storage)
        if "concurrency" in only:
            from chaos_storage import concurrent_resumes, race_table

            with _progress(console) as bar:
                task = bar.add_task("concurrent resumes", total=races)
                race = concurrent_resumes(
                    base=base, trials=races, progress=lambda: bar.advance(task)
                )
            out.append("## 5. Concurrency\n")
            out.append(race_table(race) + "\n")
            must_be_zero["concurrency: both resumes ran"] = race.both_ran
            must_be_zero["concurrency: unclear refusals"] = race.unclear

    out.append("## Must be zero\n")
    rows = "\n".join(f"| {k} | {v} |" for k, v in must_be_zero.items())
    out.append(f"| figure | value |\n|---|---|\n{rows}\n")
    out.append(f"Total time {time.monotonic() - began:.0f} s.")
    print("\n".join(out))
    return 1 if any(must_be_zero.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
