"""Images in the conversation: how a stored image travels to the server, decided, not guessed.

An image enters a run through ``view_image`` (or a phase's ``images:``), which stores the bytes
to send under their sha256 in the run's artifacts (``tools.images``). Events then carry an
``ImageRef``; the folded messages carry a placeholder part (``marathon-image:<sha256>``) that
:func:`materialize` turns into the real URL just before a request. Two ways to travel:

* ``file://<server-side path>``: only when the brain manages the server (a profile), the server
  has ``allowed_local_media_path``, the image is the workspace file itself (not re-encoded) and
  that file lies under a directory the server can read: for Docker, a mounted volume (the path
  is mapped host -> container with ``brain.spec_paths.host_to_container_path``); for a local process
  or the sim, the host path itself. The file must sit strictly below the allowed directory,
  as vLLM checks. Cheap: the request carries a path, not megabytes.
* otherwise a base64 data URL of the stored bytes (``data:image/png;base64,...``).

The choice is made once, when the image enters (recorded in the event), so a resumed run sends
the same thing. Sending re-reads nothing from the workspace: a file:// image whose file has
changed since it was viewed is sent as a data URL of the stored bytes instead.

vLLM's per-request media errors are recognised (:func:`classify_media_error`): a refused local
path ("Cannot load local files without `--allowed-local-media-path`", "must be a subpath of")
switches the run to data URLs once (an ``image_fallback`` event); a model without vision ("At
most 0 image(s) may be provided in one prompt") or a data URL still refused ("Only base64 data
URLs are supported") takes the images out of the conversation, with a note the model reads.
Image bytes the server cannot decode (Pillow's "cannot identify image file", "image file is
truncated", ...; any 400 while images are in the conversation is checked) drop the images
that do not decode here either (:func:`undecodable`), each replaced by a note; when every image
decodes here, a recognised decoding error leaves all images out, as above.

Pure but for the clearly marked I/O helpers (:func:`refs_from_artifacts`, :class:`Materializer`).
Must not import ``pilot.events`` or ``pilot.agent.state`` (they import this module).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

PLACEHOLDER_PREFIX = "marathon-image:"
PHASE_IMAGE_TOOL = "view_image"
"""The tool that loads a phase's ``images:`` (the same checks, limits and storage)."""

LOCAL_PATH_ERRORS = (
    "cannot load local files without",  # vLLM: "...without `--allowed-local-media-path`."
    "must be a subpath of",  # vLLM: "The file path P must be a subpath of `--allowed-..."
    "invalid `--allowed-local-media-path`",
)
DATA_URL_ERRORS = ("only base64 data urls are supported",)
IMAGE_DATA_ERRORS = (  # Pillow's texts, which vLLM passes on in its 400
    "cannot identify image file",
    "image file is truncated",
    "broken data stream",
    "broken png file",
    "decompression bomb",
    "truncated file read",
)
NO_VISION = re.compile(r"at most 0 image\(s\) may be provided", re.IGNORECASE)

MediaError = Literal["local_path", "data_url", "no_vision", "image_data"]


