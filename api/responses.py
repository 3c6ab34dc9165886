"""OpenAI's response and error shapes, so the official SDK reads them (and raises the right exceptions)."""

from __future__ import annotations

import json
import time

from django.http import JsonResponse

from config.refusals import NotFound, Refusal


def error_body(refusal: Refusal) -> dict:
    code = refusal.code
    if isinstance(refusal, NotFound) and refusal.details.get("model"):
        code = "model_not_found"
    return {
        "error": {
            "message": refusal.message,
            "type": refusal.api_type,
            "param": refusal.details.get("param"),
            "code": code,
        }
    }


def error_response(refusal: Refusal) -> JsonResponse:
    response = JsonResponse(error_body(refusal), status=refusal.status)
    if refusal.retry_after is not None:
        response["Retry-After"] = str(refusal.retry_after)
    return response


def usage(prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def completion(*, completion_id: str, model: str, text: str, finish_reason: str, usage_body: dict) -> dict:
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
                "logprobs": None,
            }
        ],
        "usage": usage_body,
    }


def chunk(
    *,
    completion_id: str,
    model: str,
    delta: dict,
    finish_reason: str | None = None,
    usage_body: dict | None = None,
    created: int,
) -> str:
    body = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": []
        if usage_body is not None
        else [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
    }
    if usage_body is not None:
        body["usage"] = usage_body
    return f"data: {json.dumps(body)}\n\n"


def stream_error(refusal: Refusal) -> str:
    return f"data: {json.dumps(error_body(refusal))}\n\n"


DONE = "data: [DONE]\n\n"


def model_object(model_id: str, *, context_window: int, created: int = 0) -> dict:
    """OpenAI's model object, with `context_window`: the tokens one request (prompt and answer) may
    hold on it under the key's plan (billing.selectors.context_window)."""
    return {
        "id": model_id,
        "object": "model",
        "created": created,
        "owned_by": "sglchat",
        "context_window": context_window,
    }
