"""Small valid images written by hand (struct + zlib), so tests need no Pillow and no network."""

from __future__ import annotations

import random
import struct
import zlib


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(width: int = 4, height: int = 3, *, noise: bool = False, seed: int = 0) -> bytes:
    """An RGB PNG; ``noise`` fills it with random pixels (so it does not compress)."""
    rng = random.Random(seed)
    rows = b""
    for y in range(height):
        if noise:
            pixels = bytes(rng.getrandbits(8) for _ in range(width * 3))
        else:
            pixels = b"".join(bytes((x * 40 % 256, y * 60 % 256, 128)) for x in range(width))
        rows += b"\x00" + pixels
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(rows, 9))
        + _chunk(b"IEND", b"")
    )


def gif(width: int = 1, height: int = 1, frames: int = 1) -> bytes:
    """A GIF with a 2-colour table and ``frames`` frames of one black pixel (valid LZW data)."""
    out = b"GIF89a" + struct.pack("<HHBBB", width, height, 0x80, 0, 0)
    out += b"\x00\x00\x00\xff\xff\xff"  # global colour table: black, white
    if frames > 1:
        out += b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"
    for _ in range(frames):
        out += b"\x21\xf9\x04\x00\x0a\x00\x00\x00"  # graphic control extension
        out += b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0)
        out += b"\x02\x02\x44\x01\x00"  # LZW min code size 2, one sub-block, terminator
    return out + b"\x3b"


def jpeg_header(width: int = 640, height: int = 480) -> bytes:
    """The start of a baseline JPEG (SOI, APP0, SOF0): enough for format and size sniffing."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof + b"\xff\xd9"


def webp_lossless_header(width: int = 300, height: int = 200) -> bytes:
    bits = (width - 1) | ((height - 1) << 14)
    body = b"\x2f" + bits.to_bytes(4, "little") + b"\x00" * 8
    chunk = b"VP8L" + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk
