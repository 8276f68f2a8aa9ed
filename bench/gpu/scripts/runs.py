"""The runs of the pilot's store (the default database) and which server answered each step.

    python runs.py [--since-file F] [--json]

One line per run: id, status, steps, the servers that answered it in order (ports, runs of one
server folded: 8031x3>8030x2 is a run that moved once). Used by x2fleet.sh to wait for a run on
the replica it kills and to show that its runs moved and nothing was lost.
"""

from __future__ import annotations

import json
import sys
from urllib.parse import urlparse

from pilot import events as ev
from pilot.environ import default_db_url
from pilot.store.event_store import EventStore


def path_of(endpoint: str | None) -> str:
    if not endpoint:
        return "?"
    return str(urlparse(endpoint).port or endpoint)


def fold(seq: list[str]) -> str:
    out: list[list[object]] = []
    for s in seq:
        if out and out[-1][0] == s:
            out[-1][1] = int(out[-1][1]) + 1  # type: ignore[call-overload]
        else:
            out.append([s, 1])
    return ">".join(f"{s}x{n}" for s, n in out) or "-"


def main(argv: list[str]) -> None:
    store = EventStore(default_db_url())
    rows = []
    for run in store.list_runs(limit=1000):
        seq = [
            path_of(e.endpoint)
            for e in store.load_events(run.id)
            if isinstance(e, ev.AssistantMessage)
        ]
        rows.append({"id": run.id, "status": run.status, "steps": run.steps, "servers": seq})
    if "--json" in argv:
        print(json.dumps(rows))
        return
    for r in rows:
        print(f"{r['id']}  {r['status']:<10} steps {r['steps']:>2}  {fold(r['servers'])}")


if __name__ == "__main__":
    main(sys.argv[1:])
