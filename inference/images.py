"""Images in a message: what is accepted, and how many tokens one is reserved for.

A message to a vision model may carry images as OpenAI's content parts,
``{"type": "image_url", "image_url": {"url": "data:image/png;base64,...", "detail": "auto"}}``, which
SGLang's chat route takes as they are (sglang-protocol.md §10.12). Only inline ``data:`` URLs of PNG,
JPEG, WebP or GIF pictures are accepted: SGLang would fetch an ``http(s)`` or ``file://`` URL itself,
from inside the serving network (a way to make the engines reach what the caller cannot), and an image
fetched there could not be checked here for size before engine time.

How many tokens an image is reserved for, before the engine says what it cost (the ledger bills the
engine's ``prompt_tokens``, which include the image's): the picture's size is read from its header,
and it is counted as Qwen2-VL counts it, one token per 28x28-pixel cell of the picture (rounded up on
each side), at most 16,384 cells (Qwen2-VL scales larger pictures down to that), plus the two markers
around it; and at least 576, the largest fixed count of the common fixed-grid encoders (LLaVA-1.5's
24x24; Gemma 3 uses 256), so a small picture is not under-reserved on those models. A tiled model
(InternVL, LLaVA-NeXT) may spend more on a small picture than this; the reservation is then short by
the difference, and the ledger still bills what the engine counted.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from config.refusals import BadInput
from config.request_limits import too_large

MEDIA_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WebP", "image/gif": "GIF"}
#: A picture's file name ends in one of these (an attachment in the web chat is told apart by its name).
EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".gif")
DETAILS = ("auto", "low", "high")
CELL = 28  # pixels: Qwen2-VL's 14-pixel patches, merged 2x2
MAX_CELLS = 16384
MARKERS = 2  # <|vision_start|> and <|vision_end|>
MIN_RESERVED = 576


@dataclass(frozen=True)
class Picture:
    """An accepted image: what its header says."""

    media_type: str
    width: int
    height: int
    size_bytes: int

    @property
    def reserved_tokens(self) -> int:
        cells = math.ceil(self.width / CELL) * math.ceil(self.height / CELL)
        return max(MIN_RESERVED, min(cells, MAX_CELLS) + MARKERS)


def read_image_part(part: dict, where: str) -> dict:
    """An ``image_url`` content part checked (400 or 413 naming `where`), in the shape sent to the engine."""
    spec = part.get("image_url")
    url = spec.get("url") if isinstance(spec, dict) else None
    if not isinstance(url, str) or not url:
        raise BadInput("An image part needs 'image_url': {'url': 'data:image/png;base64,...'}.", param=where)
    read_data_url(url, where)
    cleaned: dict[str, Any] = {"url": url}
    detail = spec.get("detail")
    if detail is not None:
        if detail not in DETAILS:
            raise BadInput(f"'detail' must be one of {', '.join(DETAILS)}.", param=f"{where}.image_url.detail")
        cleaned["detail"] = detail
    return {"type": "image_url", "image_url": cleaned}


def read_data_url(url: str, where: str) -> Picture:
    """The picture of a ``data:`` URL, or the refusal that says what is wrong with it."""
    if url[:8].lower().startswith(("http://", "https://", "file://")):
        raise BadInput(
            "Send the image itself, as a data: URL (data:image/png;base64,...); this server does not fetch image URLs.",
            param=where,
        )
    header, comma, payload = url.partition(",")
    if not url.startswith("data:") or not comma or not header.endswith(";base64"):
        raise BadInput("An image must be a base64 data: URL, such as data:image/png;base64,....", param=where)
    media_type = header[len("data:") : -len(";base64")].lower()
    if media_type not in MEDIA_TYPES:
        raise BadInput(
            f"Images must be PNG, JPEG, WebP or GIF (image/png, image/jpeg, image/webp, image/gif), not "
            f"{media_type or 'an unnamed type'}.",
            param=where,
        )
    limit = settings.API_IMAGE_MAX_BYTES
    decoded = len(payload) * 3 // 4 - payload[-2:].count("=")  # refused before decoding what is too large
    if decoded > limit:
        raise too_large(decoded, limit, f"image at {where}")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise BadInput("The image is not valid base64.", param=where) from None
    if len(data) > limit:
        raise too_large(len(data), limit, f"image at {where}")
    size = image_size(data)
    if size is None:
        raise BadInput(f"The image at {where} could not be read as a {MEDIA_TYPES[media_type]} picture.", param=where)
    return Picture(media_type, size[0], size[1], len(data))


def is_picture_name(name: str) -> bool:
    return name.lower().endswith(EXTENSIONS)


def picture_of(data: bytes) -> Picture | None:
    """The picture `data` holds, its type read from its own first bytes (never from a name or a
    browser's word), or None when it is not a PNG, JPEG, WebP or GIF that reads."""
    size = image_size(data)
    if size is None:
        return None
    if data.startswith(b"\x89PNG"):
        media_type = "image/png"
    elif data.startswith(b"GIF8"):
        media_type = "image/gif"
    elif data.startswith(b"RIFF"):
        media_type = "image/webp"
    else:
        media_type = "image/jpeg"
    return Picture(media_type, size[0], size[1], len(data))


def image_part(picture: Picture, data: bytes) -> dict:
    """The content part that carries `data` to the engine (OpenAI's shape, which SGLang takes)."""
    encoded = base64.b64encode(data).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:{picture.media_type};base64,{encoded}"}}


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, JPEG, GIF or WebP header; None when it is none of these. (The simulated
    engine reads headers the same way, in its own code: it imports nothing of the product.)"""
    size: tuple[int, int] | None = None
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24 and data[12:16] == b"IHDR":
        size = struct.unpack(">II", data[16:24])
    elif data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        size = struct.unpack("<HH", data[6:10])
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        kind = data[12:16]
        if kind == b"VP8X":
            size = 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
        elif kind == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
            w, h = struct.unpack("<HH", data[26:30])
            size = w & 0x3FFF, h & 0x3FFF
        elif kind == b"VP8L" and data[20] == 0x2F:
            bits = int.from_bytes(data[21:25], "little")
            size = 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    elif data[:2] == b"\xff\xd8":
        size = _jpeg_size(data)
    return size if size is not None and min(size) > 0 else None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:  # a fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        # A start-of-frame marker (C0-CF, but not DHT C4, JPG C8 or DAC CC) carries the picture's size.
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and pos + 9 <= len(data):
            h, w = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return w, h
        pos += 2 + length
    return None


def _parts(content: Any) -> Iterator[dict]:
    if isinstance(content, list):
        yield from (part for part in content if isinstance(part, dict))


def content_text(content: Any) -> str:
    """What of a message's content is text: the string, or its text parts joined."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text") or "" for part in _parts(content) if part.get("type") == "text")


def image_urls(content: Any) -> list[str]:
    return [part["image_url"]["url"] for part in _parts(content) if part.get("type") == "image_url"]


def reserved_image_tokens(messages: list[dict]) -> int:
    """The tokens reserved for every image of `messages` (already checked, so each one reads)."""
    return sum(
        read_data_url(url, f"messages[{index}]").reserved_tokens
        for index, message in enumerate(messages)
        for url in image_urls(message.get("content"))
    )


def has_images(messages: list[dict]) -> bool:
    return any(image_urls(message.get("content")) for message in messages)
