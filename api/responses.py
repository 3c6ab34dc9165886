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


def completion(*, completion_id: str, model: str, choices: list[dict], usage_body: dict) -> dict:
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage_body,
    }


def message(content: str, tool_calls: list[dict]) -> dict:
    """An answer's message: with tool calls and no text, its content is null, as OpenAI sends it."""
    if tool_calls:
        return {"role": "assistant", "content": content or None, "tool_calls": tool_calls}
    return {"role": "assistant", "content": content}


def logprobs_body(entries: list[dict] | None) -> dict | None:
    return None if entries is None else {"content": entries, "refusal": None}


def tool_call_delta(call: dict) -> dict:
    """A tool-call delta in OpenAI's chunk shape: the first of a call names it (id, type, name), the
    rest carry argument fragments; the engine's explicit nulls are left out, as OpenAI does."""
    function = {k: v for k, v in (call.get("function") or {}).items() if v is not None}
    delta = {k: v for k, v in call.items() if v is not None and k != "function"}
    delta["function"] = function
    return delta


def chunk(
    *,
    completion_id: str,
    model: str,
    created: int,
    choices: list[dict] | None = None,
    usage_body: dict | None = None,
) -> str:
    """One `chat.completion.chunk`: some choices' deltas, or (with `usage_body`) the usage after them."""
    body = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [] if usage_body is not None else choices or [],
    }
    if usage_body is not None:
        body["usage"] = usage_body
    return f"data: {json.dumps(body)}\n\n"


def choice_delta(index: int, delta: dict, *, finish_reason: str | None = None, logprobs: dict | None = None) -> dict:
    return {"index": index, "delta": delta, "finish_reason": finish_reason, "logprobs": logprobs}


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
