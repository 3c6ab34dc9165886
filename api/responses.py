"""OpenAI's response shapes, so the official SDK reads them. Its error shape is config.http's
`openai_error`: the one place that answers refusals decides that an API endpoint gets it."""

from __future__ import annotations

import json
import time

from config.http import openai_error
from config.refusals import Refusal


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
    return f"data: {json.dumps(openai_error(refusal))}\n\n"


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
