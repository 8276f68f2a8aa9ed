"""The grep tool's search loop, run as a child process so a runaway regex can be killed.

Python's ``re`` can backtrack for hours on a pathological pattern and cannot be interrupted
from another thread; a child process can. Reads one JSON request on stdin (the pattern and an
already-confined list of files) and writes one JSON answer on stdout. Standard library only,
imports nothing of ours, so it runs as a plain script.
"""

from __future__ import annotations

import json
import re
import sys

SAMPLE = 8192
COUNT_CAP = 100_000


def search(request: dict) -> dict:
    """Matches of ``request["pattern"]`` in ``request["files"]`` ([rel, abs] pairs), capped."""
    flags = re.IGNORECASE if request.get("ignore_case") else 0
    rx = re.compile(request["pattern"], flags)
    max_matches = int(request["max_matches"])
    max_chars = int(request["max_line_chars"])
    max_file_bytes = int(request["max_file_bytes"])
    matches: list[list] = []
    total = files_matched = binary = large = unreadable = 0
    for rel, path in request["files"]:
        if total >= COUNT_CAP:
            break
        try:
            with open(path, "rb") as fh:
                head = fh.read(SAMPLE)
                if b"\x00" in head:
                    binary += 1
                    continue
                fh.seek(0, 2)
                if fh.tell() > max_file_bytes:
                    large += 1
                    continue
                fh.seek(0)
                hit = False
                for lineno, raw in enumerate(fh, 1):
                    line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                    if rx.search(line) is None:
                        continue
                    hit = True
                    total += 1
                    if len(matches) < max_matches:
                        if len(line) > max_chars:
                            line = line[:max_chars] + " ..."
                        matches.append([rel, lineno, line])
                    if total >= COUNT_CAP:
                        break
                files_matched += hit
        except OSError:
            unreadable += 1
    return {
        "matches": matches,
        "total": total,
        "capped": total >= COUNT_CAP,
        "files_matched": files_matched,
        "binary": binary,
        "large": large,
        "unreadable": unreadable,
    }


def main() -> None:
    request = json.load(sys.stdin)
    json.dump(search(request), sys.stdout)


if __name__ == "__main__":
    main()
