"""OpenAI's response shapes, so the official SDK reads them. Its error shape is config.http's
`openai_error`: the one place that answers refusals decides that an API endpoint gets it."""

from __future__ import annotations

import time

from config.http import openai_error
from config.refusals import Refusal
from config.wire import json_bytes


def usage(prompt_tokens: int, cached_tokens: int, completion_tokens: int, image_tokens: int = 0) -> dict:
    details = {"cached_tokens": cached_tokens}
    if image_tokens:
        # As SGLang reports them: already counted in prompt_tokens (and billed with them).
        details["image_tokens"] = image_tokens
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": details,
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


class ChatShape:
    """`/v1/chat/completions`: messages, and chunks of deltas after a role chunk per choice."""

    prefix, whole_object, chunk_object = "chatcmpl-", "chat.completion", "chat.completion.chunk"

    @staticmethod
    def choice(*, index: int, content: str, tool_calls: list[dict], finish_reason: str, logprobs: list | None) -> dict:
        return {
            "index": index,
            "message": message(content, tool_calls),
            "finish_reason": finish_reason,
            "logprobs": logprobs_body(logprobs),
        }

    @staticmethod
    def opening(index: int, prompt: str) -> dict | None:
        return {"index": index, "delta": {"role": "assistant", "content": ""}, "finish_reason": None, "logprobs": None}

    @staticmethod
    def piece(*, index: int, content: str, tool_calls: tuple[dict, ...], logprobs: list | None) -> dict | None:
        delta: dict = {}
        if content:
            delta["content"] = content
        if tool_calls:
            delta["tool_calls"] = [tool_call_delta(call) for call in tool_calls]
        if not delta and logprobs is None:
            return None
        return {"index": index, "delta": delta, "finish_reason": None, "logprobs": logprobs_body(logprobs)}

    @staticmethod
    def finish(index: int, finish_reason: str) -> dict:
        return {"index": index, "delta": {}, "finish_reason": finish_reason, "logprobs": None}


class TextShape:
    """`/v1/completions`: each choice's text (after the prompt, with `echo`), in chunks of text."""

    prefix, whole_object, chunk_object = "cmpl-", "text_completion", "text_completion"

    @staticmethod
    def choice(*, index: int, content: str, tool_calls: list[dict], finish_reason: str, logprobs: list | None) -> dict:
        return {"index": index, "text": content, "finish_reason": finish_reason, "logprobs": None}

    @staticmethod
    def opening(index: int, prompt: str) -> dict | None:
        return {"index": index, "text": prompt, "finish_reason": None, "logprobs": None} if prompt else None

    @staticmethod
    def piece(*, index: int, content: str, tool_calls: tuple[dict, ...], logprobs: list | None) -> dict | None:
        return {"index": index, "text": content, "finish_reason": None, "logprobs": None} if content else None

    @staticmethod
    def finish(index: int, finish_reason: str) -> dict:
        return {"index": index, "text": "", "finish_reason": finish_reason, "logprobs": None}


Shape = type[ChatShape] | type[TextShape]


def whole(shape: Shape, *, completion_id: str, model: str, choices: list[dict], usage_body: dict) -> dict:
    return {
        "id": completion_id,
        "object": shape.whole_object,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage_body,
    }


def chunk(
    shape: Shape,
    *,
    completion_id: str,
    model: str,
    created: int,
    choices: list[dict] | None = None,
    usage_body: dict | None = None,
) -> bytes:
    """One chunk of the stream: some choices' pieces, or (with `usage_body`) the usage after them.
    Bytes, written once: the response sends them as they are."""
    body = {
        "id": completion_id,
        "object": shape.chunk_object,
        "created": created,
        "model": model,
        "choices": [] if usage_body is not None else choices or [],
    }
    if usage_body is not None:
        body["usage"] = usage_body
    return b"data: " + json_bytes(body) + b"\n\n"


def stream_error(refusal: Refusal) -> bytes:
    return b"data: " + json_bytes(openai_error(refusal)) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def model_object(model_id: str, *, context_window: int, capabilities: dict, created: int = 0) -> dict:
    """OpenAI's model object, with `context_window`: the tokens one request (prompt and answer) may
    hold on it under the key's plan (billing.selectors.context_window), and `capabilities`: what it
    can do, as its engines say (inference.capabilities; null while none has said)."""
    return {
        "id": model_id,
        "object": "model",
        "created": created,
        "owned_by": "sglchat",
        "context_window": context_window,
        "capabilities": capabilities,
    }
