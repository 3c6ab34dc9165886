"""Images in chat messages, as SGLang serves a Qwen2-VL-style vision model (sglang-protocol.md §10.12).

``--enable-multimodal`` makes the simulated model vision-capable: ``/model_info`` reports
``has_image_understanding: true`` and ``/v1/chat/completions`` accepts ``image_url`` content parts.
Without it the model is text-only and any media part is refused with SGLang's 400
``Model only supports text input; received unsupported content type 'image_url'.``

Which URLs: a ``data:`` URL (``data:image/png;base64,...``) or bare base64, as SGLang accepts.
SGLang also fetches ``http(s)`` and reads ``file://`` URLs; the simulator never reaches the network
or the disk for a request, so it refuses those with a 400 that says so (its own sentence: SGLang's
error for an unreachable URL depends on the fetch library's exception text and is not reproduced).

How many tokens an image costs (deterministic, from the image's own header: PNG, JPEG, GIF, WebP;
only the header is decoded, no imaging library): Qwen2-VL's rule, as SGLang's ``qwen_vl`` processor
applies it. The image is resized (``smart_resize``) to sides that are multiples of 28 px (14 px patches
merged 2x2), keeping the aspect ratio, with between 4 and 16,384 such 28x28 cells; each cell is one
``<|image_pad|>`` token. The chat template wraps each image in ``<|vision_start|>`` … ``<|vision_end|>``,
so an image adds ``cells + 2`` tokens to ``prompt_tokens``; ``usage.prompt_tokens_details.image_tokens``
reports the cells (the pad tokens). Whether SGLang counts the two markers as image tokens is not
confirmed. An aspect ratio above 200 is refused, as Qwen2-VL's processor does.

The pad tokens of one image all carry an id derived from the image's bytes (SGLang pads with a hash of
the image for the same reason): two different images of the same size must not share a radix-cache prefix,
and the same image sent again must.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simulator import tokenizer as tok

PATCH = 28  # Qwen2-VL: 14 px patches, merged 2x2
MIN_CELLS = 4
MAX_CELLS = 16384
MAX_RATIO = 200
MEDIA_PART_TYPES = ("image_url", "video_url", "audio_url", "input_audio")

# Ids past the tokenizer's range: they never come out of decoding text, so no text collides with them.
VISION_START_ID = tok.vocab_size()
VISION_END_ID = VISION_START_ID + 1
_PAD_BASE = VISION_START_ID + 2


class ImageError(ValueError):
    """A request's image that cannot be used: its message is the 400's."""


def text_only_refusal(part_type: str) -> str:
    return f"Model only supports text input; received unsupported content type '{part_type}'."


@dataclass(frozen=True)
class Image:
    width: int
    height: int
    digest: int

    @property
    def cells(self) -> int:
        h, w = smart_resize(self.height, self.width)
        return (h // PATCH) * (w // PATCH)

    def token_ids(self) -> list[int]:
        pad = _PAD_BASE + self.digest % (1 << 30)
        return [VISION_START_ID, *([pad] * self.cells), VISION_END_ID]


def smart_resize(height: int, width: int) -> tuple[int, int]:
    """Qwen2-VL's resize: sides rounded to multiples of 28, area kept within [4, 16384] cells."""
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ImageError(
            f"absolute aspect ratio must be smaller than {MAX_RATIO}, got {max(height, width) / min(height, width)}"
        )
    h = max(PATCH, round(height / PATCH) * PATCH)
    w = max(PATCH, round(width / PATCH) * PATCH)
    if h * w > MAX_CELLS * PATCH * PATCH:
        beta = math.sqrt(height * width / (MAX_CELLS * PATCH * PATCH))
        h = max(PATCH, math.floor(height / beta / PATCH) * PATCH)
        w = max(PATCH, math.floor(width / beta / PATCH) * PATCH)
    elif h * w < MIN_CELLS * PATCH * PATCH:
        beta = math.sqrt(MIN_CELLS * PATCH * PATCH / (height * width))
        h = math.ceil(height * beta / PATCH) * PATCH
        w = math.ceil(width * beta / PATCH) * PATCH
    return h, w


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG, JPEG, GIF or WebP header."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24 and data[12:16] == b"IHDR":
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        kind = data[12:16]
        if kind == b"VP8X":
            return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
        if kind == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
            w, h = struct.unpack("<HH", data[26:30])
            return w & 0x3FFF, h & 0x3FFF
        if kind == b"VP8L" and data[20] == 0x2F:
            bits = int.from_bytes(data[21:25], "little")
            return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    raise ImageError("cannot identify image file: not a PNG, JPEG, GIF or WebP image")