class ImageRef(BaseModel):
    """One image as events record it: the stored bytes, where they came from, how they travel."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    sha256: str
    """Of the bytes to send (the stored artifact's name)."""
    media_type: str
    artifact: str
    """Absolute path of the stored bytes (``<artifacts>/images/<sha256>.<ext>``)."""
    source: str
    """Where the image came from, for people: the workspace-relative path."""
    source_path: str | None = None
    """The workspace file's absolute, resolved host path."""
    original: bool = True
    """True when the stored bytes are the file's bytes (not scaled or re-encoded)."""
    size: int = 0
    width: int | None = None
    height: int | None = None
    url: str | None = None
    """``file://`` URL the server reads; None = a data URL of the stored bytes."""
    transport_note: str = ""
    """Why it travels the way it does (shown in reports)."""


@dataclass(frozen=True)
class MediaPlan:
    """What the run knows about the server's media handling (from the workflow and profile).

    ``vision``: False when the model takes no images (workflow ``model.vision: false``, or a
    profile with ``limit_mm_per_prompt: {image: 0}``); None = not known, try. ``server`` is the
    brain's ServerSpec when the brain manages the server (a profile), else None.
    """

    vision: bool | None = None
    server: Any = None  # brain.spec.ServerSpec | None

    @property
    def allowed_local_media_path(self) -> str | None:
        return getattr(self.server, "allowed_local_media_path", None) if self.server else None


# -- how an image travels (pure) --------------------------------------------------------------


def server_path(media: MediaPlan, host_path: str) -> str | None:
    """Where the server sees ``host_path``: mapped through Docker volumes, or as it is for a
    local process or the sim; None when the server cannot see it at all."""
    server = media.server
    if server is None:
        return None
    if getattr(server, "backend", None) == "docker":
        from brain.spec_paths import host_to_container_path

        return host_to_container_path(server, host_path)
    return os.path.normpath(host_path)


def choose_transport(ref: ImageRef, media: MediaPlan) -> ImageRef:
    """``ref`` with its URL decided: file:// when the server can read the file itself (see the
    module docstring), else a data URL (``url=None``), with the reason."""
    allowed = media.allowed_local_media_path
    if media.server is None:
        why = "data URL: the server is not managed by the brain, so its file system is unknown"
        return ref.model_copy(update={"url": None, "transport_note": why})
    if not allowed:
        why = "data URL: the server has no allowed_local_media_path"
        return ref.model_copy(update={"url": None, "transport_note": why})
    if not ref.original or not ref.source_path:
        why = "data URL: the image was re-encoded, so the file on disk is not what is sent"
        return ref.model_copy(update={"url": None, "transport_note": why})
    seen = server_path(media, ref.source_path)
    if seen is None or not _strictly_under(seen, allowed):
        why = (
            f"data URL: {ref.source} is not under a directory the server reads "
            f"(allowed_local_media_path {allowed})"
        )
        return ref.model_copy(update={"url": None, "transport_note": why})
    url = PurePosixPath(seen).as_uri()
    return ref.model_copy(
        update={"url": url, "transport_note": f"file:// (server-side path {seen})"}
    )


def _strictly_under(path: str, root: str) -> bool:
    p, r = PurePosixPath(os.path.normpath(path)), PurePosixPath(os.path.normpath(root))
    return p != r and r in p.parents


def classify_media_error(message: str) -> MediaError | None:
    """Which of vLLM's per-request media errors ``message`` is, if any."""
    lowered = message.lower()
    if NO_VISION.search(message):
        return "no_vision"
    if any(text in lowered for text in LOCAL_PATH_ERRORS):
        return "local_path"
    if any(text in lowered for text in DATA_URL_ERRORS):
        return "data_url"
    if any(text in lowered for text in IMAGE_DATA_ERRORS):
        return "image_data"
    return None


# -- messages (pure) ---------------------------------------------------------------------------


def placeholder(ref: ImageRef) -> dict[str, Any]:
    """The image part as folded messages hold it; :func:`materialize` gives it its real URL."""
    return {"type": "image_url", "image_url": {"url": PLACEHOLDER_PREFIX + ref.sha256}}


def image_message(items: Sequence[tuple[str, Sequence[ImageRef]]]) -> dict[str, Any]:
    """The user message that shows tool images to the model, after the tool results.

    Tool messages are text in the chat API, so images travel in a user message right after
    them; ``items`` is ``(call label, refs)`` per call.
    """
    content: list[dict[str, Any]] = []
    for label, refs in items:
        for ref in refs:
            size = f", {ref.width}x{ref.height}" if ref.width and ref.height else ""
            content.append({"type": "text", "text": f"[{label}: {ref.source}{size}]"})
            content.append(placeholder(ref))
    return {"role": "user", "content": content}


def prompt_content(prompt: str, refs: Sequence[ImageRef]) -> str | list[dict[str, Any]]:
    """A phase prompt with its images attached (plain text when it has none)."""
    if not refs:
        return prompt
    return [{"type": "text", "text": prompt}, *(placeholder(ref) for ref in refs)]


def refused_output(source: str, reason: str) -> str:
    """The tool error a model without vision gets instead of an image."""
    return (
        f"Error: {source} cannot be shown: the model serving this run does not take images "
        f"({reason}). Work from text instead (file names, sizes, or tools that describe the "
        "image)."
    )


# -- I/O: from tool artifacts to refs, and from placeholders to URLs --------------------------


def refs_from_artifacts(artifacts: Iterable[Any], workspace_root: Path) -> list[ImageRef]:
    """ImageRefs for the ``image/*`` artifacts a tool returned (reads the stored file and
    hashes the source file, to know whether the bytes are the file's own). Never raises for a
    missing file: that artifact is skipped."""
    from tools.images import sniff_image

    refs = []
    for artifact in artifacts:
        media_type = getattr(artifact, "media_type", "") or ""
        if not media_type.startswith("image/"):
            continue
        stored = Path(artifact.path)
        try:
            data = stored.read_bytes()
        except OSError:  # gone already: nothing to show (the tool's text still says what it saw)
            continue
        info = sniff_image(data)
        source_path = (workspace_root / artifact.name).resolve()
        original = False
        try:
            original = hashlib.sha256(source_path.read_bytes()).hexdigest() == stored.stem
        except OSError:
            pass
        refs.append(
            ImageRef(
                sha256=stored.stem,
                media_type=media_type,
                artifact=str(stored),
                source=artifact.name,
                source_path=str(source_path),
                original=original,
                size=len(data),
                width=info.width if info else None,
                height=info.height if info else None,
            )
        )
    return refs


def undecodable(refs: Iterable[ImageRef]) -> list[str]:
    """The sha256 of each ref whose stored bytes do not decode (read and decoded here, as the
    server would; a missing file counts as undecodable)."""
    from tools.images import DEFAULT_MAX_PIXELS, ImageUndecodable, decode_image, sniff_image

    bad = []
    for ref in refs:
        try:
            data = Path(ref.artifact).read_bytes()
        except OSError:
            bad.append(ref.sha256)
            continue
        info = sniff_image(data)
        try:
            if info is None:
                raise ImageUndecodable("not an image")
            decode_image(data, info, max_pixels=DEFAULT_MAX_PIXELS)
        except ImageUndecodable:
            bad.append(ref.sha256)
    return bad


class Materializer:
    """Turns placeholder parts into real URLs just before a request (reads stored bytes).

    Data URLs are cached by sha256; a file:// image is checked against the file's current
    bytes (cached by size and mtime) and sent as a data URL when the file has changed.
    """

    def __init__(self, max_cache: int = 64) -> None:
        self._data: dict[str, str] = {}
        self._hashes: dict[str, tuple[tuple[int, int], str]] = {}
        self._max = max_cache

    def materialize(
        self,
        messages: Sequence[Mapping[str, Any]],
        images: Mapping[str, ImageRef],
        *,
        data_only: bool = False,
        refused: str | None = None,
        dropped: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """``messages`` with every placeholder replaced: by its URL, or, when images were
        refused (all, or the ``dropped`` ones: sha256 -> why), by a short text part saying so.
        Messages without images are passed as is."""
        out: list[dict[str, Any]] = []
        for message in messages:
            content = message.get("content")
            if not isinstance(content, list) or not any(_is_placeholder(p) for p in content):
                out.append(message)  # type: ignore[arg-type]
                continue
            parts = []
            for part in content:
                if not _is_placeholder(part):
                    parts.append(part)
                    continue
                sha = part["image_url"]["url"].removeprefix(PLACEHOLDER_PREFIX)
                ref = images.get(sha)
                why_dropped = (dropped or {}).get(sha)
                if refused is not None or ref is None or why_dropped:
                    why = refused or why_dropped or "the image is no longer recorded"
                    parts.append({"type": "text", "text": f"[image not shown: {why}]"})
                    continue
                parts.append({"type": "image_url", "image_url": {"url": self.url(ref, data_only)}})
            out.append({**message, "content": parts})
        return out

    def url(self, ref: ImageRef, data_only: bool = False) -> str:
        if ref.url and not data_only and self._unchanged(ref):
            return ref.url
        return self.data_url(ref)

    def data_url(self, ref: ImageRef) -> str:
        cached = self._data.get(ref.sha256)
        if cached is None:
            data = Path(ref.artifact).read_bytes()
            cached = f"data:{ref.media_type};base64,{base64.b64encode(data).decode('ascii')}"
            if len(self._data) >= self._max:
                self._data.pop(next(iter(self._data)))
            self._data[ref.sha256] = cached
        return cached

    def _unchanged(self, ref: ImageRef) -> bool:
        if not ref.source_path:
            return False
        try:
            st = os.stat(ref.source_path)
        except OSError:
            return False
        stamp = (st.st_size, st.st_mtime_ns)
        hit = self._hashes.get(ref.source_path)
        if hit is None or hit[0] != stamp:
            try:
                digest = hashlib.sha256(Path(ref.source_path).read_bytes()).hexdigest()
            except OSError:
                return False
            hit = (stamp, digest)
            self._hashes[ref.source_path] = hit
        return hit[1] == ref.sha256


def _is_placeholder(part: Any) -> bool:
    return (
        isinstance(part, Mapping)
        and part.get("type") == "image_url"
        and str((part.get("image_url") or {}).get("url", "")).startswith(PLACEHOLDER_PREFIX)
    )


def has_images(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any message holds an image placeholder."""
    return any(
        isinstance(m.get("content"), list) and any(_is_placeholder(p) for p in m["content"])
        for m in messages
    )
