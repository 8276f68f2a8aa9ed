"""The carry bundle's pieces cut into chunks a device call can carry, and put back together there.

A device call carries 64 MiB with the working tree, so the bundle (wheels, vLLM, mini-swe-agent,
the model) travels as chunk folders c01..cNN of at most CHUNK bytes, one a call. Each piece is cut
where the chunk fills, so a chunk may end one piece and begin the next; the manifest says how
many parts each piece has and its sha256, so the device knows when a piece is whole without
waiting for the rest.

    chunks.py pack OUT CHUNK NAME=PATH...     here: OUT/cNN/NAME.pNNN and OUT/manifest.txt
    chunks.py ready NAME STASH MANIFEST       there: exit 0 when every part of NAME is stashed
    chunks.py join NAME STASH MANIFEST DEST   there: the piece, its sha256 checked, parts removed
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

BLOCK = 1 << 20


def pack(out: Path, chunk: int, pieces: list[tuple[str, Path]]) -> list[str]:
    """Cut the pieces, in order, into chunk folders; returns the manifest's lines."""
    lines, index, room = [], 1, chunk
    for name, path in pieces:
        digest, part, left = hashlib.sha256(), 0, path.stat().st_size
        size = left
        with path.open("rb") as src:
            while left:
                if room == 0:
                    index, room = index + 1, chunk
                take = min(room, left)
                folder = out / f"c{index:02d}"
                folder.mkdir(parents=True, exist_ok=True)
                with (folder / f"{name}.p{part:03d}").open("wb") as dst:
                    todo = take
                    while todo:
                        data = src.read(min(BLOCK, todo))
                        digest.update(data)
                        dst.write(data)
                        todo -= len(data)
                part, left, room = part + 1, left - take, room - take
        lines.append(f"{name} {part} {size} {digest.hexdigest()}")
    return lines


def _row(name: str, manifest: Path) -> tuple[int, int, str]:
    for line in manifest.read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == name:
            return int(fields[1]), int(fields[2]), fields[3]
    raise SystemExit(f"{name}: not in {manifest}")


def _parts(name: str, stash: Path, count: int) -> list[Path]:
    return [stash / f"{name}.p{i:03d}" for i in range(count)]


def ready(name: str, stash: Path, manifest: Path) -> bool:
    count, _, _ = _row(name, manifest)
    return all(p.is_file() for p in _parts(name, stash, count))


def join(name: str, stash: Path, manifest: Path, dest: Path) -> str:
    """Write the piece to ``dest``; a missing part or a wrong sha256 is an error that says so."""
    count, size, sha = _row(name, manifest)
    parts = _parts(name, stash, count)
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise SystemExit(f"{name}: parts not carried yet: {', '.join(missing)}")
    digest, written = hashlib.sha256(), 0
    with dest.open("wb") as dst:
        for p in parts:
            with p.open("rb") as src:
                while data := src.read(BLOCK):
                    digest.update(data)
                    dst.write(data)
                    written += len(data)
    if written != size or digest.hexdigest() != sha:
        raise SystemExit(f"{name}: {written} of {size} bytes, sha256 {digest.hexdigest()[:12]}")
    for p in parts:
        p.unlink()
    return f"{name} {size} bytes, sha256 ok"


def main(argv: list[str]) -> int:
    verb, *rest = argv
    if verb == "pack":
        out, chunk = Path(rest[0]), int(rest[1])
        pieces = [(a.split("=", 1)[0], Path(a.split("=", 1)[1])) for a in rest[2:]]
        lines = pack(out, chunk, pieces)
        (out / "manifest.txt").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return 0
    if verb == "ready":
        return 0 if ready(rest[0], Path(rest[1]), Path(rest[2])) else 1
    if verb == "join":
        print(join(rest[0], Path(rest[1]), Path(rest[2]), Path(rest[3])))
        return 0
    raise SystemExit(f"unknown verb {verb!r}: pack, ready or join")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
