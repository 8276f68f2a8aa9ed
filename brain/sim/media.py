"""Images in chat requests, checked the way vLLM checks them, with vLLM's error texts.

vLLM reads ``image_url`` parts through its media connector
(``vllm/multimodal/media/connector.py``): ``data:`` URLs must be base64 ("Only base64 data URLs
are supported for now."); ``file:`` URLs need ``--allowed-local-media-path`` ("Cannot load local
files without `--allowed-local-media-path`.") and must lie strictly below it ("The file path P
must be a subpath of `--allowed-local-media-path D`."); anything else is "The URL must be either
a HTTP, data or file URL.". A model without vision answers "At most 0 image(s) may be provided
in one prompt.". Image bytes, from a data URL or a file, are opened as vLLM's ``ImageMediaIO``
opens them (``Image.open(BytesIO(data))``, ``vllm/multimodal/media/image.py``), and decoded:
bytes Pillow cannot identify fail with Pillow's own text ("cannot identify image file
<_io.BytesIO object at 0x...>", also for a file, since vLLM reads the file into a BytesIO), and
a valid header over broken data fails with Pillow's decode error. Every one of these is a 400
BadRequestError for that request only.

The sim fetches nothing over the network: an http(s) image is refused with a 400 saying so.
Image tokens are counted by ``tokenizer.py`` (a fixed number per image).
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from brain.sim import errors

IMAGE_PART_TYPES = ("image_url",)


def image_urls(messages: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    """The URL of every image part in user and tool messages (other roles cannot hold one)."""
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if isinstance(part, Mapping) and part.get("type") in IMAGE_PART_TYPES:
                image = part.get("image_url")
                url = image.get("url") if isinstance(image, Mapping) else image
                yield str(url or "")


def decode(data: bytes) -> None:
    """Open and decode ``data`` with Pillow as vLLM does; a 400 with Pillow's message if not."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except Exception as exc:  # UnidentifiedImageError, OSError("image file is truncated"), ...
        raise errors.bad_request(str(exc)) from None


def check_images(
    messages: Sequence[Mapping[str, Any]], *, vision: bool, allowed_local_media_path: str | None
) -> int:
    """Validate every image of a chat request as vLLM would; returns how many there are.

    Raises ``SimHTTPError`` (400) with vLLM's message for the first image that fails.
    """
    urls = list(image_urls(messages))
    if urls and not vision:
        raise errors.bad_request("At most 0 image(s) may be provided in one prompt.")
    for url in urls:
        _load(url, allowed_local_media_path)
    return len(urls)


def _load(url: str, allowed: str | None) -> bytes:
    spec = urlsplit(url)
    if spec.scheme.startswith("http"):
        raise errors.bad_request(
            "The simulated server does not fetch http(s) media; send a data: or file: URL."
        )
    if spec.scheme == "data":
        data = _data_url(url)
        decode(data)
        return data
    if spec.scheme == "file":
        return _file_url(spec.netloc + spec.path, allowed)
    raise errors.bad_request("The URL must be either a HTTP, data or file URL.")


def _data_url(url: str) -> bytes:
    path = url.split(":", 1)[1]
    try:
        data_spec, payload = path.split(",", 1)
        _media_type, data_type = data_spec.split(";", 1)
    except ValueError as exc:
        raise errors.bad_request(str(exc)) from None
    if data_type != "base64":
        raise errors.bad_request("Only base64 data URLs are supported for now.")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise errors.bad_request(f"Invalid base64 image data: {exc}") from None


def _file_url(raw_path: str, allowed: str | None) -> bytes:
    if allowed is None:
        raise errors.bad_request("Cannot load local files without `--allowed-local-media-path`.")
    root = Path(allowed).resolve()
    filepath = Path(url2pathname(raw_path))
    if root not in filepath.resolve().parents:
        raise errors.bad_request(
            f"The file path {filepath} must be a subpath of `--allowed-local-media-path {root}`."
        )
    try:
        data = filepath.read_bytes()
    except OSError as exc:
        raise errors.bad_request(str(exc)) from None
    decode(data)
    return data
