"""`POST /v1/embeddings`: OpenAI's embeddings endpoint. Thin: authenticate, parse, call the service
(api.embedding_service admits, routes, runs and bills), render OpenAI's list of embeddings."""

from __future__ import annotations

import base64
import struct

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from api import answering, embedding_service
from config.http import OPENAI, client_ip, refusal_response, speaks
from config.refusals import Refusal


def _encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        # OpenAI's (and SGLang's) form: the little-endian float32 bytes, base64.
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return vector


@csrf_exempt
@speaks(OPENAI)
async def embeddings(request: HttpRequest) -> JsonResponse:
    try:
        # The key before the body, as for completions: without a valid one nothing is parsed.
        key = request.api_key = await answering.authenticate(request)
        ask = embedding_service.parse(answering.read_body(request))
        result = await embedding_service.create_embeddings(key, ask, client_ip(request))
    except Refusal as refusal:
        return refusal_response(request, refusal)
    return JsonResponse(
        {
            "object": "list",
            "data": [
                {"object": "embedding", "index": index, "embedding": _encoded(vector, ask.encoding_format)}
                for index, vector in enumerate(result.vectors)
            ],
            "model": result.model,
            "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
        }
    )
