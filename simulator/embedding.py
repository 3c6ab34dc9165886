"""The simulated embedding server (``--is-embedding``): SGLang's ``/v1/embeddings`` and ``/encode``.

Shapes as the protocol note §10.6 gives them for SGLang 0.5.23: ``input`` is a string, a list of
strings, a list of token ids or a list of id lists; ``encoding_format`` is ``float`` or ``base64``
(little-endian float32), anything else is a 400; the response's ``model`` is the model PATH, not the
name asked for; ``usage`` counts the prompt tokens of every input (the simulator's own tokenizer).
A generation server answers both routes with SGLang's 400 (:data:`NOT_EMBEDDING`).

The vectors are not a model's. Each is a fixed-size (``--embedding-dim``, 384 by default) signed
feature-hashing of the text's normalised words and of the character 3- and 4-grams of each word,
weighted 1 + ln(tf), L2-normalised. Features are hashed with BLAKE2b, so the same text gives the same
vector in every process. What this gives: texts that share words (or word pieces: "cache", "caching")
have a clearly higher cosine than texts that share none, so retrieval can be tested; what it does not
give: meaning. Synonyms ("car", "automobile") are no closer than any two unrelated words, and word
order is ignored. Token-id inputs are decoded to text first, so ids and their text embed alike.

``dimensions`` (OpenAI's, SGLang's Matryoshka truncation) is refused unless the server was started
with ``--matryoshka-dimensions``; then one of those sizes keeps the first N coordinates,
re-normalised. The requests do not pass through the simulated scheduler (no queue, no KV cache);
each costs the timing preset's prefill time for its tokens.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import re
import struct
import time
import unicodedata
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from simulator import tokenizer as tok
from simulator.config import SimulatorConfig
from simulator.sampling import SchemaError, parse_priority
from simulator.sse import native_error, openai_error

#: SGLang's answer when an embedding route reaches a generation server (protocol note §10.6).
NOT_EMBEDDING = (
    "This model does not appear to be an embedding model by default. Please add `--is-embedding` when "
    "launching the server or try another model."
)
#: The simulator's answer when a generation route reaches its embedding server. What SGLang 0.5.23 does
#: there is not confirmed (protocol note §10.6); the simulator refuses rather than invent an answer.
NOT_GENERATION = (
    "This model is an embedding model (the server was started with `--is-embedding`); it does not generate text."
)
ENCODING_FORMATS = ("float", "base64")
#: How much a character n-gram counts next to a whole word.
NGRAM_WEIGHT = 0.5
NGRAM_SIZES = (3, 4)
_WORD_RE = re.compile(r"\w+")


def _words(text: str) -> list[str]:
    return _WORD_RE.findall(unicodedata.normalize("NFKC", text).casefold())


def _features(text: str) -> Counter[str]:
    feats: Counter[str] = Counter()
    for word in _words(text):
        feats["w:" + word] += 1
        padded = f"<{word}>"
        for n in NGRAM_SIZES:
            for i in range(len(padded) - n + 1):
                feats["c:" + padded[i : i + n]] += 1
    return feats


def _bucket(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return (value >> 1) % dim, (1.0 if value & 1 else -1.0)


def embed_text(text: str, dim: int) -> list[float]:
    """The unit vector of `text` (see the module's docstring for what it is)."""
    vector = [0.0] * dim
    feats = _features(text)
    if not feats:
        feats = Counter({"empty:": 1})  # still a unit vector, the same for every text without words
    for feature, tf in feats.items():
        index, sign = _bucket(feature, dim)
        weight = 1.0 + math.log(tf)
        vector[index] += sign * weight * (1.0 if feature.startswith("w:") else NGRAM_WEIGHT)
    return _normalised(vector)


def _normalised(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        # Every feature cancelled out (possible, if unlikely, with signed hashing): a fixed unit vector.
        return [1.0] + [0.0] * (len(vector) - 1)
    return [x / norm for x in vector]


def encode_base64(vector: list[float]) -> str:
    """SGLang's base64 form: the little-endian float32 bytes of the vector."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


@dataclass
class EmbeddingInput:
    """One input: its text (token ids are decoded) and how many prompt tokens it is."""

    text: str
    tokens: int


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value)


def parse_inputs(value: Any, *, name: str = "input") -> tuple[list[EmbeddingInput], bool]:
    """The inputs of a request, and whether it was a batch (a list of strings or of id lists)."""
    if isinstance(value, str):
        return [EmbeddingInput(value, len(tok.encode(value)))], False
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return [EmbeddingInput(v, len(tok.encode(v))) for v in value], True
        if _is_ids(value):
            return [EmbeddingInput(tok.decode(value), len(value))], False
        if all(_is_ids(v) and v for v in value):
            return [EmbeddingInput(tok.decode(v), len(v)) for v in value], True
    if isinstance(value, list) and not value:
        raise SchemaError(f"`{name}` cannot be empty")
    raise SchemaError(f"`{name}` must be a string, a list of strings, a list of token ids or a list of id lists")


class EmbeddingAPI:
    def __init__(self, config: SimulatorConfig) -> None:
        self.cfg = config

    # -- shared -----------------------------------------------------------------------------------

    def _check_lengths(self, inputs: list[EmbeddingInput]) -> None:
        ctx = self.cfg.context_length
        for item in inputs:
            if item.tokens > ctx:
                raise SchemaError(
                    f"The input ({item.tokens} tokens) is longer than the model's context length ({ctx} tokens)."
                )

    def _dimensions(self, value: Any) -> int | None:
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SchemaError("Requested dimensions must be greater than 0")
        allowed = self.cfg.matryoshka_dimensions
        name = self.cfg.served_model_name
        if not allowed:
            raise SchemaError(
                f"Model '{name}' does not support matryoshka representation, changing output dimensions "
                "will lead to poor results."
            )
        if value not in allowed:
            raise SchemaError(
                f"Model '{name}' only supports {sorted(allowed)} matryoshka dimensions, using other output "
                "dimensions will lead to poor results."
            )
        return value

    def vector(self, text: str, dimensions: int | None) -> list[float]:
        vector = embed_text(text, self.cfg.embedding_dim)
        if dimensions is not None and dimensions < len(vector):
            vector = _normalised(vector[:dimensions])
        return vector

    async def _cost(self, tokens: int) -> None:
        delay = self.cfg.timing.prefill_time(tokens)
        await asyncio.sleep(delay if delay > 0 else 0)

    @staticmethod
    async def _json(request: Request) -> Any:
        try:
            return json.loads(await request.body())
        except ValueError as exc:
            raise SchemaError(f"The request body is not valid JSON: {exc}") from exc

    # -- /v1/embeddings ---------------------------------------------------------------------------

    async def embeddings(self, request: Request) -> Response:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            return openai_error(400, "Unsupported Media Type: Only 'application/json' is allowed")
        try:
            body = await self._json(request)
            if not isinstance(body, dict):
                raise SchemaError("invalid request: expected a JSON object")
            inputs, _ = parse_inputs(body.get("input"))
            fmt = body.get("encoding_format") or "float"
            if fmt not in ENCODING_FORMATS:
                raise SchemaError(f"Unsupported encoding_format: {fmt!r}; use 'float' or 'base64'.")
            dimensions = self._dimensions(body.get("dimensions"))
            parse_priority(body)
            self._check_lengths(inputs)
        except SchemaError as exc:
            return openai_error(400, str(exc))
        tokens = sum(item.tokens for item in inputs)
        await self._cost(tokens)
        data = []
        for index, item in enumerate(inputs):
            vector = self.vector(item.text, dimensions)
            data.append(
                {
                    "embedding": encode_base64(vector) if fmt == "base64" else vector,
                    "index": index,
                    "object": "embedding",
                }
            )
        return JSONResponse(
            {
                "data": data,
                "model": self.cfg.model_path,
                "object": "list",
                "usage": {
                    "prompt_tokens": tokens,
                    "total_tokens": tokens,
                    "completion_tokens": 0,
                    "prompt_tokens_details": None,
                    "reasoning_tokens": 0,
                    "completion_tokens_details": None,
                },
            }
        )

    # -- /encode ----------------------------------------------------------------------------------

    async def encode(self, request: Request) -> Response:
        start = time.monotonic()
        try:
            body = await self._json(request)
            if not isinstance(body, dict):
                raise SchemaError("invalid type: expected a JSON object")
            given = [k for k in ("text", "input_ids") if body.get(k) is not None]
            if len(given) != 1:
                raise SchemaError("Exactly one of `text` or `input_ids` must be given.")
            inputs, batch = parse_inputs(body[given[0]], name=given[0])
            dimensions = self._dimensions(body.get("dimensions"))
            self._check_lengths(inputs)
        except SchemaError as exc:
            return native_error(400, str(exc))
        rids = body.get("rid")
        if not isinstance(rids, list):
            rids = [rids] * len(inputs)
        await self._cost(sum(item.tokens for item in inputs))
        latency = round(time.monotonic() - start, 6)
        out = [
            {
                "embedding": self.vector(item.text, dimensions),
                "meta_info": {
                    "id": str(rid) if isinstance(rid, str) and rid else uuid.uuid4().hex,
                    "prompt_tokens": item.tokens,
                    "weight_version": "default",
                    "e2e_latency": latency,
                },
            }
            for item, rid in zip(inputs, rids + [None] * (len(inputs) - len(rids)), strict=False)
        ]
        return JSONResponse(out if batch else out[0])


async def not_embedding(request: Request) -> Response:
    """A generation server's answer to /v1/embeddings (OpenAI envelope) and /encode (native)."""
    if request.url.path == "/encode":
        return native_error(400, NOT_EMBEDDING)
    return openai_error(400, NOT_EMBEDDING)


async def not_generation(request: Request) -> Response:
    """An embedding server's answer to the generation routes (not confirmed for SGLang; see above)."""
    if request.url.path == "/generate":
        return native_error(400, NOT_GENERATION)
    return openai_error(400, NOT_GENERATION)