def _jpeg_size(data: bytes) -> tuple[int, int]:
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            break
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        # Start-of-frame markers (C0-CF but DHT C4, JPG C8, DAC CC) carry the frame size.
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and pos + 9 <= len(data):
            h, w = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return w, h
        pos += 2 + length
    raise ImageError("cannot identify image file: a JPEG without a readable frame header")


def load_image(url: Any) -> Image:
    """An ``image_url.url``: a ``data:`` URL or bare base64 (nothing is fetched)."""
    if not isinstance(url, str) or not url:
        raise ImageError("image_url.url must be a non-empty string")
    lowered = url[:8].lower()
    if lowered.startswith(("http://", "https://", "file://")):
        raise ImageError(
            "The simulated engine does not fetch image URLs (SGLang would); send the image inline as a "
            "data: URL, for example data:image/png;base64,..."
        )
    payload = url
    if lowered.startswith("data:"):
        header, sep, payload = url.partition(",")
        if not sep or not header.endswith(";base64"):
            raise ImageError("a data: URL image must be base64-encoded (data:image/png;base64,...)")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageError(f"the image is not valid base64: {exc}") from exc
    width, height = image_size(data)
    if width < 1 or height < 1:
        raise ImageError("cannot identify image file: its header gives an empty size")
    return Image(width, height, int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big"))


def media_parts(messages: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Every non-text content part of the messages, in order."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            out += [p for p in content if isinstance(p, Mapping) and p.get("type") in MEDIA_PART_TYPES]
    return out


def check_media(messages: list[Mapping[str, Any]], *, multimodal: bool) -> list[Image]:
    """The request's images, in order; refuses media a text-only (or image-only) model cannot take."""
    images = []
    for part in media_parts(messages):
        kind = part["type"]
        if not multimodal or kind != "image_url":
            # The simulated vision model understands images only (has_audio_understanding is false).
            raise ImageError(text_only_refusal(kind))
        spec = part.get("image_url")
        if not isinstance(spec, Mapping):
            raise ImageError("image_url must be an object with a `url`")
        images.append(load_image(spec.get("url")))
    return images


#: Where an image sits in the rendered prompt until its tokens are spliced in (Qwen2-VL's template puts
#: ``<|vision_start|><|image_pad|><|vision_end|>`` there). A NUL never occurs in a chat template's text.
IMAGE_MARKER = "\x00image\x00"


def with_markers(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with each image part turned into a text part holding :data:`IMAGE_MARKER`."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(isinstance(p, Mapping) and p.get("type") == "image_url" for p in content):
            parts = [
                {"type": "text", "text": IMAGE_MARKER} if isinstance(p, Mapping) and p.get("type") == "image_url" else p
                for p in content
            ]
            message = {**message, "content": parts}
        out.append(message)
    return out


def splice_images(text: str, images: list[Image]) -> tuple[str, list[int]]:
    """The prompt's text without markers, and its ids with each image's tokens where its marker was."""
    pieces = text.split(IMAGE_MARKER)
    if len(pieces) != len(images) + 1:
        raise ImageError("the chat template placed a different number of images than the request holds")
    ids = tok.encode(pieces[0])
    for image, piece in zip(images, pieces[1:], strict=True):
        ids += image.token_ids() + tok.encode(piece)
    return "".join(pieces), ids
