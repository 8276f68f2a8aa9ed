"""The GPU bundle's chunking (bench/gpu/tasks/scripts/chunks.py), as the build and the device
run it: pieces cut into chunk folders no larger than a call carries, each piece known whole on
the device as soon as its parts are there, joined back byte for byte, and a damaged or missing
part refused with a message rather than a wrong file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu" / "tasks" / "scripts" / "chunks.py"


def chunks(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True
    )


def build(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    data = {"rest.tar": os.urandom(2500), "vllm.tar.xz": os.urandom(1000), "model.gz": b"m" * 4100}
    src = tmp_path / "src"
    src.mkdir()
    for name, blob in data.items():
        (src / name).write_bytes(blob)
    out = tmp_path / "carry"
    done = chunks("pack", out, 1024, *(f"{n}={src / n}" for n in data))
    assert done.returncode == 0, done.stderr
    return out, data


def test_pieces_are_cut_into_chunks_no_larger_than_a_call_carries(tmp_path: Path) -> None:
    out, data = build(tmp_path)
    folders = sorted(p for p in out.iterdir() if p.is_dir())
    sizes = [sum(f.stat().st_size for f in d.iterdir()) for d in folders]
    assert [d.name for d in folders] == [f"c{i:02d}" for i in range(1, 9)]
    assert all(s <= 1024 for s in sizes[:-1]) and sizes[:-1] == [1024] * 7
    assert sum(sizes) == sum(map(len, data.values()))
    # a chunk ends one piece and begins the next
    assert sorted(f.name for f in (out / "c03").iterdir()) == ["rest.tar.p002", "vllm.tar.xz.p000"]


def test_a_piece_is_ready_once_its_parts_are_stashed_and_joins_byte_for_byte(
    tmp_path: Path,
) -> None:
    out, data = build(tmp_path)
    manifest, stash = out / "manifest.txt", tmp_path / "stash"
    stash.mkdir()
    for folder in ("c01", "c02", "c03"):
        for f in (out / folder).iterdir():
            shutil.copy(f, stash)
    assert chunks("ready", "rest.tar", stash, manifest).returncode == 0
    assert chunks("ready", "vllm.tar.xz", stash, manifest).returncode == 1
    joined = chunks("join", "rest.tar", stash, manifest, tmp_path / "rest.tar")
    assert joined.returncode == 0 and "sha256 ok" in joined.stdout
    assert (tmp_path / "rest.tar").read_bytes() == data["rest.tar"]
    assert not list(stash.glob("rest.tar.p*"))  # parts removed once joined
    early = chunks("join", "vllm.tar.xz", stash, manifest, tmp_path / "v")
    assert early.returncode != 0 and "parts not carried yet: vllm.tar.xz.p001" in early.stderr


def test_a_damaged_part_is_refused(tmp_path: Path) -> None:
    out, _ = build(tmp_path)
    stash = tmp_path / "stash"
    stash.mkdir()
    for folder in sorted(out.glob("c*")):
        for f in folder.iterdir():
            shutil.copy(f, stash)
    part = stash / "model.gz.p001"
    part.write_bytes(b"x" + part.read_bytes()[1:])
    bad = chunks("join", "model.gz", stash, out / "manifest.txt", tmp_path / "model.gz")
    assert bad.returncode != 0 and "model.gz: 4100 of 4100 bytes, sha256" in bad.stderr
    assert "Traceback" not in bad.stderr
