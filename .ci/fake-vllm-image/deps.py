"""Copy a project's installed runtime dependencies (their whole closure) out of a venv.

Usage: ``python deps.py DEST PROJECT`` copies; ``python deps.py --list PROJECT`` prints
name==version lines, a cheap fingerprint of what a copy would hold. It reads the running
interpreter's metadata, so the copies are exactly the versions the tests run against. The
project itself is not copied (the image gets its source tree). Used to fill the fake vLLM
image: whatever brain.sim imports next month is already a project dependency.
"""

from __future__ import annotations

import re
import shutil
import sys
from importlib import metadata
from pathlib import Path


def closure(names: list[str]) -> dict[str, metadata.Distribution]:
    """Every distribution reachable from ``names`` through unconditional requirements."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = re.split(r"[\s\[<>=!~;(]", todo.pop().strip(), maxsplit=1)[0]
        key = name.lower().replace("_", "-")
        if not key or key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[key] = dist
        for req in dist.requires or []:
            if ";" in req and "extra" in req.split(";", 1)[1]:
                continue
            todo.append(req)
    return seen


def main() -> None:
    target, project = sys.argv[1], sys.argv[2]
    requires = [r for r in metadata.distribution(project).requires or [] if "extra" not in r]
    dists = closure(requires)
    if target == "--list":
        for key in sorted(dists):
            print(f"{key}=={dists[key].version}")
        return
    dest = Path(target)
    dest.mkdir(parents=True, exist_ok=True)
    for dist in dists.values():
        for file in dist.files or []:
            src = Path(dist.locate_file(file)).resolve()
            if "__pycache__" in file.parts or not src.is_file() or ".." in file.parts:
                continue
            target = dest / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


if __name__ == "__main__":
    main()
