"""The view_image tool, and the byte-level image facts it needs: format, size, shrinking, storage.

``view_image(path)`` reads an image from the workspace, checks from its first bytes that it is
a PNG, JPEG, WebP or GIF (a GIF is seen by the model as its first frame), decodes it with
Pillow (a file with a valid header and broken data is refused here, with a message, rather than
sent and refused by the server; a pixel-count cap comes first, against decompression bombs),
shrinks it when it is
over the size limits (Pillow needed for that; without Pillow an oversized image is a clear
error), and stores the bytes to send in the run's artifacts under their sha256, so the same
bytes can be sent again after a resume. The result carries the stored file as an artifact with
an ``image/*`` media type; the pilot turns that into an image content part of the next request
(``pilot.agent.images`` decides how it travels). Must not import ``pilot`` or ``brain``.

Settings (``tools: [{view_image: {...}}]`` in a workflow): ``max_bytes`` (default 2,000,000:
larger images are re-encoded), ``max_side`` (default 2048 pixels: larger images are scaled
down), ``max_file_bytes`` (default 50,000,000: larger files are refused unread),
``max_pixels`` (default 40,000,000: images with more pixels are refused before decoding).
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from tools.base import Artifact, ToolArgs, ToolContext, ToolError, ToolResult

DEFAULT_MAX_BYTES = 2_000_000
DEFAULT_MAX_SIDE = 2048
DEFAULT_MAX_FILE_BYTES = 50_000_000
DEFAULT_MAX_PIXELS = 40_000_000
IMAGES_SUBDIR = "images"

MEDIA_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp", "gif": "image/gif"}
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif"}
PILLOW_HINT = "install Pillow in Marathon's environment (pip install 'pillow>=10')"


@dataclass(frozen=True)
class ImageInfo:
    """What the first bytes of an image say: its format and, when found, its size."""

    format: str  # png | jpeg | webp | gif
    width: int | None = None
    height: int | None = None
    frames: int = 1  # GIF only: how many frames (the model sees the first)

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[self.format]

    @property
    def label(self) -> str:
        size = f", {self.width}x{self.height}" if self.width and self.height else ""
        return f"{self.format.upper()}{size}"


# -- format sniffing (no Pillow needed) ------------------------------------------------------


def sniff_image(data: bytes) -> ImageInfo | None:
    """The image format and size from its bytes, or None when it is not PNG/JPEG/WebP/GIF."""
    try:
        if data.startswith(b"\x89PNG\r\n\x1a\n"):
            width, height = struct.unpack(">II", data[16:24]) if data[12:16] == b"IHDR" else (0, 0)
            return ImageInfo("png", width or None, height or None)
        if data.startswith(b"\xff\xd8\xff"):
            return ImageInfo("jpeg", *_jpeg_size(data))
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return ImageInfo("webp", *_webp_size(data))
        if data[:6] in (b"GIF87a", b"GIF89a"):
            width, height = struct.unpack("<HH", data[6:10])
            return ImageInfo("gif", width or None, height or None, frames=_gif_frames(data))
    except (struct.error, IndexError):
        return None
    return None


def _jpeg_size(data: bytes) -> tuple[int | None, int | None]:
    """Width and height from the first start-of-frame marker (SOF0-SOF15 but DHT/JPG/DAC)."""
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            pos += 1
            continue
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return width or None, height or None
        if marker == 0xD9:
            break
        pos += 2 + length
    return None, None


def _webp_size(data: bytes) -> tuple[int | None, int | None]:
    chunk = data[12:16]
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    return None, None


def _gif_frames(data: bytes) -> int:
    """How many image descriptors the GIF holds (walking its blocks; 1 when unsure)."""
    flags = data[10]
    pos = 13 + (3 * (2 ** ((flags & 7) + 1)) if flags & 0x80 else 0)
    frames = 0
    while pos < len(data):
        block = data[pos]
        if block == 0x3B:  # trailer
            break
        if block == 0x21:  # extension: label, then sub-blocks
            pos += 2
        elif block == 0x2C:  # image descriptor
            frames += 1
            local = data[pos + 9]
            pos += 10 + (3 * (2 ** ((local & 7) + 1)) if local & 0x80 else 0) + 1
        else:
            break
        while pos < len(data) and data[pos] != 0:  # data sub-blocks
            pos += data[pos] + 1
        pos += 1
    return max(frames, 1)


# -- shrinking (Pillow) ---------------------------------------------------------------------


class PillowMissing(ToolError):
    """Re-encoding needs Pillow, which is not installed."""


def _pillow():
    try:
        from PIL import Image
    except ImportError:
        return None
    return Image


class ImageUndecodable(ToolError):
    """The bytes start like an image but do not decode as one (corrupt, truncated, too large)."""


def decode_image(data: bytes, info: ImageInfo, *, max_pixels: int) -> None:
    """Decode ``data`` fully (the first frame), so a broken image is refused before it is sent.

    The header's pixel count is checked against ``max_pixels`` before any pixel is decoded (a
    small file can claim a huge image). Raises ``ImageUndecodable`` saying what is wrong. Without
    Pillow nothing is decoded: the server's refusal is then handled by the pilot.
    """

    def check_pixels(width: int, height: int) -> None:
        if width * height > max_pixels:
            raise ImageUndecodable(
                f"the image claims {width}x{height} pixels, over the {max_pixels:,}-pixel "
                "limit for images; make a smaller copy with the run tool and view that."
            )

    if info.width and info.height:
        check_pixels(info.width, info.height)  # before Pillow even parses the file
    Image = _pillow()
    if Image is None:
        return
    label = info.format.upper()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the cap decides
            with Image.open(io.BytesIO(data)) as opened:
                check_pixels(*opened.size)
                opened.seek(0)
                opened.load()
    except ImageUndecodable:
        raise
    except Image.DecompressionBombError as exc:
        raise ImageUndecodable(
            f"the image is too large to decode safely ({exc}); make a smaller copy with the run "
            "tool and view that."
        ) from None
    except Exception as exc:  # Pillow raises many kinds (OSError, SyntaxError, ...) for bad data
        raise ImageUndecodable(
            f"the file starts like a {label} image but its data does not decode ({exc}): it is "
            "corrupt or truncated. Re-create or re-download it, then view it again."
        ) from None


@dataclass(frozen=True)
class Prepared:
    """The bytes to send, and what was done to get them."""

    data: bytes
    info: ImageInfo
    note: str = ""  # what was changed, for the model and the record; "" = sent as it is

    @property
    def changed(self) -> bool:
        return bool(self.note)


def prepare_image(data: bytes, info: ImageInfo, *, max_bytes: int, max_side: int) -> Prepared:
    """``data`` as it should be sent: unchanged when within limits, else scaled and re-encoded.

    An animated GIF becomes its first frame (as PNG) when Pillow is there; without Pillow it is
    sent as it is (the server reads the first frame). Over a limit without Pillow raises
    ``PillowMissing`` with what to do.
    """
    too_big = len(data) > max_bytes
    too_wide = max(info.width or 0, info.height or 0) > max_side
    animated = info.format == "gif" and info.frames > 1
    if not (too_big or too_wide or animated):
        return Prepared(data, info)
    Image = _pillow()
    if Image is None:
        if animated and not (too_big or too_wide):
            return Prepared(data, info)
        why = (
            f"{len(data):,} bytes (limit {max_bytes:,})"
            if too_big
            else f"{info.width}x{info.height} pixels (limit {max_side} per side)"
        )
        raise PillowMissing(
            f"the image is {why} and cannot be shrunk: Pillow is not installed. Either "
            f"{PILLOW_HINT}, or make a smaller copy with the run tool (e.g. "
            "`convert in.png -resize 50% small.png`) and view that."
        )
    try:
        with Image.open(io.BytesIO(data)) as opened:
            opened.seek(0)
            frame = opened.copy()
    except Exception as exc:  # Pillow raises many kinds for broken files
        raise ToolError(f"the image could not be decoded ({exc}); is the file complete?") from None
    frame.thumbnail((max_side, max_side))
    keep_alpha = frame.mode in ("RGBA", "LA", "P")
    candidates: list[tuple[str, dict]] = []
    if info.format in ("png", "gif") or keep_alpha:
        candidates.append(("png", {"optimize": True}))
    candidates += [("jpeg", {"quality": q}) for q in (85, 70, 50)]
    out = b""
    fmt = "png"
    scaled = frame
    for attempt in range(4):
        for fmt, options in candidates:
            image = scaled
            if fmt == "jpeg" and image.mode not in ("RGB", "L"):
                image = image.convert("RGBA").convert("RGB") if keep_alpha else image.convert("RGB")
            buffer = io.BytesIO()
            image.save(buffer, format=fmt.upper(), **options)
            out = buffer.getvalue()
            if len(out) <= max_bytes:
                break
        if len(out) <= max_bytes:
            break
        scaled = frame.resize(
            (max(1, frame.width // 2 ** (attempt + 1)), max(1, frame.height // 2 ** (attempt + 1)))
        )
    if len(out) > max_bytes:
        raise ToolError(
            f"the image could not be brought under {max_bytes:,} bytes; crop or shrink it first"
        )
    new = ImageInfo(fmt, scaled.width, scaled.height)
    steps = []
    if animated:
        steps.append(f"first of {info.frames} GIF frames")
    if (scaled.width, scaled.height) != (info.width, info.height):
        steps.append(f"scaled from {info.width}x{info.height} to {scaled.width}x{scaled.height}")
    if fmt != info.format or len(out) != len(data):
        steps.append(f"re-encoded as {fmt.upper()} ({len(data):,} -> {len(out):,} bytes)")
    return Prepared(out, new, "; ".join(steps) or "re-encoded")


# -- content-addressed storage ---------------------------------------------------------------


def store_image(data: bytes, media_type: str, artifacts_dir: Path) -> Path:
    """Keep ``data`` once, as ``<artifacts>/images/<sha256>.<ext>`` (written atomically)."""
    digest = hashlib.sha256(data).hexdigest()
    folder = artifacts_dir / IMAGES_SUBDIR
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"{digest}.{EXTENSIONS[media_type]}"
    if path.exists() and path.stat().st_size == len(data):
        return path
    tmp = folder / f".{digest}.{os.getpid()}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


# -- the tool --------------------------------------------------------------------------------


class ViewImageArgs(ToolArgs):
    path: str = Field(description="Image file (PNG, JPEG, WebP or GIF), relative to the workspace.")


class ViewImage:
    """Put a workspace image into the conversation, so the model can look at it."""

    name = "view_image"
    description = (
        "Look at an image file from the workspace (PNG, JPEG, WebP or GIF: a screenshot, a "
        "plot, a diagram). The image is shown to you right after this call's result. Large "
        "images are scaled down."
    )
    args_model = ViewImageArgs
    mutates = False

    def run(self, args: ViewImageArgs, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        settings = ctx.tool_settings(self.name)
        max_bytes = int(settings.get("max_bytes", DEFAULT_MAX_BYTES))
        max_side = int(settings.get("max_side", DEFAULT_MAX_SIDE))
        max_file = int(settings.get("max_file_bytes", DEFAULT_MAX_FILE_BYTES))
        max_pixels = int(settings.get("max_pixels", DEFAULT_MAX_PIXELS))
        real = ctx.workspace.resolve(args.path)
        try:
            st = os.stat(real)
        except FileNotFoundError:
            raise ToolError(
                f"no such file {args.path!r}. Use find_files or list_dir to locate the image."
            ) from None
        except NotADirectoryError:
            raise ToolError(f"no such file {args.path!r}: a part of the path is a file") from None
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{args.path!r} is not a regular file; give the path of an image.")
        rel = ctx.workspace.relative(real)
        if st.st_size == 0:
            raise ToolError(f"{rel} is empty (0 bytes), not an image.")
        if st.st_size > max_file:
            raise ToolError(
                f"{rel} is {st.st_size:,} bytes, over the {max_file:,}-byte limit for images; "
                "make a smaller copy with the run tool and view that."
            )
        data = real.read_bytes()
        info = sniff_image(data)
        if info is None:
            from tools.files import guess_binary_type, looks_binary

            kind = guess_binary_type(real, data[:8192]) if looks_binary(data[:8192]) else "text"
            raise ToolError(
                f"{rel} is not an image view_image can show (it looks like: {kind}). "
                "Supported formats: PNG, JPEG, WebP, GIF."
            )
        try:
            decode_image(data, info, max_pixels=max_pixels)
        except ImageUndecodable as exc:
            raise ImageUndecodable(f"{rel}: {exc}") from None
        prepared = prepare_image(data, info, max_bytes=max_bytes, max_side=max_side)
        stored = store_image(prepared.data, prepared.info.media_type, ctx.artifacts_dir)
        lines = [f"Image {rel}: {info.label}, {len(data):,} bytes."]
        if prepared.changed:
            lines.append(f"To fit the size limits it was {prepared.note}.")
        elif info.format == "gif" and info.frames > 1:
            lines.append(f"It is an animated GIF ({info.frames} frames); you see the first.")
        lines.append("It is attached below for you to look at.")
        return ToolResult.ok(
            " ".join(lines),
            artifacts=[
                Artifact(
                    name=rel,
                    path=str(stored),
                    size=len(prepared.data),
                    media_type=prepared.info.media_type,
                )
            ],
        )
